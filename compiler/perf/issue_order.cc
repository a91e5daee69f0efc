#include "compiler/perf/issue_order.h"

#include <algorithm>
#include <unordered_map>

namespace gptc::perf {
namespace {

// Instructions nothing is moved across (Note [issue order]).
bool IsFence(const PtxInst& in) {
  switch (in.op) {
    case PtxOp::kBar:
    case PtxOp::kFence:
    case PtxOp::kCpAsyncCommit:
    case PtxOp::kCpAsyncWait:
    case PtxOp::kWgmma:
    case PtxOp::kWgmmaFence:
    case PtxOp::kWgmmaCommit:
    case PtxOp::kWgmmaWait:
    case PtxOp::kBra:
    case PtxOp::kRet:
      return true;
    case PtxOp::kOther:
      return in.dsts.empty();
    default:
      return false;
  }
}

enum Space { kSharedSpace, kGlobalSpace, kNumSpaces };

struct Effects {
  bool loads[kNumSpaces] = {false, false};
  bool stores[kNumSpaces] = {false, false};
};

Effects EffectsOf(const PtxInst& in) {
  Effects e;
  const bool shared = in.space == PtxSpace::kShared;
  const bool generic = in.space == PtxSpace::kGeneric;
  switch (in.op) {
    case PtxOp::kLd:
      if (in.space == PtxSpace::kParam || in.space == PtxSpace::kConst) break;
      e.loads[kSharedSpace] = shared || generic;
      e.loads[kGlobalSpace] = !shared;
      break;
    case PtxOp::kLdmatrix:
      e.loads[kSharedSpace] = true;
      break;
    case PtxOp::kSt:
    case PtxOp::kAtom:
      e.stores[kSharedSpace] = shared || generic;
      e.stores[kGlobalSpace] = !shared;
      break;
    case PtxOp::kCpAsync:
      e.loads[kGlobalSpace] = true;
      e.stores[kSharedSpace] = true;
      break;
    default:
      break;
  }
  return e;
}

int PriorityLatency(const PtxInst& in, const MachineModel& m) {
  const InstTiming t = TimingOf(in, m);
  if (in.op == PtxOp::kLd) {
    if (in.space == PtxSpace::kShared) return m.shared_latency;
    if (in.space == PtxSpace::kParam || in.space == PtxSpace::kConst) return 0;
    return m.l2_latency;
  }
  if (in.op == PtxOp::kLdmatrix) return m.ldmatrix_latency;
  if (in.op == PtxOp::kSt || in.op == PtxOp::kCpAsync || in.op == PtxOp::kAtom) return 1;
  return std::max<int>(t.latency, t.issue > 0 ? 1 : 0);
}

// Which registers are live where (Note [issue order]): a backward dataflow
// over the kernel's blocks. A guarded write does not end a value's life.
struct Liveness {
  std::vector<std::vector<uint8_t>> live_in, live_out;  // by block, by register
};

template <typename F>
void ForEachRead(const PtxInst& in, F f) {
  for (const PtxOperand& o : in.srcs) {
    if (o.kind == PtxOperand::kReg) f(o.reg);
  }
  if (in.addr.kind == PtxOperand::kReg) f(in.addr.reg);
  if (in.addr2.kind == PtxOperand::kReg) f(in.addr2.reg);
  if (in.guard >= 0) f(in.guard);
}

Liveness Live(const PtxKernel& k) {
  const size_t nb = k.blocks.size(), nr = k.registers.size();
  std::vector<std::vector<uint8_t>> use(nb, std::vector<uint8_t>(nr, 0)), def = use;
  std::vector<std::vector<size_t>> succ(nb);
  for (size_t b = 0; b < nb; ++b) {
    for (const PtxInst& in : k.blocks[b].insts) {
      ForEachRead(in, [&](int32_t r) {
        if (!def[b][r]) use[b][r] = 1;
      });
      if (in.guard < 0) {
        for (int32_t d : in.dsts) def[b][d] = 1;
      }
    }
    const PtxInst* last = k.blocks[b].insts.empty() ? nullptr : &k.blocks[b].insts.back();
    const bool ends =
        last && (last->op == PtxOp::kRet || last->op == PtxOp::kBra) && last->guard < 0;
    if (last && last->op == PtxOp::kBra && last->target >= 0) succ[b].push_back(last->target);
    if (!ends && b + 1 < nb) succ[b].push_back(b + 1);
  }
  Liveness l;
  l.live_in.assign(nb, std::vector<uint8_t>(nr, 0));
  l.live_out = l.live_in;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t b = nb; b-- > 0;) {
      for (size_t s : succ[b]) {
        for (size_t r = 0; r < nr; ++r) {
          if (l.live_in[s][r] && !l.live_out[b][r]) {
            l.live_out[b][r] = 1;
            changed = true;
          }
        }
      }
      for (size_t r = 0; r < nr; ++r) {
        const uint8_t in = use[b][r] || (l.live_out[b][r] && !def[b][r]);
        if (in && !l.live_in[b][r]) {
          l.live_in[b][r] = 1;
          changed = true;
        }
      }
    }
  }
  return l;
}

