#include "runtime/emu/memory_checker.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "compiler/program/emu_abi.h"

namespace gptc::rt::emu {

namespace abi = program::emu;

namespace {

template <typename T>
T* Reserve(size_t count) {
  if (count == 0) return nullptr;
  void* m = mmap(nullptr, count * sizeof(T), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return m == MAP_FAILED ? nullptr : static_cast<T*>(m);
}

template <typename T>
void Release(T* p, size_t count) {
  if (p != nullptr) munmap(p, count * sizeof(T));
}

size_t Words(size_t bytes) { return (bytes + 3) / 4; }

// Note [emulated races]: the cell of a 2-byte unit of a launch's results
// (bf16 neighbours are different threads' elements), 64 bits: the block
// (30; kManyBlocks when readers came from several), the thread (10), the
// block's barrier epoch (22), written (1), several readers (1). Cells live
// for one launch.
struct Cell {
  uint32_t block, thread, epoch;
  bool written, many;
};
constexpr uint32_t kManyBlocks = (1u << 30) - 1;
constexpr uint32_t kEpochMask = (1u << 22) - 1;
constexpr uint64_t kEmptyCell = 0;  // block field 0 is stored as block + 1

uint64_t Pack(const Cell& c) {
  return uint64_t{(c.block + 1) & 0x3fffffff} << 34 | uint64_t{c.thread & 0x3ff} << 24 |
         uint64_t{c.epoch & kEpochMask} << 2 | uint64_t{c.written} << 1 | uint64_t{c.many};
}

Cell Unpack(uint64_t v) {
  return Cell{static_cast<uint32_t>((v >> 34 & 0x3fffffff) - 1),
              static_cast<uint32_t>(v >> 24 & 0x3ff), static_cast<uint32_t>(v >> 2 & kEpochMask),
              (v >> 1 & 1) != 0, (v & 1) != 0};
}

// The results of a thunk: what it writes.
std::vector<gpu::ArenaSlice> Results(const gpu::Thunk& t) {
  std::vector<gpu::ArenaSlice> out;
  if (const auto* k = std::get_if<gpu::KernelThunk>(&t.body)) {
    if (k->operands >= 0) out.assign(k->args.begin() + k->operands, k->args.end());
  } else if (const auto* g = std::get_if<gpu::GemmThunk>(&t.body)) {
    out.push_back(g->d);
    if (g->aux && program::WritesAux(g->config.epilogue))
      out.push_back(*g->aux);  // DGELU only reads it
    if (g->bias && program::WritesBias(g->config.epilogue)) out.push_back(*g->bias);
  } else if (const auto* c = std::get_if<gpu::CopyThunk>(&t.body)) {
    out.push_back(c->dst);
  } else if (const auto* c = std::get_if<gpu::ConstantThunk>(&t.body)) {
    out.push_back(c->dst);
  } else if (const auto* a = std::get_if<gpu::AllReduceThunk>(&t.body)) {
    out.push_back(a->out);
  }
  return out;
}

bool Overlaps(const char* a, size_t an, const char* b, size_t bn) {
  return a < b + bn && b < a + an;
}

}  // namespace

MemoryChecker::~MemoryChecker() {
  for (auto& [base, a] : allocations_) Release(a.stamps, Words(a.size));
  Release(cells_, cell_capacity_);
}

void MemoryChecker::AddAllocation(char* base, size_t size, std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  Allocation a{.base = base, .size = size, .what = std::move(what)};
  if (checks_) {
    a.stamps = Reserve<std::atomic<uint32_t>>(Words(size));
  }
  allocations_[reinterpret_cast<uintptr_t>(base)] = std::move(a);
}

void MemoryChecker::RemoveAllocation(char* base) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(base));
  if (it == allocations_.end()) return;
  Release(it->second.stamps, Words(it->second.size));
  allocations_.erase(it);
}

