// What one block of a launch executes, warp by warp, found by running the
// kernel's PTX on the host for the integer and address arithmetic only
// (Note [walking PTX]). The H100 model (kernel_model.h) times these paths.
//
// Note [walking PTX]
// The model needs three things of a launch that the PTX text alone does not
// say: how often each loop runs (a causal attention block's key loop runs as
// often as its query tile's index), which path each warp takes, and which
// bytes each memory instruction touches (its sectors, its shared-memory bank
// conflicts). All three follow from integer arithmetic on the thread and
// block indices, the loop counters and the parameters (Note [kernel ABI]:
// every parameter is a pointer to a buffer of known size), never from the
// data the kernel computes. So the walker runs each lane of a block over the
// PTX and evaluates only the slice of instructions that branch conditions,
// guards and addresses depend on (WalkPlan): float arithmetic, matrix
// products and loaded values are skipped, and a value loaded from memory is
// unknown. A branch on an unknown predicate (one that depends on loaded
// data, as a gather's bounds check might) falls through and is counted
// (BlockWalk::unknown_branches). Parameter i points at (i + 1) << 40; shared
// memory at its PTX offsets. A memory instruction's k-th execution by each
// lane of a warp is one warp request, as in Note [emulated memory counters]
// (runtime/emu/grid_runner.h): its global sectors are the distinct 32-byte
// pieces its lanes touch, its shared wavefronts the most distinct words one
// bank serves (at least the bytes / 128). A warp's path is its busiest
// lane's (the one that executed the most instructions); a divergent warp
// executes both sides of a branch, which this undercounts.
#ifndef GPTC_COMPILER_PERF_PTX_WALKER_H_
#define GPTC_COMPILER_PERF_PTX_WALKER_H_

#include <array>
#include <cstdint>
#include <vector>

#include "compiler/perf/ptx_program.h"

namespace gptc::perf {

struct Dim3 {
  int64_t x = 1, y = 1, z = 1;
  int64_t product() const { return x * y * z; }
};

// A launch of a kernel: its grid, its block and its buffers' sizes.
struct LaunchShape {
  Dim3 grid, block;
  int64_t dynamic_shared_bytes = 0;
  std::vector<int64_t> param_bytes;  // by parameter; a pointer's buffer size
};

// Which instructions the walker evaluates: the backward slice of branch
// conditions, guards and memory addresses. Built once per kernel.
struct WalkPlan {
  std::vector<int32_t> block_start;  // instruction id of each block's first
  std::vector<uint8_t> evaluate;     // by instruction id
  // By block: the instructions the walker looks at (evaluated ones,
  // memory instructions, branches and returns), by index in the block.
  std::vector<std::vector<int32_t>> visit;
  std::vector<int32_t> memory_index;  // by instruction id: its memory instruction number, or -1
  int32_t memory_instructions = 0;
};
WalkPlan PlanWalk(const PtxKernel& kernel);

// Loads, stores, atomics, cp.async and ldmatrix (not parameter loads): the
// instructions that make a MemoryRequest.
bool IsMemoryInstruction(const PtxInst& inst);

inline constexpr int kParamShift = 40;
// The parameter an address falls in, or -1.
int ParamOfAddress(uint64_t address, int params);

// One warp-level memory request on a warp's path (Note [walking PTX]).
struct MemoryRequest {
  PtxSpace space = PtxSpace::kNone;  // kGlobal (global and generic) or kShared
  int16_t param = -1;                // global: the buffer its first lane's address falls in
  bool known = true;                 // false: an address depended on loaded data
  bool executed = true;              // false: every lane's guard was off
  uint16_t wavefronts = 0;           // shared
  uint32_t bytes = 0;                // over its lanes
  // Global: its distinct sectors, of which the first `listed` are
  // BlockWalk::sectors[first_sector, first_sector + listed) (all of them
  // when the addresses were known; none otherwise, when `sectors` assumes
  // the lanes' bytes are contiguous).
  uint32_t first_sector = 0, listed = 0, sectors = 0;
};

struct WarpWalk {
  std::vector<int32_t> blocks;          // basic blocks in execution order
  std::vector<MemoryRequest> requests;  // one per memory instruction on the path, in order
  int64_t instructions = 0;             // PTX instructions on the path
  int32_t lanes = 0;                    // live lanes
};

struct BlockWalk {
  std::vector<WarpWalk> warps;
  // WalkOptions::first_lane_only: the global sectors that lane touched, by
  // buffer (the parameter; -1 unknown), for telling shared buffers apart.
  std::vector<std::pair<int16_t, uint64_t>> first_lane_sectors;
  std::vector<uint64_t> sectors;  // global sector numbers (address / 32) of every request
  int64_t unknown_branches = 0;
  bool truncated = false;  // a lane ran past WalkOptions::max_lane_instructions
};

struct WalkOptions {
  int64_t max_lane_instructions = int64_t{1} << 24;
  // Only warp 0's lane 0: how far a block runs and which sectors it
  // touches, without warp requests, for telling blocks apart cheaply.
  bool first_lane_only = false;
};

// Runs block `index` of `launch` (Note [walking PTX]).
BlockWalk WalkBlock(const PtxKernel& kernel, const WalkPlan& plan, const LaunchShape& launch,
                    int64_t block_index, const WalkOptions& options = {});

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_PTX_WALKER_H_