// The scheduling state of one block: what is live, and its pressure.
struct Pressure {
  const PtxKernel& k;
  const std::vector<uint8_t>& live_out;
  std::vector<uint8_t> live;
  std::vector<int32_t> remaining;  // reads not yet scheduled
  int64_t now = 0;

  int Weight(int32_t r) const {
    const int bits = TypeBits(k.register_types[r]);
    return bits <= 1 ? 0 : bits > 32 ? 2 : 1;
  }
  // What scheduling `in` would add.
  int64_t Delta(const PtxInst& in) const {
    int64_t d = 0;
    for (int32_t r : in.dsts) {
      if (!live[r] && (remaining[r] > 0 || live_out[r])) d += Weight(r);
    }
    std::vector<int32_t> seen;
    ForEachRead(in, [&](int32_t r) {
      if (std::find(seen.begin(), seen.end(), r) != seen.end()) return;
      int reads = 0;
      ForEachRead(in, [&](int32_t q) { reads += q == r; });
      seen.push_back(r);
      if (live[r] && remaining[r] == reads && !live_out[r]) d -= Weight(r);
    });
    return d;
  }
  void Schedule(const PtxInst& in) {
    ForEachRead(in, [&](int32_t r) {
      if (--remaining[r] == 0 && !live_out[r] && live[r]) {
        live[r] = 0;
        now -= Weight(r);
      }
    });
    for (int32_t r : in.dsts) {
      if (!live[r] && (remaining[r] > 0 || live_out[r])) {
        live[r] = 1;
        now += Weight(r);
      }
    }
  }
};

// The range's dependence graph (Note [issue order]): register producers
// before readers, earlier readers and writers before a register's next
// writer, and memory order within each space.
struct Dependences {
  std::vector<std::vector<int>> succs;
  std::vector<int> preds;
};

Dependences Depend(const PtxBlock& block, int begin, int end) {
  const int n = end - begin;
  Dependences g{std::vector<std::vector<int>>(n), std::vector<int>(n, 0)};
  auto edge = [&](int from, int to) {
    if (from < 0 || from == to) return;
    g.succs[from].push_back(to);
    ++g.preds[to];
  };
  std::unordered_map<int32_t, int> last_writer;
  std::unordered_map<int32_t, std::vector<int>> readers_since_write;
  int last_store[kNumSpaces] = {-1, -1};
  std::vector<int> loads_since_store[kNumSpaces];
  for (int j = 0; j < n; ++j) {
    const PtxInst& in = block.insts[begin + j];
    ForEachRead(in, [&](int32_t reg) {
      auto it = last_writer.find(reg);
      if (it != last_writer.end()) edge(it->second, j);
      readers_since_write[reg].push_back(j);
    });
    for (int32_t d : in.dsts) {
      auto it = last_writer.find(d);
      if (it != last_writer.end()) edge(it->second, j);
      for (int r : readers_since_write[d]) edge(r, j);
      readers_since_write[d].clear();
      last_writer[d] = j;
    }
    const Effects e = EffectsOf(in);
    for (int s = 0; s < kNumSpaces; ++s) {
      if (e.loads[s]) {
        edge(last_store[s], j);
        loads_since_store[s].push_back(j);
      }
      if (e.stores[s]) {
        edge(last_store[s], j);
        for (int l : loads_since_store[s]) edge(l, j);
        loads_since_store[s].clear();
        last_store[s] = j;
      }
    }
  }
  return g;
}