MemoryChecker::Allocation* MemoryChecker::Find(const void* p, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = allocations_.upper_bound(at);
  if (it == allocations_.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  if (at + bytes > reinterpret_cast<uintptr_t>(a.base) + a.size) return nullptr;
  return &a;
}

std::string MemoryChecker::Where(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = allocations_.upper_bound(at);
  if (it != allocations_.begin()) {
    --it;
    const Allocation& a = it->second;
    const uintptr_t base = reinterpret_cast<uintptr_t>(a.base);
    if (at < base + a.size) return fmt::format("{} + {}", a.what, at - base);
    return fmt::format("{} bytes past the end of {} ({} bytes)", at - base - a.size, a.what,
                       a.size);
  }
  return fmt::format("{} (no device allocation)", p);
}

void MemoryChecker::AddEntry(const gpu::EntryPlan& plan, const char* arena) {
  std::lock_guard<std::mutex> lock(mu_);
  // A guest's arena is its host's (Note [arena guests]): named for the host.
  const bool named = std::any_of(entries_.begin(), entries_.end(),
                                 [&](const Entry& e) { return e.arena == arena; });
  if (Allocation* a = Find(arena, 1); a != nullptr && a->base == arena && !named) {
    a->what = fmt::format("arena of {}", plan.name());
  }
  entries_.push_back(Entry{&plan, arena, std::vector<uint32_t>(plan.buffers.size(), 0)});
}

void MemoryChecker::RemoveEntry(const gpu::EntryPlan& plan) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(entries_, [&](const Entry& e) { return e.plan == &plan; });
}

MemoryChecker::Entry* MemoryChecker::FindEntry(const gpu::EntryPlan* plan) {
  for (Entry& e : entries_) {
    if (e.plan == plan) return &e;
  }
  return nullptr;
}

const MemoryChecker::Entry* MemoryChecker::FindEntry(const gpu::EntryPlan* plan) const {
  for (const Entry& e : entries_) {
    if (e.plan == plan) return &e;
  }
  return nullptr;
}

uint32_t MemoryChecker::NewEvent(WriteEvent e) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(e));
  return static_cast<uint32_t>(events_.size() - 1);
}

std::string MemoryChecker::DescribeEvent(uint32_t event) const {
  if (event == 0 || event >= events_.size()) return "nothing (never written)";
  const WriteEvent& e = events_[event];
  if (e.plan != nullptr) {
    return fmt::format("entry {} {}", e.plan->name(), e.plan->thunks[e.thunk].Describe());
  }
  return e.what;
}

std::string MemoryChecker::BufferName(const gpu::EntryPlan& plan, const gpu::ArenaSlice& slice) {
  if (const gpu::PlanBuffer* b = plan.FindBuffer(slice.buffer)) return "%" + b->name;
  return fmt::format("[{}, +{})", slice.offset, slice.size);
}

bool MemoryChecker::Ordered(uint32_t event, const StreamPosition& pos) const {
  if (event == 0 || event >= events_.size()) return true;
  const WriteEvent& e = events_[event];
  if (e.stream == pos.stream || pos.known == nullptr) return true;
  return static_cast<size_t>(e.stream) < pos.known->size() && (*pos.known)[e.stream] >= e.clock;
}

std::string MemoryChecker::DescribeMismatch(const char* p, size_t n, uint32_t event) {
  Allocation* a = Find(p, n);
  if (a == nullptr || a->stamps == nullptr) return "";
  const size_t first = static_cast<size_t>(p - a->base) / 4, last = Words(p - a->base + n);
  size_t w = first;
  while (w < last && a->stamps[w].load(std::memory_order_relaxed) == event) ++w;
  if (w == last) return "";
  const uint32_t found = a->stamps[w].load(std::memory_order_relaxed);
  size_t end = w;
  while (end < last && a->stamps[end].load(std::memory_order_relaxed) == found) ++end;
  return fmt::format("bytes [{}, {}) hold what {} wrote", (w - first) * 4,
                     std::min<size_t>((end - first) * 4, n), DescribeEvent(found));
}

