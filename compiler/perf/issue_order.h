// The order in which a basic block's instructions issue, as ptxas would
// schedule them (Note [issue order]).
//
// Note [issue order]
// LLVM writes PTX in an order that suits its own register allocation: an
// ldmatrix right before the mma that reads it, a global load right before
// its first use. ptxas schedules each basic block again for the machine's
// latencies, moving loads and other long-latency instructions as early as
// their operands allow, so that a warp has independent work while they are
// in flight; the H100 measured the attention kernels with few short-
// scoreboard stalls where PTX order would wait out every ldmatrix. The model
// issues each block in the order of a list scheduler that does the same:
// an instruction is ready once its operands' producers, the earlier writers
// and readers of the registers it writes, and (for memory) the earlier
// instructions it may not pass have been placed; of the ready ones the one
// with the longest latency path to the block's end goes first (then text
// order). Nothing moves across a barrier, a fence, a cp.async or wgmma
// group boundary, or a shuffle's warp rendezvous; stores stay in order with
// every memory access of their space, loads with stores; the branch stays
// last. ptxas must also fit the block in the registers it allocated (its
// count, which sets occupancy): while the values live at a point (live
// across the block, from a liveness analysis of the kernel, plus those the
// block defined and has not finished reading; 64-bit values take two) would
// exceed that count, the ready instruction that adds the fewest goes first,
// so a load is not hoisted past the point where its result would have to
// spill.
#ifndef GPTC_COMPILER_PERF_ISSUE_ORDER_H_
#define GPTC_COMPILER_PERF_ISSUE_ORDER_H_

#include <vector>

#include "compiler/perf/h100.h"
#include "compiler/perf/ptx_program.h"

namespace gptc::perf {

// For each basic block of `kernel`, indices into its `insts` in issue
// order, for `registers` a thread (ptxas's count; 0: no limit).
std::vector<std::vector<int32_t>> IssueOrders(const PtxKernel& kernel, const MachineModel& machine,
                                              int64_t registers);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_ISSUE_ORDER_H_
