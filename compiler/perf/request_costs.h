// What each memory request of a walked block costs on an H100: its clocks on
// the multiprocessor's shared-memory and L1 path, the memory level it comes
// from and the bytes it draws from L2 and DRAM (Note [memory levels]).
//
// Note [memory levels]
// A global request's sectors come from L1 when its block touched them
// before, no more than its share of L1 ago (counted in sectors the block
// touched since; the warps' requests taken in step, the i-th of each warp
// before the (i+1)-th, as resident warps progress together); cp.async.cg
// and atomics skip L1, and stores do not fill it. The others come from L2
// when their buffer is read by many blocks (a sector of it is touched by
// more than 1.5 blocks on average: the attention's keys, a layer norm's
// gain), the buffer's DRAM bytes then spread over its readers; else from
// DRAM. A request waits for its slowest sector's level. Shared-memory
// requests take a clock a wavefront and the shared (or ldmatrix) latency.
#ifndef GPTC_COMPILER_PERF_REQUEST_COSTS_H_
#define GPTC_COMPILER_PERF_REQUEST_COSTS_H_

#include <cstdint>
#include <vector>

#include "compiler/perf/h100.h"
#include "compiler/perf/ptx_walker.h"
#include "compiler/perf/sm_simulator.h"

namespace gptc::perf {

// By warp, by request, for `walk` of `kernel`. `sharing[p]`: how many
// blocks read each sector of buffer p on average; `l1_bytes`: the block's
// share of L1.
std::vector<std::vector<RequestCost>> RequestCosts(const PtxKernel& kernel, const BlockWalk& walk,
                                                   const std::vector<double>& sharing,
                                                   int64_t l1_bytes, const MachineModel& machine);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_REQUEST_COSTS_H_