void MemoryChecker::Restamp(const char* p, size_t n, uint32_t from, uint32_t to) {
  Allocation* a = Find(p, n);
  if (a == nullptr || a->stamps == nullptr) return;
  const size_t first = static_cast<size_t>(p - a->base) / 4, last = Words(p - a->base + n);
  for (size_t w = first; w < last; ++w) {
    if (a->stamps[w].load(std::memory_order_relaxed) == from) {
      a->stamps[w].store(to, std::memory_order_relaxed);
    }
  }
}

Status MemoryChecker::CheckRead(const char* p, size_t n, const StreamPosition& pos,
                                const std::string& who) {
  if (!checks_ || n == 0) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  Allocation* a = Find(p, n);
  if (a == nullptr || a->stamps == nullptr) return Status::Ok();  // host memory
  for (const Flight& f : flights_) {
    if (Overlaps(p, n, f.out, f.out_bytes)) {
      return Error("{}: reads {} while {} is in flight (before its bucket's wait)", who, Where(p),
                   f.who);
    }
  }
  const size_t first = static_cast<size_t>(p - a->base) / 4, last = Words(p - a->base + n);
  uint32_t checked = 0;
  for (size_t w = first; w < last; ++w) {
    const uint32_t s = a->stamps[w].load(std::memory_order_relaxed);
    if (s == checked) continue;
    if (s == 0) {
      return Error("{}: reads {} bytes at {}, of which {} were never written", who, n, Where(p),
                   Where(a->base + w * 4));
    }
    if (!Ordered(s, pos)) {
      return Error(
          "{}: reads {} written by {} on another stream with nothing ordering the two "
          "(Note [stream order])",
          who, Where(a->base + w * 4), DescribeEvent(s));
    }
    checked = s;
  }
  return Status::Ok();
}

Status MemoryChecker::Write(const char* p, size_t n, uint32_t event, const StreamPosition& pos,
                            const std::string& who, bool stamp) {
  if (!checks_ || n == 0) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  Allocation* a = Find(p, n);
  if (a == nullptr || a->stamps == nullptr) return Status::Ok();
  for (const Flight& f : flights_) {
    if (Overlaps(p, n, f.out, f.out_bytes) || Overlaps(p, n, f.in, f.in_bytes)) {
      return Error("{}: writes {} while {} is in flight (before its bucket's wait)", who, Where(p),
                   f.who);
    }
  }
  const size_t first = static_cast<size_t>(p - a->base) / 4, last = Words(p - a->base + n);
  uint32_t checked = 0;
  for (size_t w = first; w < last; ++w) {
    const uint32_t s = a->stamps[w].load(std::memory_order_relaxed);
    if (s != checked && s != 0 && !Ordered(s, pos)) {
      return Error(
          "{}: overwrites {} written by {} on another stream with nothing ordering the "
          "two (Note [stream order])",
          who, Where(a->base + w * 4), DescribeEvent(s));
    }
    checked = s;
    if (stamp) a->stamps[w].store(event, std::memory_order_relaxed);
  }
  return Status::Ok();
}

Status MemoryChecker::CheckHostRead(const char* p, size_t n, const StreamPosition& pos,
                                    const std::string& who) {
  if (!checks_) return Status::Ok();
  RETURN_IF_ERROR(CheckRead(p, n, pos, who));
  uint32_t expected = 0;
  if (!ExpectedOutput(p, n, &expected)) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  std::string mismatch = DescribeMismatch(p, n, expected);
  if (expected == 0 || !mismatch.empty()) {
    return Error("{}: reads an entry output at {} that its producer ({}) did not write in full: {}",
                 who, Where(p), DescribeEvent(expected),
                 mismatch.empty() ? "nothing produced it" : mismatch);
  }
  return Status::Ok();
}

void MemoryChecker::Touch(uint32_t event, int stream, uint64_t clock) {
  std::lock_guard<std::mutex> lock(mu_);
  if (event == 0 || event >= events_.size()) return;
  events_[event].stream = stream;
  events_[event].clock = clock;
}

