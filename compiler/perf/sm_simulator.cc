#include "compiler/perf/sm_simulator.h"

#include <algorithm>
#include <limits>

namespace gptc::perf {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max() / 4;
// Clocks of requests the shared-memory path queues before a warp must wait
// to issue another (ncu's "MIO throttle").
constexpr int64_t kMioQueueClocks = 32;

struct WgmmaOp {
  int arrived = 0;
  int64_t last_arrival = 0;
  int64_t done = kNever;
};

struct Warp {
  int block = 0, sp = 0, warpgroup = 0;
  const WarpWalk* walk = nullptr;
  const std::vector<RequestCost>* costs = nullptr;
  size_t path = 0, inst = 0;   // inst: the place in the block's issue order
  size_t req_base = 0;         // the block's first request
  std::vector<int64_t> ready;  // by register
  std::vector<uint8_t> kind;   // Wait of the register's producer
  int64_t next_free = 0;       // after its last issue slots
  int64_t blocked_until = 0;   // a barrier's release
  bool at_barrier = false, done = false;
  std::vector<int64_t> cp_groups;  // committed cp.async groups' completion
  int64_t cp_open = 0;
  std::vector<int64_t> wg_groups;  // committed wgmma groups: their last op, or -1
  int64_t wg_open_last = -1, wg_seq = 0;
  // The current instruction and when it may issue.
  const PtxInst* in = nullptr;
  int32_t id = 0;
  int64_t dep_ready = 0;
  Stall dep_kind = Stall::kFixed;
};

struct BlockState {
  int live = 0, arrived = 0;
  int64_t last_arrival = 0, finish = 0;
  std::vector<int> warps;
  std::vector<std::vector<WgmmaOp>> wgmma;  // by warpgroup, by sequence
};

Stall StallOf(uint8_t wait) {
  switch (static_cast<Wait>(wait)) {
    case Wait::kShort:
      return Stall::kShort;
    case Wait::kLong:
      return Stall::kLong;
    case Wait::kTensor:
      return Stall::kTensor;
    default:
      return Stall::kFixed;
  }
}

class Simulator {
 public:
  Simulator(const SimKernel& k, const std::vector<SimBlock>& blocks, const MachineModel& m,
            int64_t active_sms)
      : k_(k), m_(m), blocks_(blocks.size()) {
    const size_t regs = k.kernel->registers.size();
    int slot = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      const BlockWalk& walk = *blocks[b].walk;
      BlockState& bs = blocks_[b];
      bs.wgmma.resize((walk.warps.size() + 3) / 4);
      for (size_t w = 0; w < walk.warps.size(); ++w) {
        Warp warp;
        warp.block = static_cast<int>(b);
        warp.sp = slot++ % m.sub_partitions;
        warp.warpgroup = static_cast<int>(w / 4);
        warp.walk = &walk.warps[w];
        warp.costs = &(*blocks[b].costs)[w];
        warp.ready.assign(regs, 0);
        warp.kind.assign(regs, static_cast<uint8_t>(Wait::kFixed));
        warp.next_free = blocks[b].start;
        bs.warps.push_back(static_cast<int>(warps_.size()));
        warps_.push_back(std::move(warp));
      }
      bs.live = static_cast<int>(walk.warps.size());
      bs.finish = blocks[b].start;
    }
    pipe_free_.assign(m.sub_partitions, {});
    sp_busy_.assign(m.sub_partitions, 0);
    last_issued_.assign(m.sub_partitions, -1);
    const double sharing = static_cast<double>(std::clamp<int64_t>(active_sms, 1, m.sms));
    dram_bpc_ = std::min(m.dram_bytes_per_clock / sharing, m.sm_port_bytes_per_clock);
    l2_bpc_ = std::min(m.l2_bytes_per_clock / sharing, m.sm_port_bytes_per_clock);
  }

  SimResult Run() {
    int live = 0;
    for (Warp& w : warps_) {
      Settle(w);
      if (!w.done) ++live;
    }
    int64_t t = 0;
    for (const Warp& w : warps_) t = std::min(t, w.next_free);
    while (live > 0) {
      bool issued = false;
      for (int sp = 0; sp < m_.sub_partitions; ++sp) {
        if (sp_busy_[sp] > t) continue;
        int pick = -1;
        int last = last_issued_[sp];
        if (last >= 0 && Eligible(warps_[last], t)) {
          pick = last;
        } else {
          for (size_t i = 0; i < warps_.size(); ++i) {
            if (warps_[i].sp == sp && Eligible(warps_[i], t)) {
              pick = static_cast<int>(i);
              break;
            }
          }
        }
        if (pick < 0) continue;
        last_issued_[sp] = pick;
        Issue(warps_[pick], t);
        if (warps_[pick].done) --live;
        issued = true;
      }
      if (issued) {
        ++t;
        continue;
      }
      int64_t next = kNever;
      for (const Warp& w : warps_) {
        if (w.done || w.at_barrier) continue;
        next = std::min(next, std::max(EarliestIssue(w), sp_busy_[w.sp]));
      }
      if (next >= kNever) break;  // every live warp waits at a barrier: a deadlock
      t = std::max(t + 1, next);
    }
    SimResult r = std::move(result_);
    for (const BlockState& b : blocks_) {
      r.finish.push_back(b.finish);
      r.clocks = std::max(r.clocks, b.finish);
    }
    return r;
  }

