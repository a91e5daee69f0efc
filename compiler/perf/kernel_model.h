// The H100 time of one kernel launch, from its PTX and launch shape alone
// (Note [kernel model]): `gptc inspect --estimate`, `gptc report` and the
// whole-step estimate (step_model.h) read it.
//
// Note [kernel model]
// LLVM-MCA for a GPU kernel: no counters, no GPU, the PTX the artifact holds.
//  1. Paths: the walker (Note [walking PTX]) runs the first lane of every
//     block (of 4096 spread over a larger grid) to tell blocks apart by how
//     many instructions they execute; blocks that execute as many are alike.
//     Of each kind (at most kMaxKinds, by quantiles of that count), one
//     block is walked whole: every warp's path and memory requests.
//  2. Memory levels: each request's L1 hits, L2 and DRAM bytes (Note
//     [memory levels] in request_costs.h).
//  3. Occupancy: as many blocks as registers (ptxas's count), shared memory,
//     warps and the block limit allow (BlocksPerSm), and no more than the
//     grid puts on one multiprocessor.
//  4. Time: each kind's block runs in the simulated multiprocessor (Note
//     [simulated multiprocessor]) beside as many copies of itself as are
//     resident, their starts staggered over a block's issue time (a running
//     multiprocessor's blocks are not in step); a resident slot turns a
//     block of that kind over in their mean time. The grid's blocks then go,
//     in order, to the slot that frees first (132 multiprocessors' worth),
//     and the kernel ends with its last block, plus the launch gap.
// What it cannot see: memory ordering and contention between
// multiprocessors beyond their bandwidth shares, L2's hit rate beyond
// reuse by many blocks, ptxas's instruction scheduling (PTX order is
// issue order), and divergence within a warp (its busiest lane's path).
#ifndef GPTC_COMPILER_PERF_KERNEL_MODEL_H_
#define GPTC_COMPILER_PERF_KERNEL_MODEL_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "compiler/perf/h100.h"
#include "compiler/perf/ptx_walker.h"
#include "compiler/perf/sm_simulator.h"

namespace gptc::perf {

inline constexpr int kMaxKinds = 24;

struct KernelTime {
  double us = 0;              // the launch, the launch gap included
  int64_t blocks_per_sm = 0;  // resident
  int64_t warps_per_scheduler = 0;
  int64_t kinds = 0;  // distinct blocks simulated
  double waves = 0;   // blocks / (132 x resident)
  // Over the simulated blocks, per multiprocessor clock: issue slots used
  // (of 4), the tensor pipes' and the shared-memory path's busy share, and
  // the DRAM bandwidth used (of this multiprocessor's share).
  double issue_use = 0, tensor_use = 0, mio_use = 0, dram_use = 0;
  double dram_bytes = 0;  // the launch's, estimated
  // Warp-clocks stalled per issued instruction, by reason (ncu's view).
  std::array<double, kNumStalls> stalls_per_issue{};
  std::string bound;             // "tensor", "issue", "memory", "shared", "latency"
  int64_t unknown_branches = 0;  // Note [walking PTX]
  bool truncated = false;
};

struct KernelLaunch {
  const PtxKernel* kernel = nullptr;
  LaunchShape shape;
  int64_t registers = 0;  // per thread (ptxas); 0: unknown, not a limit
};

StatusOr<KernelTime> EstimateKernel(const KernelLaunch& launch, const MachineModel& machine);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_KERNEL_MODEL_H_
