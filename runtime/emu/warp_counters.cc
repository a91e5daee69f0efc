// Note [emulated memory counters] and Note [emulated instruction counters]
// (grid_runner.h): what a warp's recorded accesses and block starts add to
// a launch's counters.
#include <algorithm>
#include <span>
#include <unordered_map>

#include "runtime/emu/grid_block.h"

namespace gptc::rt::emu {

namespace abi = program::emu;

namespace {

// Note [emulated memory counters]: the distinct 32-byte sectors of the
// lanes' accesses, or the wavefronts of a shared-memory instruction.
uint64_t Sectors(std::span<const AccessRecord> lanes) {
  thread_local std::vector<uintptr_t> sectors;
  sectors.clear();
  for (const AccessRecord& r : lanes) {
    for (uintptr_t s = r.address / 32; s <= (r.address + r.bytes - 1) / 32; ++s) {
      sectors.push_back(s);
    }
  }
  std::sort(sectors.begin(), sectors.end());
  return static_cast<uint64_t>(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
}

uint64_t Wavefronts(std::span<const AccessRecord> lanes) {
  thread_local std::vector<uintptr_t> words;
  words.clear();
  for (const AccessRecord& r : lanes) {
    for (uintptr_t w = r.address / 4; w <= (r.address + r.bytes - 1) / 4; ++w) words.push_back(w);
  }
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  uint64_t per_bank[32] = {};
  uint64_t most = 0;
  for (uintptr_t w : words) most = std::max(most, ++per_bank[w % 32]);
  return std::max<uint64_t>(most, (words.size() * 4 + 127) / 128);
}

// One warp-level instruction: its lanes' accesses.
void CountInstruction(std::span<const AccessRecord> lanes, LaunchCounters& counters) {
  const bool store = (lanes[0].kind & abi::kStore) != 0;
  if ((lanes[0].kind & abi::kSpaceMask) == abi::kSharedSpace) {
    (store ? counters.shared_store_requests : counters.shared_load_requests) += 1;
    (store ? counters.shared_store_wavefronts : counters.shared_load_wavefronts) +=
        Wavefronts(lanes);
    return;
  }
  uint64_t bytes = 0;
  for (const AccessRecord& r : lanes) bytes += r.bytes;
  (store ? counters.global_store_requests : counters.global_load_requests) += 1;
  (store ? counters.global_store_sectors : counters.global_load_sectors) += Sectors(lanes);
  (store ? counters.global_store_bytes : counters.global_load_bytes) += bytes;
}

bool SameInstruction(const AccessRecord& a, const AccessRecord& b) {
  return a.site == b.site && a.execution == b.execution &&
         (a.kind & (abi::kSpaceMask | abi::kStore)) == (b.kind & (abi::kSpaceMask | abi::kStore));
}

// A hash of what SameInstruction compares.
uint64_t InstructionHash(const AccessRecord& r) {
  const uint64_t kind = r.kind & (abi::kSpaceMask | abi::kStore);
  return ((uint64_t{r.site} * 0x9e3779b97f4a7c15ull) ^ (uint64_t{r.execution} << 8) ^ kind) *
         0xbf58476d1ce4e5b9ull;
}

}  // namespace

// Note [emulated memory counters] for one warp, whose lanes' records are
// then cleared. While the lanes made the same accesses in the same order
// (no divergence yet) they pair up by position; the rest is sorted by
// instruction.
void CountWarp(std::span<EmuThread> lanes, LaunchCounters& counters) {
  thread_local std::vector<AccessRecord> group;
  size_t shortest = lanes[0].records.size();
  for (const EmuThread& t : lanes) shortest = std::min(shortest, t.records.size());
  size_t common = 0;
  for (; common < shortest; ++common) {
    const AccessRecord& first = lanes[0].records[common];
    bool same = true;
    for (const EmuThread& t : lanes) same = same && SameInstruction(t.records[common], first);
    if (!same) break;
  }
  for (size_t i = 0; i < common; ++i) {
    group.clear();
    for (const EmuThread& t : lanes) group.push_back(t.records[i]);
    CountInstruction(group, counters);
  }
  group.clear();
  for (const EmuThread& t : lanes) {
    group.insert(group.end(), t.records.begin() + static_cast<std::ptrdiff_t>(common),
                 t.records.end());
  }
  if (!group.empty()) {
    // Grouped by instruction in linear time: an open-addressing table of
    // each instruction's first record gives every record its instruction's
    // number, then a counting sort.
    constexpr uint32_t kEmpty = ~uint32_t{0};
    thread_local std::vector<uint32_t> first, ids, offsets, of;
    thread_local std::vector<AccessRecord> sorted;
    size_t size = 64;
    while (size < 2 * group.size()) size *= 2;
    first.assign(size, kEmpty);
    ids.assign(size, 0);
    offsets.assign(1, 0);
    of.resize(group.size());
    for (size_t i = 0; i < group.size(); ++i) {
      size_t h = InstructionHash(group[i]) >> 20 & (size - 1);
      while (first[h] != kEmpty && !SameInstruction(group[first[h]], group[i])) {
        h = (h + 1) & (size - 1);
      }
      if (first[h] == kEmpty) {
        first[h] = static_cast<uint32_t>(i);
        ids[h] = static_cast<uint32_t>(offsets.size() - 1);
        offsets.push_back(0);
      }
      of[i] = ids[h];
      ++offsets[ids[h] + 1];
    }
    for (size_t g = 1; g < offsets.size(); ++g) offsets[g] += offsets[g - 1];
    sorted.resize(group.size());
    std::vector<uint32_t> next(offsets.begin(), offsets.end() - 1);
    for (size_t i = 0; i < group.size(); ++i) sorted[next[of[i]]++] = group[i];
    for (size_t g = 0; g + 1 < offsets.size(); ++g) {
      CountInstruction(
          std::span<const AccessRecord>(sorted.data() + offsets[g], offsets[g + 1] - offsets[g]),
          counters);
    }
  }
  for (EmuThread& t : lanes) t.records.clear();
}

// Note [emulated instruction counters] for one warp, whose lanes' block
// starts are then cleared.
void CountWarpInstructions(std::span<EmuThread> lanes, std::span<const uint32_t* const> mix,
                           LaunchCounters& counters) {
  size_t sites = 0;
  for (const EmuThread& t : lanes) sites = std::max(sites, t.block_starts.size());
  for (size_t s = 0; s < sites; ++s) {
    uint64_t most = 0;
    for (const EmuThread& t : lanes) {
      if (s < t.block_starts.size()) most = std::max<uint64_t>(most, t.block_starts[s]);
    }
    if (most == 0 || s >= mix.size() || mix[s] == nullptr) continue;
    for (uint32_t k = 0; k < abi::kNumInstructionClasses; ++k) {
      counters.instructions[k] += most * mix[s][k];
    }
  }
  for (EmuThread& t : lanes) std::fill(t.block_starts.begin(), t.block_starts.end(), 0);
}

void LaunchCounters::Add(const LaunchCounters& o) {
  global_load_requests += o.global_load_requests;
  global_load_sectors += o.global_load_sectors;
  global_load_bytes += o.global_load_bytes;
  global_store_requests += o.global_store_requests;
  global_store_sectors += o.global_store_sectors;
  global_store_bytes += o.global_store_bytes;
  shared_load_requests += o.shared_load_requests;
  shared_load_wavefronts += o.shared_load_wavefronts;
  shared_store_requests += o.shared_store_requests;
  shared_store_wavefronts += o.shared_store_wavefronts;
  for (size_t k = 0; k < instructions.size(); ++k) instructions[k] += o.instructions[k];
}

uint64_t LaunchCounters::Instructions() const {
  uint64_t n = 0;
  for (uint64_t k : instructions) n += k;
  return n;
}

}  // namespace gptc::rt::emu
