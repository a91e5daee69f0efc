#include "runtime/emu/warpgroup.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>

#include "runtime/emu/grid_block.h"
#include "runtime/emu/warpgroup_matrix.h"

namespace gptc::rt::emu {

namespace abi = program::emu;

namespace {

using BlockContext = GridRunner::BlockContext;

// Note [emulated wgmma asynchrony]: a token is a quiet NaN with 0b1010 in
// payload bits 18-21, then the generation of its slot (6 bits), the slot (5)
// and the register (7). No arithmetic produces one (x86's default NaN is
// 0xffc00000), and every instruction but the two that take tokens is
// checked before it reads one.
constexpr uint32_t kSlots = 32;
constexpr uint32_t kTokenBase = 0x7fc00000u | 0xau << 18;
constexpr uint32_t kTokenMask = 0xffc00000u | 0xfu << 18;

uint32_t Token(uint32_t slot, uint32_t generation, uint32_t reg) {
  return kTokenBase | (generation & 63) << 12 | slot << 7 | reg;
}

struct TokenFields {
  uint32_t slot, generation, reg;
};
std::optional<TokenFields> ParseToken(uint32_t bits) {
  if ((bits & kTokenMask) != kTokenBase) return std::nullopt;
  return TokenFields{bits >> 7 & 31, bits >> 12 & 63, bits & 127};
}

std::string Describe(const WgmmaSlot& s) {
  return fmt::format("wgmma #{} ({})", s.site, WgmmaName(s.op));
}

// The value of token `token` for thread `thread`, taken by `what`: an
// accumulator of a wgmma of its warpgroup whose slot has not been reused;
// with `retired`, one the thread's wait_group has retired. Else an error.
std::optional<float> TokenValue(const WarpgroupBlock& wb, uint32_t thread, const TokenFields& token,
                                bool retired, const std::string& what, std::string* error) {
  if (token.slot >= wb.slots.size() || wb.slots[token.slot].generation % 64 != token.generation) {
    *error = fmt::format(
        "{} takes an accumulator of a wgmma whose slot later wgmma have reused (a register kept "
        "past {} of them)",
        what, kSlots);
    return std::nullopt;
  }
  const WgmmaSlot& s = wb.slots[token.slot];
  if (thread < s.base || thread >= s.base + kWarpgroupThreads) {
    *error = fmt::format("{} takes accumulator d[{}] of {}, another warpgroup's", what, token.reg,
                         Describe(s));
    return std::nullopt;
  }
  if (retired && !s.done[thread - s.base]) {
    *error = fmt::format(
        "{} takes accumulator d[{}] of {} before a wgmma.wait_group retired its group (a missing "
        "or too weak wait)",
        what, token.reg, Describe(s));
    return std::nullopt;
  }
  return s.d[(thread - s.base) * abi::WgmmaAccumulators(s.op) + token.reg];
}

// Thread `thread` retires slot `slot`; the last thread of the warpgroup
// frees its shared memory.
void Retire(WarpgroupBlock& wb, uint32_t slot, uint32_t thread) {
  WgmmaSlot& s = wb.slots[slot];
  uint8_t& done = s.done[thread - s.base];
  if (done) return;
  done = 1;
  if (++s.retired < kWarpgroupThreads) return;
  s.live = false;
  --wb.live;
  for (uint32_t g : s.granules) --wb.reading[g];
}

// "threads 64-127" of the set members of `in` (offset by `base`).
std::string ThreadRanges(const std::vector<bool>& in, uint32_t base) {
  std::string out;
  int count = 0;
  for (size_t i = 0; i < in.size();) {
    if (!in[i]) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end + 1 < in.size() && in[end + 1]) ++end;
    out += (out.empty() ? "" : ", ") +
           (end == i ? fmt::format("{}", base + i) : fmt::format("{}-{}", base + i, base + end));
    count += static_cast<int>(end - i + 1);
    i = end + 1;
  }
  return (count == 1 ? "thread " : "threads ") + out;
}

// Runs the wgmma the warpgroup at `base` waits at (`first` is one of its
// threads); false with a finding.
class WgmmaRun {
 public:
  WgmmaRun(BlockContext& c, uint32_t base, const EmuThread& first)
      : c_(c),
        wb_(c.warpgroups),
        base_(base),
        op_(first.op),
        site_(first.site),
        n_(first.op & abi::kWgmmaNMask),
        where_(fmt::format("block ({},{},{}) warpgroup {}: wgmma #{} ({})", first.id.ctaid[0],
                           first.id.ctaid[1], first.id.ctaid[2], base / kWarpgroupThreads,
                           first.site, WgmmaName(first.op))) {}