const char* MemoryChecker::ArenaOf(const gpu::EntryPlan* plan) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry* e = FindEntry(plan);
  return e != nullptr ? e->arena : nullptr;
}

Status MemoryChecker::CheckOperand(const ThunkContext& ctx, const gpu::ArenaSlice& slice,
                                   const char* what, const StreamPosition& pos) {
  if (!checks_ || ctx.plan == nullptr || slice.size == 0) return Status::Ok();
  std::unique_lock<std::mutex> lock(mu_);
  const Entry* entry = FindEntry(ctx.plan);
  if (entry == nullptr) return Status::Ok();
  const gpu::Thunk& thunk = *ctx.get();
  const char* p = entry->arena + slice.offset;
  const std::string who = fmt::format("entry {} {}", ctx.plan->name(), thunk.Describe());
  const std::string name = BufferName(*ctx.plan, slice);
  for (const Flight& f : flights_) {
    if (Overlaps(p, slice.size, f.out, f.out_bytes)) {
      return Error(
          "{}: reads {} {} while {} is in flight: the thunk runs before its bucket's "
          "wait",
          who, what, name, f.who);
    }
  }
  if (slice.buffer < 0 || static_cast<size_t>(slice.buffer) >= entry->expected.size()) {
    lock.unlock();
    return CheckRead(p, slice.size, pos, who);
  }
  const uint32_t expected = entry->expected[slice.buffer];
  if (expected == 0) {
    return Error("{}: reads {} {}, which nothing has written ({}); an unwritten slot", who, what,
                 name,
                 DescribeMismatch(p, slice.size, 0).empty() ? "its bytes were never written"
                                                            : DescribeMismatch(p, slice.size, 0));
  }
  std::string mismatch = DescribeMismatch(p, slice.size, expected);
  if (!mismatch.empty()) {
    return Error(
        "{}: reads {} {} (written by {}), but {} since: it shares memory with another "
        "live buffer (Note [provenance])",
        who, what, name, DescribeEvent(expected), mismatch);
  }
  if (!Ordered(expected, pos)) {
    return Error(
        "{}: reads {} {} written by {} on another stream with nothing ordering the two "
        "(Note [stream order])",
        who, what, name, DescribeEvent(expected));
  }
  return Status::Ok();
}

namespace {

// Scratch (Note [split column reductions]): past every buffer of the plan.
bool IsScratch(const gpu::EntryPlan& plan, const gpu::ArenaSlice& s) {
  int64_t end = 0;
  for (const gpu::PlanBuffer& b : plan.buffers) end = std::max(end, b.slice.offset + b.slice.size);
  return !plan.buffers.empty() && s.offset >= end;
}

}  // namespace

Status MemoryChecker::FinishInstruction(const ThunkContext& ctx) {
  if (ctx.plan == nullptr) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = FindEntry(ctx.plan);
  if (entry == nullptr) return Status::Ok();
  const std::string& instruction = ctx.get()->instruction();
  int64_t first = ctx.thunk;
  while (first > 0 && ctx.plan->thunks[first - 1].instruction() == instruction) --first;
  std::vector<gpu::ArenaSlice> results;
  for (int64_t t = first; t <= ctx.thunk; ++t) {
    for (const gpu::ArenaSlice& s : Results(ctx.plan->thunks[t])) {
      if (std::find(results.begin(), results.end(), s) == results.end()) results.push_back(s);
    }
  }
  const auto* kernel = std::get_if<gpu::KernelThunk>(&ctx.get()->body);
  for (const gpu::ArenaSlice& s : results) {
    // Scratch (in no buffer) passes values between the instruction's own
    // kernels: not a result to complete.
    if (s.buffer < 0 && IsScratch(*entry->plan, s)) continue;
    // An update in place: what the kernel left of the operand is its result.
    if (kernel != nullptr && kernel->updates_operand && s.buffer >= 0 &&
        static_cast<size_t>(s.buffer) < entry->expected.size()) {
      Restamp(entry->arena + s.offset, s.size, entry->expected[s.buffer], ctx.event);
    }
    if (checks_) {
      std::string mismatch = DescribeMismatch(entry->arena + s.offset, s.size, ctx.event);
      if (!mismatch.empty()) {
        return Error(
            "entry {} {}: its result {} is incomplete: {} (not this instruction: is its "
            "grid too small?)",
            ctx.plan->name(), ctx.get()->Describe(), BufferName(*ctx.plan, s), mismatch);
      }
    }
    if (s.buffer >= 0 && static_cast<size_t>(s.buffer) < entry->expected.size()) {
      entry->expected[s.buffer] = ctx.event;
    }
  }
  return Status::Ok();
}