 private:
  Pipe PipeOf(const Warp& w) const { return k_.timing[w.id].pipe; }

  int64_t PipeFree(const Warp& w) const {
    const Pipe p = PipeOf(w);
    if (p == Pipe::kNone) return 0;
    if (p == Pipe::kMio) return mio_free_ - kMioQueueClocks;
    if (w.in->op == PtxOp::kWgmma) return 0;  // waits for its warpgroup instead
    return pipe_free_[w.sp][static_cast<int>(p)];
  }

  int64_t EarliestIssue(const Warp& w) const { return std::max(w.dep_ready, PipeFree(w)); }

  bool Eligible(const Warp& w, int64_t t) const {
    return !w.done && !w.at_barrier && w.dep_ready <= t && PipeFree(w) <= t;
  }

  // Moves to the warp's next instruction that takes an issue slot, doing the
  // free ones on the way, and computes when it may issue.
  void Settle(Warp& w) {
    while (true) {
      if (w.path >= w.walk->blocks.size()) {
        Finish(w);
        return;
      }
      const int32_t b = w.walk->blocks[w.path];
      const PtxBlock& block = k_.kernel->blocks[b];
      const std::vector<int32_t>& order = k_.order[b];
      if (w.inst >= order.size()) {
        ++w.path;
        w.inst = 0;
        w.req_base += k_.memory_count[b];
        continue;
      }
      w.in = &block.insts[order[w.inst]];
      w.id = k_.block_start[b] + order[w.inst];
      if (k_.timing[w.id].issue > 0 || w.in->op == PtxOp::kBar) break;
      // A free instruction: its results are ready when its operands are.
      int64_t r = 0;
      uint8_t kind = static_cast<uint8_t>(Wait::kFixed);
      for (const PtxOperand& o : w.in->srcs) {
        if (o.kind == PtxOperand::kReg && w.ready[o.reg] > r) {
          r = w.ready[o.reg];
          kind = w.kind[o.reg];
        }
      }
      for (int32_t d : w.in->dsts) {
        w.ready[d] = r;
        w.kind[d] = kind;
      }
      ++w.inst;
    }
    ComputeReady(w);
  }

  void ComputeReady(Warp& w) {
    const PtxInst& in = *w.in;
    int64_t r = std::max(w.next_free, w.blocked_until);
    Stall kind = w.blocked_until > w.next_free ? Stall::kBarrier : Stall::kFixed;
    auto reg = [&](int32_t reg) {
      if (reg >= 0 && w.ready[reg] > r) {
        r = w.ready[reg];
        kind = StallOf(w.kind[reg]);
      }
    };
    const bool wgmma = in.op == PtxOp::kWgmma;
    for (const PtxOperand& o : in.srcs) {
      if (o.kind != PtxOperand::kReg) continue;
      if (wgmma && std::find(in.dsts.begin(), in.dsts.end(), o.reg) != in.dsts.end()) continue;
      reg(o.reg);
    }
    if (in.addr.kind == PtxOperand::kReg) reg(in.addr.reg);
    if (in.addr2.kind == PtxOperand::kReg) reg(in.addr2.reg);
    reg(in.guard);
    if (in.op == PtxOp::kCpAsyncWait) {
      const size_t keep = in.srcs.empty() ? 0 : static_cast<size_t>(in.srcs[0].imm);
      int64_t open = in.srcs.empty() ? w.cp_open : 0;  // wait_all waits for the open group too
      for (size_t g = 0; g + keep < w.cp_groups.size(); ++g) open = std::max(open, w.cp_groups[g]);
      if (open > r) {
        r = open;
        kind = Stall::kLong;
      }
    }
    if (in.op == PtxOp::kWgmmaWait) {
      const size_t keep = in.srcs.empty() ? 0 : static_cast<size_t>(in.srcs[0].imm);
      for (size_t g = 0; g + keep < w.wg_groups.size(); ++g) {
        if (w.wg_groups[g] < 0) continue;
        const int64_t d = blocks_[w.block].wgmma[w.warpgroup][w.wg_groups[g]].done;
        if (d > r) {
          r = d;
          kind = Stall::kTensor;
        }
      }
    }
    w.dep_ready = r;
    w.dep_kind = kind;
  }