  bool Run() {
    if (!Agree()) return false;
    const bool register_a = (op_ & abi::kWgmmaRegisterA) != 0;
    const uint32_t* w0 = wb_.threads[base_].operands;
    std::vector<uint16_t> a(kWgmmaM * kWgmmaK), b(kWgmmaK * n_);
    if (register_a) {
      for (uint32_t t = 0; t < kWarpgroupThreads; ++t) {
        for (uint32_t j = 0; j < abi::kWgmmaARegs; ++j) {
          uint32_t row, col;
          RegisterAElement(t, j, &row, &col);
          const uint32_t word = wb_.threads[base_ + t].operands[j];
          a[row * kWgmmaK + col] = static_cast<uint16_t>(word);
          a[row * kWgmmaK + col + 1] = static_cast<uint16_t>(word >> 16);
        }
      }
    } else if (!ReadOperand(
                   'A', Descriptor(w0, 0), (op_ & abi::kWgmmaTransA) != 0, kWgmmaM,
                   [&](uint32_t r, uint32_t k) -> uint16_t& { return a[r * kWgmmaK + k]; })) {
      return false;
    }
    const uint32_t b_at = register_a ? abi::kWgmmaARegs : 2;
    if (!ReadOperand('B', Descriptor(w0, b_at), (op_ & abi::kWgmmaTransB) != 0, n_,
                     [&](uint32_t r, uint32_t k) -> uint16_t& { return b[k * n_ + r]; })) {
      return false;
    }
    const bool scale_d = w0[b_at + 2] != 0;
    const uint32_t regs = n_ / 2, c_at = b_at + 3;
    std::vector<float> cvals(kWarpgroupThreads * regs, 0.0f);
    for (uint32_t t = 0; t < kWarpgroupThreads && scale_d; ++t) {
      const uint32_t* words = wb_.threads[base_ + t].operands + c_at;
      for (uint32_t r = 0; r < regs; ++r) {
        std::optional<float> v = CValue(base_ + t, words[r]);
        if (!v) return false;
        cvals[t * regs + r] = *v;
      }
    }
    std::optional<uint32_t> slot = TakeSlot();
    if (!slot) return false;
    WgmmaSlot& s = wb_.slots[*slot];
    const float* cp[kWarpgroupThreads];
    float* dp[kWarpgroupThreads];
    for (uint32_t t = 0; t < kWarpgroupThreads; ++t) {
      cp[t] = &cvals[t * regs];
      dp[t] = &s.d[t * regs];
    }
    WarpgroupMma(op_, a.data(), b.data(), scale_d, cp, dp);
    std::sort(granules_.begin(), granules_.end());
    granules_.erase(std::unique(granules_.begin(), granules_.end()), granules_.end());
    s.granules = std::move(granules_);
    for (uint32_t g : s.granules) ++wb_.reading[g];
    for (uint32_t t = 0; t < kWarpgroupThreads; ++t) {
      WarpgroupThread& w = wb_.threads[base_ + t];
      for (uint32_t r = 0; r < regs; ++r) {
        w.d[r] = std::bit_cast<float>(Token(*slot, s.generation, r));
      }
      w.uncommitted.push_back(*slot);
    }
    return true;
  }

 private:
  bool Fail(const std::string& what) { return c_.findings->Add(where_ + ": " + what); }

  // The warpgroup agrees on its groups so far, the descriptors and scale-d.
  bool Agree() {
    const WarpgroupThread& w0 = wb_.threads[base_];
    const uint32_t uniform = op_ & abi::kWgmmaRegisterA ? abi::kWgmmaARegs : 0;
    const uint32_t words = (op_ & abi::kWgmmaRegisterA ? abi::kWgmmaARegs : 2) + 3;
    for (uint32_t t = 1; t < kWarpgroupThreads; ++t) {
      const WarpgroupThread& w = wb_.threads[base_ + t];
      if (w.commits != w0.commits || w.uncommitted.size() != w0.uncommitted.size()) {
        return Fail(fmt::format(
            "threads {} and {} disagree on the wgmma before it ({} and {} groups committed, {} "
            "and {} wgmma since): wgmma.commit_group is .aligned",
            base_, base_ + t, w0.commits, w.commits, w0.uncommitted.size(), w.uncommitted.size()));
      }
      for (uint32_t j = uniform; j < words; ++j) {
        if (w.operands[j] == w0.operands[j]) continue;
        const char* what = j + 1 == words                     ? "scale-d"
                           : j + 3 == words || j + 2 == words ? "B's descriptor"
                                                              : "A's descriptor";
        return Fail(
            fmt::format("threads {} and {} pass different {} ({:#x} and {:#x} in word {}); "
                        "the warpgroup's must agree",
                        base_, base_ + t, what, w0.operands[j], w.operands[j], j));
      }
    }
    return true;
  }