void MemoryChecker::AliasThunk(const ThunkContext& ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = FindEntry(ctx.plan);
  if (entry == nullptr) return;
  const gpu::Thunk& t = *ctx.get();
  const gpu::ArenaSlice* from = nullptr;
  const gpu::ArenaSlice* to = nullptr;
  if (const auto* c = std::get_if<gpu::CopyThunk>(&t.body)) from = &c->src, to = &c->dst;
  if (const auto* a = std::get_if<gpu::AllReduceThunk>(&t.body)) from = &a->in, to = &a->out;
  if (from == nullptr || from->buffer < 0 || to->buffer < 0) return;
  entry->expected[to->buffer] = entry->expected[from->buffer];
}

void MemoryChecker::HostProduced(const char* p, size_t n, uint32_t event, bool any_buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_) {
    if (p < e.arena || p >= e.arena + e.plan->arena_size) continue;
    const gpu::ArenaSlice slice{p - e.arena, static_cast<int64_t>(n)};
    for (const gpu::PlanSlot& slot : e.plan->inputs) {
      if (slot.slice == slice && slot.slice.buffer >= 0) e.expected[slot.slice.buffer] = event;
    }
    if (!any_buffer) continue;
    for (const gpu::PlanBuffer& b : e.plan->buffers) {
      if (b.slice == slice) e.expected[b.id] = event;
    }
  }
}

void MemoryChecker::AdoptHostWrite(const char* p, size_t n) {
  uint32_t event = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Allocation* a = Find(p, n);
    if (a == nullptr || a->stamps == nullptr || n == 0) return;
    event = a->stamps[(p - a->base) / 4].load(std::memory_order_relaxed);
  }
  HostProduced(p, n, event, /*any_buffer=*/true);
}

void MemoryChecker::AdoptInPlace(const gpu::EntryPlan& plan, const gpu::ArenaSlice& slice) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* entry = FindEntry(&plan);
  if (entry == nullptr || slice.buffer < 0 ||
      static_cast<size_t>(slice.buffer) >= entry->expected.size() || slice.size == 0) {
    return;
  }
  const char* p = entry->arena + slice.offset;
  Allocation* a = Find(p, slice.size);
  if (a == nullptr || a->stamps == nullptr) return;
  entry->expected[slice.buffer] = a->stamps[(p - a->base) / 4].load(std::memory_order_relaxed);
}

bool MemoryChecker::ExpectedOutput(const char* p, size_t n, uint32_t* event) {
  std::lock_guard<std::mutex> lock(mu_);
  // Entries sharing an arena (Note [arena guests]) may each have an output
  // there: the one whose producer wrote it last is the one read.
  const Allocation* a = Find(p, n);
  const uint32_t stamp = a != nullptr && a->stamps != nullptr && n > 0
                             ? a->stamps[(p - a->base) / 4].load(std::memory_order_relaxed)
                             : 0;
  bool found = false;
  for (const Entry& e : entries_) {
    if (p < e.arena || p >= e.arena + e.plan->arena_size) continue;
    const gpu::ArenaSlice slice{p - e.arena, static_cast<int64_t>(n)};
    for (const gpu::PlanSlot& slot : e.plan->outputs) {
      if (slot.slice == slice && slot.slice.buffer >= 0) {
        if (!found || e.expected[slot.slice.buffer] == stamp)
          *event = e.expected[slot.slice.buffer];
        found = true;
      }
    }
  }
  return found;
}

