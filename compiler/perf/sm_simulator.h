// One H100 multiprocessor running the blocks resident on it, clock by clock
// (Note [simulated multiprocessor]).
//
// Note [simulated multiprocessor]
// What a static model needs to see of a kernel that waits more than it
// works: four schedulers, each issuing at most one warp instruction a clock
// from its warps (a block's warp w on scheduler (slot + w) % 4), oldest
// first after the warp that issued last (greedy-then-oldest). A warp issues
// its next instruction, in issue order (Note [issue order]), once
//   - the registers it reads are ready: each result is ready its latency
//     after issue (Note [H100 machine model]); a load's when its request
//     comes back: its sectors through the multiprocessor's L1 path (four a
//     clock), then from L1, or L2 or DRAM through this multiprocessor's
//     share of their bandwidth (theirs over the multiprocessors the grid
//     keeps busy, at most its own port's), each a queue served in order,
//     plus the level's latency;
//   - the pipe it needs is free: its scheduler's fp32, integer, special-
//     function, conversion and tensor pipes, or the multiprocessor's shared
//     memory path, each held the instruction's clocks;
//   - it is not waiting at a barrier (released the barrier latency after its
//     block's last warp arrives), for cp.async groups (cp.async.wait_group N:
//     all but the newest N committed groups have landed), or for wgmma
//     groups. A wgmma starts when the four warps of its warpgroup have
//     issued it and holds all four tensor pipes N / 2 clocks a k16 step
//     (Note [H100 machine model]); its accumulators are ready when its
//     group is, and only the next wgmma reads them before (as the
//     hardware chains them).
// The paths and memory requests are the walker's (ptx_walker.h); a request's
// level and bytes are decided before (kernel_model.cc). Each clock a warp
// waits is put down to one reason, as ncu's warp states: the kind of result
// it waits for (fixed latency, short scoreboard: shared memory, shuffles and
// the special-function unit; long scoreboard: global memory; tensor), a busy
// pipe, a barrier, or another warp issuing.
#ifndef GPTC_COMPILER_PERF_SM_SIMULATOR_H_
#define GPTC_COMPILER_PERF_SM_SIMULATOR_H_

#include <array>
#include <cstdint>
#include <vector>

#include "compiler/perf/h100.h"
#include "compiler/perf/issue_order.h"
#include "compiler/perf/ptx_walker.h"

namespace gptc::perf {

// A kernel's instructions with their timing and issue order.
struct SimKernel {
  const PtxKernel* kernel = nullptr;
  std::vector<InstTiming> timing;           // by instruction id
  std::vector<int32_t> block_start;         // instruction id of each basic block's first
  std::vector<std::vector<int32_t>> order;  // by block: its instructions in issue order
  // By instruction id: its place among its block's memory instructions in
  // text order (the order of the walker's requests), -1 for others.
  std::vector<int32_t> memory_rank;
  std::vector<int32_t> memory_count;  // by block
};
// `registers`: ptxas's count a thread (Note [issue order]; 0: unknown).
SimKernel PrepareSimKernel(const PtxKernel& kernel, const MachineModel& machine, int64_t registers);

// What the memory system does with one request of a warp's path.
struct RequestCost {
  uint16_t mio_clocks = 1;  // on the multiprocessor's shared-memory and L1 path
  uint16_t latency = 0;     // after the request leaves its queue
  float dram_bytes = 0;     // through this multiprocessor's DRAM share
  float l2_bytes = 0;       // through its L2 share
  Wait wait = Wait::kLong;
};

struct SimBlock {
  const BlockWalk* walk = nullptr;
  const std::vector<std::vector<RequestCost>>* costs = nullptr;  // by warp, by request
  int64_t start = 0;                                             // the clock its warps may start
};

// ncu's warp states, as Note [simulated multiprocessor] counts them.
enum class Stall : uint8_t {
  kFixed,
  kShort,
  kLong,
  kTensor,
  kPipe,
  kBarrier,
  kNotSelected,
  kDispatch,
};
inline constexpr int kNumStalls = 8;
const char* StallName(Stall s);

struct SimResult {
  std::vector<int64_t> finish;  // by block, the clock its last warp ended
  int64_t clocks = 0;           // the last finish
  int64_t issued = 0;           // issue slots used, over all schedulers
  int64_t warp_instructions = 0;
  std::array<int64_t, kNumPipes> pipe_busy{};  // clocks, summed over schedulers (kMio: once)
  double dram_bytes = 0, l2_bytes = 0;
  std::array<int64_t, kNumStalls> stalls{};  // warp-clocks by reason
};

// `active_sms`: the multiprocessors sharing DRAM and L2 with this one (a
// small grid leaves each more than its 1/132, up to its own port).
SimResult SimulateSm(const SimKernel& kernel, const std::vector<SimBlock>& blocks,
                     const MachineModel& machine, int64_t active_sms);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_SM_SIMULATOR_H_