  static uint64_t Descriptor(const uint32_t* words, uint32_t at) {
    return uint64_t{words[at]} | uint64_t{words[at + 1]} << 32;
  }

  // Reads operand `which` (rows x 16) through descriptor `bits`, each
  // element checked (Note [emulated wgmma asynchrony]).
  template <typename Element>
  bool ReadOperand(char which, uint64_t bits, bool mn_major, uint32_t rows, Element element) {
    std::string error;
    std::optional<MatrixDescriptor> d = DecodeDescriptor(bits, &error);
    if (!d) return Fail(fmt::format("{}'s {}", which, error));
    const size_t size = c_.shared.size();
    const bool checks = c_.launch->checks;
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t k = 0; k < kWgmmaK; ++k) {
        const uint32_t at = OperandAddress(*d, mn_major, r, k);
        auto subject = [&] {
          return fmt::format("element ({}, {}) of {} (descriptor {:#018x}) at shared offset {}",
                             which == 'A' ? r : k, which == 'A' ? k : r, which, bits, at);
        };
        if (size_t{at} + 2 > size) {
          return Fail(fmt::format("{} lies outside the block's {} bytes of shared memory",
                                  subject(), size));
        }
        if (checks) {
          const SharedCell& cell = c_.shared_cells[at / kSharedCellBytes];
          if (!(cell.flags & kInitialized)) {
            return Fail(fmt::format("{}: no thread has written it", subject()));
          }
          if (cell.epoch == c_.epoch && (cell.flags & kWritten)) {
            return Fail(fmt::format(
                "{}: thread {} stored it after the block's last barrier (no barrier between the "
                "store and the wgmma)",
                subject(), cell.thread - 1));
          }
          if (const uint32_t writer = wb_.writers.empty() ? 0 : wb_.writers[at / kSharedCellBytes];
              writer != 0) {
            const uint32_t thread = (writer >> 8) - 1;
            if (wb_.threads[thread].proxy_fences == (writer & 0xff)) {
              return Fail(fmt::format(
                  "{}: thread {} stored it and executed no fence.proxy.async.shared::cta since "
                  "(a wgmma reads shared memory through the async proxy)",
                  subject(), thread));
            }
          }
          granules_.push_back(at / 16);
        }
        std::memcpy(&element(r, k), c_.shared.data() + at, 2);
      }
    }
    return true;
  }

  // C word `bits` of thread `thread`: a value, or a token of a wgmma of
  // this shape (chaining: its D, in flight or not).
  std::optional<float> CValue(uint32_t thread, uint32_t bits) {
    const std::optional<TokenFields> token = ParseToken(bits);
    if (!token) return std::bit_cast<float>(bits);
    std::string error;
    std::optional<float> v =
        TokenValue(wb_, thread, *token, false, fmt::format("thread {}'s C", thread), &error);
    if (!v) {
      Fail(error);
      return std::nullopt;
    }
    if ((wb_.slots[token->slot].op & abi::kWgmmaNMask) != n_) {
      Fail(fmt::format(
          "thread {}'s C takes accumulator d[{}] of {}, of another shape: an accumulator leaves "
          "a wgmma only through the register fence after its wait, or as the C of a wgmma of "
          "its shape (Note [wgmma registers])",
          thread, token->reg, Describe(wb_.slots[token->slot])));
      return std::nullopt;
    }
    return v;
  }

  std::optional<uint32_t> TakeSlot() {
    if (wb_.slots.size() < kSlots) wb_.slots.resize(kSlots);
    for (uint32_t i = 0; i < kSlots; ++i) {
      const uint32_t at = (wb_.next_slot + i) % kSlots;
      WgmmaSlot& s = wb_.slots[at];
      if (s.live) continue;
      wb_.next_slot = at + 1;
      ++wb_.live;
      s.live = true;
      ++s.generation;
      s.op = op_;
      s.site = site_;
      s.base = base_;
      s.retired = 0;
      s.done.assign(kWarpgroupThreads, 0);
      s.d.resize(kWarpgroupThreads * (n_ / 2));
      return at;
    }
    Fail(fmt::format("more than {} wgmma of the block are in flight (the emulator's limit)",
                     kSlots));
    return std::nullopt;
  }

  BlockContext& c_;
  WarpgroupBlock& wb_;
  const uint32_t base_, op_, site_, n_;
  const std::string where_;
  std::vector<uint32_t> granules_;
};

}  // namespace