void MemoryChecker::BeginFlight(const char* in, size_t in_bytes, const char* out, size_t out_bytes,
                                std::string who) {
  std::lock_guard<std::mutex> lock(mu_);
  flights_.push_back(Flight{in, in_bytes, out, out_bytes, std::move(who)});
}

void MemoryChecker::Land(const char* out, uint32_t event, const ThunkContext& ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it =
      std::find_if(flights_.begin(), flights_.end(), [&](const Flight& f) { return f.out == out; });
  if (it == flights_.end()) return;
  const size_t bytes = it->out_bytes;
  flights_.erase(it);
  if (Allocation* a = Find(out, bytes); a != nullptr && a->stamps != nullptr) {
    for (size_t w = (out - a->base) / 4; w < Words(out - a->base + bytes); ++w) {
      a->stamps[w].store(event, std::memory_order_relaxed);
    }
  }
  Entry* entry = FindEntry(ctx.plan);
  const auto* reduce =
      ctx.plan != nullptr ? std::get_if<gpu::AllReduceThunk>(&ctx.get()->body) : nullptr;
  if (entry != nullptr && reduce != nullptr && reduce->out.buffer >= 0) {
    entry->expected[reduce->out.buffer] = event;
  }
}

// The checks of one kernel launch (GlobalAccessChecker): every access
// inside an argument, stores into results, loads of results after the
// instruction wrote them, nothing in flight, no races (cells over the
// results: only they are written, so only they can race).
class LaunchChecker : public GlobalAccessChecker {
 public:
  struct Arg {
    const char* begin;
    const char* end;
    bool operand, result;
    MemoryChecker::Allocation* allocation;
    int index;
    std::string name;  // "arg 3 (%fusion.2)"
    size_t cells = 0;  // results: the first cell (Note [emulated races])
  };

  LaunchChecker(MemoryChecker& mc, std::vector<Arg> args, uint32_t event)
      : mc_(mc), args_(std::move(args)), event_(event) {
    std::sort(args_.begin(), args_.end(),
              [](const Arg& a, const Arg& b) { return a.begin < b.begin; });
    size_t cells = 0;
    for (Arg& a : args_) {
      if (!a.result) continue;
      a.cells = cells;
      cells += static_cast<size_t>(a.end - a.begin + 1) / 2;
    }
    cells_ = mc.LaunchCells(cells);
    flights_ = mc.flights();
  }

  bool Access(const void* address, uint32_t bytes, uint32_t kind, const ThreadIdentity& who,
              Findings& findings) override {
    const char* p = static_cast<const char*>(address);
    const bool store = (kind & abi::kStore) != 0, load = (kind & abi::kLoad) != 0;
    const bool atomic = (kind & abi::kAtomic) != 0;
    const char* verb = atomic ? "atomic" : store ? "store" : "load";
    const Arg* arg = Holder(p, bytes, store);
    if (arg == nullptr) {
      std::lock_guard<std::mutex> lock(mc_.mu_);
      return findings.Add(
          fmt::format("{}: {} of {} bytes at {}: outside every argument of the "
                      "launch{}",
                      who.Describe(), verb, bytes, mc_.Where(p), Nearest(p, bytes)));
    }
    if (store && !arg->result) {
      return findings.Add(
          fmt::format("{}: {} into {}, an operand the plan says the kernel only "
                      "reads (+{})",
                      who.Describe(), verb, arg->name, p - arg->begin));
    }
    for (const MemoryChecker::Flight& f : flights_) {
      if (Overlaps(p, bytes, f.out, f.out_bytes) ||
          (store && Overlaps(p, bytes, f.in, f.in_bytes))) {
        return findings.Add(
            fmt::format("{}: {} of {} (+{}) while {} is in flight (before its "
                        "bucket's wait)",
                        who.Describe(), verb, arg->name, p - arg->begin, f.who));
      }
    }
    MemoryChecker::Allocation* a = arg->allocation;
    if (a != nullptr && a->stamps != nullptr) {
      const size_t first = static_cast<size_t>(p - a->base) / 4;
      const size_t last = Words(p - a->base + bytes);
      for (size_t w = first; w < last; ++w) {
        std::atomic<uint32_t>& stamp = a->stamps[w];
        if (load && arg->result && !arg->operand &&
            stamp.load(std::memory_order_relaxed) != event_) {
          return findings.Add(
              fmt::format("{}: {} of {} (+{}) before the instruction wrote it (an "
                          "uninitialized read)",
                          who.Describe(), verb, arg->name, p - arg->begin));
        }
        if (store) stamp.store(event_, std::memory_order_relaxed);
      }
    }
    if (!atomic && arg->result && cells_ != nullptr) {
      const size_t offset = static_cast<size_t>(p - arg->begin);
      for (size_t unit = offset / 2; unit < (offset + bytes + 1) / 2; ++unit) {
        if (!Race(cells_[arg->cells + unit], store, who, findings, arg, p)) return false;
      }
    }
    return true;
  }