  void Finish(Warp& w) {
    if (w.done) return;
    w.done = true;
    BlockState& b = blocks_[w.block];
    b.finish = std::max(b.finish, w.next_free);
    --b.live;
    MaybeRelease(b, w.next_free);
  }

  void MaybeRelease(BlockState& b, int64_t t) {
    if (b.arrived == 0 || b.arrived < b.live) return;
    const int64_t release = std::max(b.last_arrival, t) + m_.barrier_latency;
    b.arrived = 0;
    for (int i : b.warps) {
      Warp& w = warps_[i];
      if (!w.at_barrier) continue;
      w.at_barrier = false;
      w.blocked_until = release;
      ++w.inst;
      Settle(w);
    }
  }

  int64_t Request(Warp& w, int64_t t, Wait* wait) {
    RequestCost cost;
    const size_t req = w.req_base + std::max(k_.memory_rank[w.id], 0);
    if (req < w.costs->size()) cost = (*w.costs)[req];
    *wait = cost.wait;
    const int64_t start = std::max(t, mio_free_);
    mio_free_ = start + cost.mio_clocks;
    result_.pipe_busy[static_cast<int>(Pipe::kMio)] += cost.mio_clocks;
    double end = static_cast<double>(mio_free_);
    if (cost.dram_bytes > 0) {
      dram_free_ = std::max(dram_free_, static_cast<double>(start)) + cost.dram_bytes / dram_bpc_;
      end = std::max(end, dram_free_);
      result_.dram_bytes += cost.dram_bytes;
    }
    if (cost.l2_bytes > 0) {
      l2_free_ = std::max(l2_free_, static_cast<double>(start)) + cost.l2_bytes / l2_bpc_;
      end = std::max(end, l2_free_);
      result_.l2_bytes += cost.l2_bytes;
    }
    return static_cast<int64_t>(end) + cost.latency;
  }

  void Account(Warp& w, int64_t t) {
    const int64_t earliest = w.next_free;
    if (t <= earliest) return;
    int64_t gap = t - earliest;
    const int64_t dep = std::clamp(w.dep_ready - earliest, int64_t{0}, gap);
    result_.stalls[static_cast<int>(w.dep_kind)] += dep;
    gap -= dep;
    const int64_t pipe = std::clamp(PipeFree(w) - std::max(earliest, w.dep_ready), int64_t{0}, gap);
    result_.stalls[static_cast<int>(Stall::kPipe)] += pipe;
    gap -= pipe;
    result_.stalls[static_cast<int>(Stall::kNotSelected)] += gap;
  }

  void StartWgmma(Warp& w, int64_t t) {
    BlockState& b = blocks_[w.block];
    std::vector<WgmmaOp>& ops = b.wgmma[w.warpgroup];
    const int64_t seq = w.wg_seq++;
    if (static_cast<int64_t>(ops.size()) <= seq) ops.resize(seq + 1);
    WgmmaOp& op = ops[seq];
    ++op.arrived;
    op.last_arrival = std::max(op.last_arrival, t);
    w.wg_open_last = seq;
    // The warpgroup's live warps (a block of fewer than 4k warps has a
    // partial last warpgroup, which wgmma does not allow; count what is there).
    int members = 0;
    for (int i : b.warps) members += warps_[i].warpgroup == w.warpgroup;
    if (op.arrived < members) return;
    const PtxInst& in = *w.in;
    const double clocks = static_cast<double>(in.n) / 8.0 * (in.k / 16.0) * m_.wgmma_clocks;
    int64_t start = op.last_arrival;
    for (int i : b.warps) {
      if (warps_[i].warpgroup == w.warpgroup) {
        start = std::max(start, pipe_free_[warps_[i].sp][static_cast<int>(Pipe::kTensor)]);
      }
    }
    const int64_t busy = static_cast<int64_t>(clocks + 0.5);
    for (int i : b.warps) {
      if (warps_[i].warpgroup != w.warpgroup) continue;
      pipe_free_[warps_[i].sp][static_cast<int>(Pipe::kTensor)] = start + busy;
      result_.pipe_busy[static_cast<int>(Pipe::kTensor)] += busy;
    }
    op.done = start + busy + m_.mma_latency;
    for (int i : b.warps) {
      Warp& peer = warps_[i];
      if (!peer.done && !peer.at_barrier && peer.in && peer.in->op == PtxOp::kWgmmaWait) {
        ComputeReady(peer);
      }
    }
  }