void WarpgroupBlock::Reset(uint32_t count, size_t shared_bytes, bool track_writers) {
  threads.assign(count, WarpgroupThread{});
  for (WgmmaSlot& s : slots) s.live = false;
  next_slot = 0;
  live = 0;
  reading.assign(shared_bytes / 16 + 1, 0);
  if (track_writers) {
    writers.assign(shared_bytes / kSharedCellBytes + 1, 0);
  } else {
    writers.clear();
  }
}

void EmuWgmma(uint32_t op, const uint32_t* operands, float* d, uint32_t site) {
  BlockContext& c = CurrentBlock();
  if (!c.fibers) ThreadDefect(c, "a wgmma in a kernel the library says has none");
  const std::string name = WgmmaName(op);
  if (name.empty()) {
    ThreadDefect(
        c, fmt::format("wgmma #{}: op {:#x} is not emulated (a kernel of another ABI?)", site, op));
  }
  EmuThread& t = *c.current;
  WarpgroupThread& w = c.warpgroups.threads[t.id.thread];
  if (!w.fenced) {
    ThreadDefect(
        c, fmt::format("wgmma #{} ({}) with no wgmma.fence since the thread's last "
                       "wgmma.wait_group or its start (the fence orders the thread's writes of "
                       "the registers a wgmma reads)",
                       site, name));
  }
  w.operands = operands;
  w.d = d;
  t.state = ThreadState::kWgmma;
  t.site = site;
  t.op = op;
  SwitchFiber(&t.fiber.context(), &c.scheduler);
}

void EmuWarpgroup(uint32_t kind, uint32_t arg, uint32_t* regs, uint32_t count, uint32_t site) {
  BlockContext& c = CurrentBlock();
  WarpgroupBlock& wb = c.warpgroups;
  const uint32_t thread = c.current->id.thread;
  WarpgroupThread& w = wb.threads[thread];
  switch (kind) {
    case abi::kWgmmaFence:
      w.fenced = true;
      return;
    case abi::kWgmmaCommit:
      w.pending.push_back(std::move(w.uncommitted));
      w.uncommitted.clear();
      ++w.commits;
      return;
    case abi::kWgmmaWait:
      while (w.pending.size() > arg) {
        for (uint32_t slot : w.pending.front()) Retire(wb, slot, thread);
        w.pending.pop_front();
      }
      w.fenced = false;
      return;
    case abi::kWgmmaRegisterFence:
      for (uint32_t i = 0; i < count; ++i) {
        const std::optional<TokenFields> token = ParseToken(regs[i]);
        if (!token) continue;
        std::string error;
        std::optional<float> v =
            TokenValue(wb, thread, *token, true, fmt::format("register fence #{}", site), &error);
        if (!v) ThreadDefect(c, error);
        regs[i] = std::bit_cast<uint32_t>(*v);
      }
      return;
    case abi::kFenceProxyAsync:
      ++w.proxy_fences;
      return;
    default:
      break;
  }
  ThreadDefect(c, fmt::format("warpgroup instruction #{} of kind {} is not emulated (a kernel of "
                              "another ABI?)",
                              site, kind));
}

void EmuWgmmaRead(uint32_t bits, uint32_t site) {
  const std::optional<TokenFields> token = ParseToken(bits);
  if (!token) return;
  BlockContext& c = CurrentBlock();
  const WarpgroupBlock& wb = c.warpgroups;
  const uint32_t thread = c.current->id.thread;
  const std::string what = fmt::format("accumulator read #{}", site);
  std::string error;
  if (!TokenValue(wb, thread, *token, true, what, &error)) ThreadDefect(c, error);
  ThreadDefect(c, fmt::format("{} takes accumulator d[{}] of {} without the register fence that "
                              "follows its wgmma.wait_group (Note [wgmma registers])",
                              what, token->reg, Describe(wb.slots[token->slot])));
}