 private:
  // The argument holding [p, p + bytes) (for a store, a result one when an
  // operand has the same memory), or null. Arguments are sorted by begin and
  // disjoint unless equal (buffer assignment), so the candidates are the run
  // of arguments with the greatest begin <= p.
  const Arg* Holder(const char* p, uint32_t bytes, bool store) const {
    // Most accesses of a thread hit the argument its last one did (a launch
    // is known by its serial: a new checker may reuse an old one's address).
    thread_local uint64_t last_serial = 0;
    thread_local const Arg* last = nullptr;
    if (last_serial == serial_ && p >= last->begin && p + bytes <= last->end &&
        (!store || last->result)) {
      return last;
    }
    const Arg* found = Search(p, bytes, store);
    if (found != nullptr) last_serial = serial_, last = found;
    return found;
  }

  const Arg* Search(const char* p, uint32_t bytes, bool store) const {
    auto it = std::upper_bound(args_.begin(), args_.end(), p,
                               [](const char* x, const Arg& a) { return x < a.begin; });
    const Arg* found = nullptr;
    while (it != args_.begin()) {
      --it;
      if (p + bytes <= it->end) {
        if (found == nullptr || (store && it->result && !found->result)) found = &*it;
      } else if (found != nullptr || it->end <= p) {
        break;  // past the run of equal slices
      }
    }
    return found;
  }

  // Note [emulated races] for one unit; false (with a finding) on a race.
  bool Race(std::atomic<uint64_t>& cell, bool store, const ThreadIdentity& who, Findings& findings,
            const Arg* arg, const char* p) {
    const uint32_t block = static_cast<uint32_t>(std::min<uint64_t>(who.block, kManyBlocks - 1));
    const uint32_t epoch = who.epoch & kEpochMask;
    uint64_t old = cell.load(std::memory_order_relaxed);
    for (;;) {
      const Cell c = Unpack(old);
      Cell next{block, who.thread, epoch, store, false};
      if (old != kEmptyCell) {
        const bool same_thread = !c.many && c.block == block && c.thread == who.thread;
        const bool ordered = c.block == block && c.epoch != epoch;  // a barrier between
        if (same_thread) {
          next = c;
          next.written = c.written || store;
          next.epoch = epoch;
        } else if (!ordered) {
          if (store || c.written) {
            const char* what = store ? (c.written ? "store after another thread's store"
                                                  : "store after other threads' loads")
                                     : "load of another thread's store";
            return findings.Add(fmt::format(
                "{}: {} to {} (+{}) races with {} (no barrier between them{})", who.Describe(),
                what, arg->name, p - arg->begin,
                c.many ? "several readers" : fmt::format("block #{} thread #{}", c.block, c.thread),
                c.block != block ? "; blocks are never ordered" : ""));
          }
          next = c;  // one more reader
          next.many = true;
          if (c.block != block) next.block = kManyBlocks;
        }
      }
      const uint64_t packed = Pack(next);
      if (packed == old) return true;
      if (cell.compare_exchange_weak(old, packed, std::memory_order_relaxed)) return true;
    }
  }