void ScheduleRange(const PtxBlock& block, int begin, int end, const MachineModel& m, int64_t budget,
                   Pressure& pressure, std::vector<int32_t>& order) {
  const int n = end - begin;
  Dependences g = Depend(block, begin, end);
  // Longest latency path to the range's end.
  std::vector<int64_t> height(n, 0);
  for (int j = n - 1; j >= 0; --j) {
    int64_t below = 0;
    for (int s : g.succs[j]) below = std::max(below, height[s]);
    height[j] = below + PriorityLatency(block.insts[begin + j], m);
  }
  auto higher = [&](int a, int b) {
    return height[a] > height[b] || (height[a] == height[b] && a < b);
  };
  std::vector<int> ready;
  for (int j = 0; j < n; ++j) {
    if (g.preds[j] == 0) ready.push_back(j);
  }
  while (!ready.empty()) {
    auto best = ready.begin();
    for (auto it = ready.begin(); it != ready.end(); ++it) {
      if (higher(*it, *best)) best = it;
    }
    if (budget > 0 &&
        pressure.now + std::max<int64_t>(pressure.Delta(block.insts[begin + *best]), 0) > budget) {
      // Over the registers: the instruction that adds the fewest.
      int64_t least = 0;
      for (auto it = ready.begin(); it != ready.end(); ++it) {
        const int64_t d = pressure.Delta(block.insts[begin + *it]);
        if (it == ready.begin() || d < least || (d == least && higher(*it, *best))) {
          least = d;
          best = it;
        }
      }
    }
    const int j = *best;
    ready.erase(best);
    pressure.Schedule(block.insts[begin + j]);
    order.push_back(begin + j);
    for (int s : g.succs[j]) {
      if (--g.preds[s] == 0) ready.push_back(s);
    }
  }
}

}  // namespace

std::vector<std::vector<int32_t>> IssueOrders(const PtxKernel& kernel, const MachineModel& machine,
                                              int64_t registers) {
  const Liveness liveness = Live(kernel);
  std::vector<std::vector<int32_t>> orders;
  for (size_t b = 0; b < kernel.blocks.size(); ++b) {
    const PtxBlock& block = kernel.blocks[b];
    Pressure pressure{kernel, liveness.live_out[b], liveness.live_in[b],
                      std::vector<int32_t>(kernel.registers.size(), 0)};
    for (const PtxInst& in : block.insts)
      ForEachRead(in, [&](int32_t r) { ++pressure.remaining[r]; });
    for (size_t r = 0; r < kernel.registers.size(); ++r) {
      if (pressure.live[r]) pressure.now += pressure.Weight(static_cast<int32_t>(r));
    }
    std::vector<int32_t> order;
    order.reserve(block.insts.size());
    const int n = static_cast<int>(block.insts.size());
    // PTX counts more live values than ptxas allocates registers for (it
    // folds addresses and rematerializes constants), so the block may
    // reach the larger of its text order's peak and ptxas's count.
    int64_t budget = registers;
    if (budget > 0) {
      Pressure text = pressure;
      int64_t peak = text.now;
      for (const PtxInst& in : block.insts) {
        text.Schedule(in);
        peak = std::max(peak, text.now);
      }
      budget = std::max(budget, peak);
    }
    int start = 0;
    for (int i = 0; i <= n; ++i) {
      if (i < n && !IsFence(block.insts[i])) continue;
      ScheduleRange(block, start, i, machine, budget, pressure, order);
      if (i < n) {
        pressure.Schedule(block.insts[i]);
        order.push_back(i);
      }
      start = i + 1;
    }
    orders.push_back(std::move(order));
  }
  return orders;
}

}  // namespace gptc::perf