  // The cp.async and wgmma group bookkeeping of commit and wait_group N
  // (all but the newest N groups retire; a wait_all retires the open one too).
  void Groups(Warp& w) {
    const PtxInst& in = *w.in;
    const size_t keep = in.srcs.empty() ? 0 : static_cast<size_t>(in.srcs[0].imm);
    switch (in.op) {
      case PtxOp::kCpAsyncCommit:
        w.cp_groups.push_back(w.cp_open);
        w.cp_open = 0;
        return;
      case PtxOp::kCpAsyncWait:
        if (in.srcs.empty()) w.cp_open = 0;
        if (w.cp_groups.size() > keep)
          w.cp_groups.erase(w.cp_groups.begin(), w.cp_groups.end() - keep);
        return;
      case PtxOp::kWgmmaCommit:
        w.wg_groups.push_back(w.wg_open_last);
        w.wg_open_last = -1;
        return;
      default:  // wgmma.wait_group
        if (w.wg_groups.size() > keep)
          w.wg_groups.erase(w.wg_groups.begin(), w.wg_groups.end() - keep);
        return;
    }
  }

  void Issue(Warp& w, int64_t t) {
    Account(w, t);
    const InstTiming& timing = k_.timing[w.id];
    const PtxInst& in = *w.in;
    const int slots = std::max<int>(timing.issue, 1);
    w.next_free = t + slots;
    sp_busy_[w.sp] = t + slots;
    result_.issued += slots;
    ++result_.warp_instructions;
    int64_t done = t + timing.latency;
    uint8_t wait = static_cast<uint8_t>(timing.wait);
    switch (in.op) {
      case PtxOp::kBar: {
        BlockState& b = blocks_[w.block];
        w.at_barrier = true;
        ++b.arrived;
        b.last_arrival = std::max(b.last_arrival, t);
        MaybeRelease(b, t);
        return;  // the release moves the warp on
      }
      case PtxOp::kRet:
        Finish(w);
        return;
      case PtxOp::kCpAsync: {
        Wait unused;
        w.cp_open = std::max(w.cp_open, Request(w, t, &unused));
        break;
      }
      case PtxOp::kCpAsyncCommit:
      case PtxOp::kCpAsyncWait:
      case PtxOp::kWgmmaCommit:
      case PtxOp::kWgmmaWait:
        Groups(w);
        break;
      case PtxOp::kWgmma:
        StartWgmma(w, t);
        done = t;  // its readers wait at wgmma.wait_group
        break;
      case PtxOp::kShfl:
        mio_free_ = std::max(mio_free_, t) + 1;
        result_.pipe_busy[static_cast<int>(Pipe::kMio)] += 1;
        break;
      default:
        if (timing.pipe == Pipe::kMio) {
          Wait request_wait;
          done = Request(w, t, &request_wait);
          wait = static_cast<uint8_t>(request_wait);
        } else if (timing.pipe != Pipe::kNone) {
          const int p = static_cast<int>(timing.pipe);
          pipe_free_[w.sp][p] = t + timing.pipe_clocks;
          result_.pipe_busy[p] += timing.pipe_clocks;
        }
        break;
    }
    for (int32_t d : in.dsts) {
      w.ready[d] = done;
      w.kind[d] = wait;
    }
    ++w.inst;
    Settle(w);
  }

  const SimKernel& k_;
  const MachineModel& m_;
  std::vector<BlockState> blocks_;
  std::vector<Warp> warps_;
  std::vector<std::array<int64_t, kNumPipes>> pipe_free_;
  std::vector<int64_t> sp_busy_;
  std::vector<int> last_issued_;
  int64_t mio_free_ = 0;
  double dram_free_ = 0, l2_free_ = 0, dram_bpc_ = 0, l2_bpc_ = 0;
  SimResult result_;
};

}  // namespace

const char* StallName(Stall s) {
  static const char* kNames[] = {"wait",         "short_scoreboard", "long_scoreboard",
                                 "tensor",       "pipe_throttle",    "barrier",
                                 "not_selected", "dispatch"};
  return kNames[static_cast<int>(s)];
}

SimKernel PrepareSimKernel(const PtxKernel& kernel, const MachineModel& machine,
                           int64_t registers) {
  SimKernel k;
  k.kernel = &kernel;
  k.order = IssueOrders(kernel, machine, registers);
  for (const PtxBlock& b : kernel.blocks) {
    k.block_start.push_back(static_cast<int32_t>(k.timing.size()));
    int32_t rank = 0;
    for (const PtxInst& in : b.insts) {
      k.timing.push_back(TimingOf(in, machine));
      k.memory_rank.push_back(IsMemoryInstruction(in) ? rank++ : -1);
    }
    k.memory_count.push_back(rank);
  }
  return k;
}

SimResult SimulateSm(const SimKernel& kernel, const std::vector<SimBlock>& blocks,
                     const MachineModel& machine, int64_t active_sms) {
  Simulator sim(kernel, blocks, machine, active_sms);
  return sim.Run();
}

}  // namespace gptc::perf