  // Where `bytes` at `p` lie against the nearest argument.
  std::string Nearest(const char* p, uint32_t bytes) const {
    const Arg* best = nullptr;
    int64_t distance = 0;
    for (const Arg& a : args_) {
      const int64_t d = p + bytes <= a.begin ? a.begin - (p + bytes) : p >= a.end ? p - a.end : 0;
      if (best == nullptr || d < distance) best = &a, distance = d;
    }
    if (best == nullptr) return "";
    const int64_t size = best->end - best->begin;
    if (p >= best->end) {
      return fmt::format(" ({} bytes past the end of {}, {} bytes)", p - best->end, best->name,
                         size);
    }
    if (p + bytes <= best->begin) {
      return fmt::format(" ({} bytes before {})", best->begin - p, best->name);
    }
    return fmt::format(" (bytes [{}, {}) of {}, which has {}: past its end)", p - best->begin,
                       p - best->begin + bytes, best->name, size);
  }

  MemoryChecker& mc_;
  std::vector<Arg> args_;
  uint32_t event_;
  std::vector<MemoryChecker::Flight> flights_;
  std::atomic<uint64_t>* cells_ = nullptr;  // MemoryChecker::LaunchCells
  uint64_t serial_ = NextSerial();

  static uint64_t NextSerial() {
    static std::atomic<uint64_t> serial{0};
    return ++serial;
  }
};

std::atomic<uint64_t>* MemoryChecker::LaunchCells(size_t count) {
  if (count > cell_capacity_) {
    Release(cells_, cell_capacity_);
    cell_capacity_ = std::max(count, 2 * cell_capacity_);
    cells_ = Reserve<std::atomic<uint64_t>>(cell_capacity_);
  } else if (cells_ != nullptr) {
    std::memset(static_cast<void*>(cells_), 0, count * sizeof(uint64_t));  // kEmptyCell
  }
  return cells_;
}

std::unique_ptr<GlobalAccessChecker> MemoryChecker::ForLaunch(const ThunkContext& ctx,
                                                              uint32_t event,
                                                              const std::vector<uint64_t>& args,
                                                              const StreamPosition& pos) {
  if (!checks_) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  const gpu::KernelThunk* k =
      ctx.plan != nullptr ? std::get_if<gpu::KernelThunk>(&ctx.get()->body) : nullptr;
  std::vector<LaunchChecker::Arg> list;
  for (size_t i = 0; i < args.size(); ++i) {
    const char* p = reinterpret_cast<const char*>(args[i]);
    LaunchChecker::Arg a{.begin = p,
                         .end = p,
                         .operand = true,
                         .result = true,
                         .allocation = nullptr,
                         .index = static_cast<int>(i)};
    if (k != nullptr && i < k->args.size()) {
      a.end = p + k->args[i].size;
      if (k->operands >= 0) {
        a.operand = static_cast<int64_t>(i) < k->operands;
        a.result = !a.operand;
      }
      a.name = fmt::format("arg {} ({})", i, BufferName(*ctx.plan, k->args[i]));
    } else {
      // No plan: the argument may be any part of its allocation.
      Allocation* al = Find(p, 1);
      a.end = al != nullptr ? al->base + al->size : p;
      a.name = fmt::format("arg {}", i);
    }
    a.allocation = Find(p, static_cast<size_t>(a.end - p));
    list.push_back(std::move(a));
  }
  // In-place results (an operand's slice) are both; one result arg per slice.
  for (LaunchChecker::Arg& a : list) {
    for (const LaunchChecker::Arg& b : list) {
      if (a.begin == b.begin && a.end == b.end) {
        a.operand = a.operand || b.operand;
        a.result = a.result || b.result;
      }
    }
  }
  (void)pos;
  return std::make_unique<LaunchChecker>(*this, std::move(list), event);
}

}  // namespace gptc::rt::emu
