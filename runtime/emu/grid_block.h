// The state the grid runner keeps for a block and its threads, shared by
// grid_runner.cc (running them) and warp_counters.cc (Note [emulated memory
// counters], Note [emulated instruction counters]).
//
// Internal to runtime/emu.
#ifndef GPTC_RUNTIME_EMU_GRID_BLOCK_H_
#define GPTC_RUNTIME_EMU_GRID_BLOCK_H_

#include <csetjmp>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/emu/fiber.h"
#include "runtime/emu/grid_runner.h"
#include "runtime/emu/warp_matrix.h"
#include "runtime/emu/warpgroup.h"

namespace gptc::rt::emu {

inline constexpr uint32_t kWarp = kWarpLanes;

enum class ThreadState : uint8_t {
  kRunnable,
  kBarrier,
  kShuffle,
  kMma,
  kLdmatrix,
  kWgmma,
  kDone,
  kAborted
};

// One access of a block, for Note [emulated memory counters].
struct AccessRecord {
  uint32_t warp, site, execution, kind;
  uintptr_t address;
  uint32_t bytes;
};

struct EmuThread {
  ThreadIdentity id;
  uint32_t lane = 0, warp = 0;
  ThreadState state = ThreadState::kRunnable;
  uint32_t site = 0;  // of the barrier, shuffle, mma, ldmatrix or wgmma it waits at
  // shfl.sync operands and result.
  uint32_t mode = 0, mask = 0, value = 0, b = 0, c = 0, result = 0;
  // mma, ldmatrix and wgmma: the op, the lane's fragments or row address,
  // and where its registers go (on its fiber's stack, which waits).
  uint32_t op = 0;
  const void* in = nullptr;
  void* out = nullptr;
  Fiber fiber;
  // Note [emulated memory counters]: how often it executed each access site
  // and each ldmatrix site, and its accesses in the block, in order.
  std::vector<uint32_t> executions, ldmatrix_executions;
  std::vector<AccessRecord> records;
  // Note [emulated instruction counters]: how often it started each block.
  std::vector<uint32_t> block_starts;
};

// A cell of kSharedCellBytes of shared memory (Note [emulated races]): the
// barrier epoch of the accesses it records (low 32 bits), the one thread
// that made them (+1; 0: none), whether one was a write, whether several
// threads read, and whether the cell was ever written. Two bytes: threads
// storing neighbouring bf16 elements of a tile do not race.
inline constexpr size_t kSharedCellBytes = 2;
struct SharedCell {
  uint32_t epoch;
  uint16_t thread;  // linear thread + 1
  uint8_t flags;
  uint8_t unused;
};
inline constexpr uint8_t kWritten = 1, kManyReaders = 2, kInitialized = 4;
static_assert(sizeof(SharedCell) == 8);

struct GridRunner::BlockContext {
  const Launch* launch = nullptr;
  Findings* findings = nullptr;
  std::unique_ptr<FiberStacks> stacks;
  std::vector<EmuThread> threads;
  EmuThread* current = nullptr;
  std::vector<char> shared;
  std::vector<SharedCell> shared_cells;
  uint32_t epoch = 0;
  bool fibers = false;
  FiberContext scheduler;
  std::jmp_buf escape;      // loop mode: where a failed check ends the thread
  LaunchCounters counters;  // Note [emulated memory counters]: this worker's, over the launch
  // Note [emulated instruction counters]: each block site's mix (the
  // kernel's constant), as its first start reported it.
  std::vector<const uint32_t*> block_mix;
  WarpgroupBlock warpgroups;  // Note [emulated wgmma asynchrony] in warpgroup.h
};

// The block the calling worker runs.
GridRunner::BlockContext& CurrentBlock();
// A defect in the running thread: recorded, and the thread ends.
[[noreturn]] void ThreadDefect(GridRunner::BlockContext& c, const std::string& what);
// "barrier", "wgmma", "exited", ...
const char* ThreadStateName(ThreadState s);

// Note [emulated memory counters] for one warp: its lanes' recorded accesses
// as requests and sectors (or wavefronts), then cleared.
void CountWarp(std::span<EmuThread> lanes, LaunchCounters& counters);

// Note [emulated instruction counters] for one warp: the busiest lane's
// starts of each block site times the site's mix, then cleared.
void CountWarpInstructions(std::span<EmuThread> lanes, std::span<const uint32_t* const> mix,
                           LaunchCounters& counters);

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_GRID_BLOCK_H_