bool ResolveWarpgroups(BlockContext& c) {
  std::vector<EmuThread>& threads = c.threads;
  const uint32_t n = static_cast<uint32_t>(threads.size());
  bool progressed = false;
  for (uint32_t base = 0; base < n; base += kWarpgroupThreads) {
    const EmuThread* first = nullptr;
    for (uint32_t i = base; i < std::min(n, base + kWarpgroupThreads) && first == nullptr; ++i) {
      if (threads[i].state == ThreadState::kWgmma) first = &threads[i];
    }
    if (first == nullptr) continue;
    const std::string what = fmt::format("wgmma #{} ({})", first->site, WgmmaName(first->op));
    const std::string where =
        fmt::format("block ({},{},{}) warpgroup {}", first->id.ctaid[0], first->id.ctaid[1],
                    first->id.ctaid[2], base / kWarpgroupThreads);
    if (base + kWarpgroupThreads > n) {
      c.findings->Add(
          fmt::format("{}: {} needs all {} threads of the warpgroup (.aligned), but "
                      "the block has only {} of them",
                      where, what, kWarpgroupThreads, n - base));
      return false;
    }
    std::vector<bool> waiting(kWarpgroupThreads), exited(kWarpgroupThreads);
    bool ready = true, any_exited = false;
    for (uint32_t i = 0; i < kWarpgroupThreads; ++i) {
      const EmuThread& t = threads[base + i];
      if (t.state == ThreadState::kWgmma && t.site == first->site && t.op == first->op) {
        waiting[i] = true;
      } else if (t.state == ThreadState::kDone) {
        exited[i] = any_exited = true;
      } else if (t.state == ThreadState::kWgmma || t.state == ThreadState::kMma ||
                 t.state == ThreadState::kLdmatrix) {
        c.findings->Add(fmt::format(
            "{}: thread {} waits at {}, thread {} at {} #{} (.aligned: every thread of the "
            "warpgroup must execute the same instruction)",
            where, first->id.thread, what, t.id.thread, ThreadStateName(t.state), t.site));
        return false;
      } else {
        ready = false;
      }
    }
    if (any_exited) {
      c.findings->Add(
          fmt::format("{}: {} is .aligned, but {} exited without executing it ({} "
                      "wait at it)",
                      where, what, ThreadRanges(exited, base), ThreadRanges(waiting, base)));
      return false;
    }
    if (!ready) continue;
    if (!WgmmaRun(c, base, *first).Run()) return false;
    for (uint32_t i = 0; i < kWarpgroupThreads; ++i) {
      threads[base + i].state = ThreadState::kRunnable;
    }
    progressed = true;
  }
  return progressed;
}

void WarpgroupSharedStore(BlockContext& c, size_t offset, uint32_t bytes) {
  WarpgroupBlock& wb = c.warpgroups;
  const uint32_t thread = c.current->id.thread;
  if (wb.live > 0) {
    for (size_t g = offset / 16; g <= (offset + bytes - 1) / 16 && g < wb.reading.size(); ++g) {
      if (wb.reading[g] == 0) continue;
      for (const WgmmaSlot& s : wb.slots) {
        if (!s.live || !std::binary_search(s.granules.begin(), s.granules.end(), g)) continue;
        const uint32_t late =
            static_cast<uint32_t>(std::find(s.done.begin(), s.done.end(), 0) - s.done.begin());
        ThreadDefect(
            c, fmt::format("store of {} bytes at shared offset {} overwrites what {} of "
                           "warpgroup {} reads, in flight: thread {} has not retired it with "
                           "wgmma.wait_group",
                           bytes, offset, Describe(s), s.base / kWarpgroupThreads, s.base + late));
      }
    }
  }
  if (wb.writers.empty()) return;
  const uint32_t mark = (thread + 1) << 8 | wb.threads[thread].proxy_fences;
  for (size_t cell = offset / kSharedCellBytes;
       cell <= (offset + bytes - 1) / kSharedCellBytes && cell < wb.writers.size(); ++cell) {
    wb.writers[cell] = mark;
  }
}

void WarpgroupThreadExit(BlockContext& c) {
  const WarpgroupThread& w = c.warpgroups.threads[c.current->id.thread];
  if (w.uncommitted.empty() && w.pending.empty()) return;
  ThreadDefect(c, fmt::format("exits with wgmma in flight ({} no wgmma.commit_group committed, "
                              "{} groups no wgmma.wait_group retired)",
                              w.uncommitted.size(), w.pending.size()));
}

}  // namespace gptc::rt::emu
