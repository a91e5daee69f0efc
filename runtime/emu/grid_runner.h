// Runs one kernel launch of the emulated device: every block of the grid on
// the host's cores, every thread of a block as a fiber (fiber.h) when the
// kernel has barriers or warp-collective instructions, else as a plain loop;
// and answers the kernel's calls into the emulator
// (compiler/program/emu_abi.h): special registers, barriers, shuffles, warp
// matrix instructions (warp_matrix.h), shared memory, memory checks.
//
// Note [emulated synchronization]
// A block's fibers run one at a time, each until it waits. When none can
// run, a warp whose every lane in the member mask waits at the same
// shfl.sync exchanges values (PTX's shfl semantics, clamp and segment mask
// included) and its lanes run on; a warp whose 32 lanes all wait at the
// same mma or ldmatrix gets its registers (Note [emulated warp matrix
// operations] in warp_matrix.h) and runs on; else, when every live thread
// waits at the same barrier, the block passes it (the barrier epoch
// advances); anything else is a defect reported with every waiting thread's
// place: a barrier reached by some threads while others wait at another
// barrier or have exited inside a shuffle's mask, a shuffle whose mask names
// an exited or absent lane, a lane reading a lane outside the mask, an mma or
// ldmatrix (.aligned) that some lanes of the warp never reach (they exited,
// wait at another one, or do not exist in a partial warp).
//
// Note [emulated races]
// With checks, every 2 bytes of shared memory (one bf16 element) have a cell
// recording who touched them since the last barrier (one thread, or several
// readers) and whether they were written; a second thread touching them
// between the same two barriers, one of them writing, is a race. Global
// memory is checked the same way across the whole grid by the
// GlobalAccessChecker, with the block in the cell: blocks are never ordered.
// Atomics take part in neither.
#ifndef GPTC_RUNTIME_EMU_GRID_RUNNER_H_
#define GPTC_RUNTIME_EMU_GRID_RUNNER_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compiler/program/emu_abi.h"
#include "compiler/support/status.h"

namespace gptc::rt::emu {

using KernelFunction = void (*)(const uint64_t* args);

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t{x} * y * z; }
};

// Who makes an access.
struct ThreadIdentity {
  uint64_t block = 0;   // linear block index in the grid
  uint32_t thread = 0;  // linear thread index in the block
  uint32_t epoch = 0;   // barriers the block has passed
  uint32_t ctaid[3] = {0, 0, 0};
  uint32_t tid[3] = {0, 0, 0};
  // "block (3,0,0) thread (17,0,0)".
  std::string Describe() const;
};

// The first defect of a launch; safe to add from every worker.
class Findings {
 public:
  // Keeps `message` when it is the first; returns false (for `return
  // findings.Add(...)` in checks that fail).
  bool Add(std::string message);
  bool any() const { return any_.load(std::memory_order_acquire); }
  std::string first() const;

 private:
  std::atomic<bool> any_{false};
  mutable std::mutex mu_;
  std::string first_;
};

// Checks of global (and generic, non-shared) memory accesses of one launch
// (memory_checker.h). Called from every worker thread.
class GlobalAccessChecker {
 public:
  virtual ~GlobalAccessChecker() = default;
  // False when the access is a defect (added to `findings`); the thread then
  // stops before it happens.
  virtual bool Access(const void* address, uint32_t bytes, uint32_t kind, const ThreadIdentity& who,
                      Findings& findings) = 0;
};

// Note [emulated memory counters]
// What ncu's memory tables would say of a launch, from the accesses the
// emulator executes (gptrun --device emu --profile). Each instrumented access
// names its site (emu_abi.h); the k-th execution of a site by each lane of a
// warp is one warp-level instruction, as on a GPU whose warp runs the site in
// lockstep (divergent branches, where lanes execute a site different numbers
// of times, pair lanes by count: an approximation). For each such
// instruction:
//   global (and generic non-shared) memory: one request, and the distinct
//     32-byte sectors its lanes touch (a coalesced 4-byte access by 32 lanes:
//     4 sectors; a stride of 128 bytes: 32);
//   shared memory: one request, and its wavefronts: the most distinct 4-byte
//     words any of the 32 banks must serve, at least the distinct bytes / 128
//     (one wavefront serves 128 bytes; the same word read by several lanes is
//     a broadcast, no conflict); ldmatrix's rows count as one 16-byte access
//     per lane.
// Accesses come from the LLVM IR the NVPTX backend receives, after the
// load/store vectorizer it runs (Note [host kernels]): a 32-byte vector
// access, which instruction selection splits into two 16-byte ones, is one
// request of up to 32 sectors here.
//
// Note [emulated instruction counters]
// The instructions a warp executes, by class (emu_abi.h's InstructionClass),
// from the same device LLVM IR: the host lowering counts each basic block's
// instructions by class (ClassOf in compiler/codegen/host_lowering.cc: one
// per LLVM instruction that selects a machine instruction, a vector one per
// element unless it is a memory access; phis, casts between pointer and
// integer, vector element moves and constant-index address arithmetic count
// nothing) and the block reports itself as it starts (EmuRuntime::block). A
// warp executes a block as often as the lane that executed it most, so
// divergent lanes cost the warp both sides. These are LLVM instructions,
// not SASS: ptxas adds address arithmetic and removes moves, so read the
// counts as a mix and a ratio between kernels, not as ncu's figures.
struct LaunchCounters {
  uint64_t global_load_requests = 0, global_load_sectors = 0, global_load_bytes = 0;
  uint64_t global_store_requests = 0, global_store_sectors = 0, global_store_bytes = 0;
  uint64_t shared_load_requests = 0, shared_load_wavefronts = 0;
  uint64_t shared_store_requests = 0, shared_store_wavefronts = 0;
  // Warp-level instructions by class (Note [emulated instruction counters]).
  std::array<uint64_t, program::emu::kNumInstructionClasses> instructions{};
  uint64_t Instructions() const;  // all classes
  // The bytes of the global sectors loaded and stored.
  uint64_t SectorBytes() const { return 32 * (global_load_sectors + global_store_sectors); }
  void Add(const LaunchCounters& o);
  bool operator==(const LaunchCounters&) const = default;
};

struct Launch {
  std::string kernel;  // for messages
  KernelFunction function = nullptr;
  std::vector<uint64_t> args;  // device pointers, Note [kernel ABI]
  Dim3 grid, block;
  uint32_t static_shared = 0;  // the host layout's static shared memory
  uint32_t dynamic_shared = 0;
  bool uses_sync = false;  // run the block's threads as fibers
  // Note [ordered atomics]: a kernel with global atomics (the embedding
  // gradient's scatter-add) runs its blocks one after another, in block
  // order, on the caller's thread. Its float sums then come out the same on
  // every run and every host, as a train step replayed from a graph must
  // match the eager one bit for bit; with the blocks spread over workers the
  // order of the adds followed the host's thread schedule, and Adam turned
  // the last-bit differences of near-zero gradients into lr-sized updates.
  bool ordered = false;
  // The kernel has wgmma: the block keeps the state of Note [emulated wgmma
  // asynchrony] (warpgroup.h), the writers of its shared memory included.
  bool warpgroups = false;
  bool checks = false;
  GlobalAccessChecker* global = nullptr;  // with checks; null: no global checks
  // Note [emulated memory counters]: added to when not null (the kernel
  // library's checks flag must be set for accesses to be seen).
  LaunchCounters* counters = nullptr;
};

class GridRunner {
 public:
  // `workers` host threads run blocks (0: one per hardware thread).
  explicit GridRunner(int workers = 0);
  ~GridRunner();
  GridRunner(const GridRunner&) = delete;
  GridRunner& operator=(const GridRunner&) = delete;

  // Runs every block; the first defect as an error naming the kernel, the
  // block and thread, and what was wrong.
  Status Run(const Launch& launch);

  int workers() const { return static_cast<int>(contexts_.size()); }

  // The table every kernel calls (emu_abi.h); the same for every runner.
  static const program::emu::EmuRuntime* Table();

  struct BlockContext;

 private:
  void Work(int worker);
  void RunBlocks(BlockContext& context);

  std::vector<std::unique_ptr<BlockContext>> contexts_;  // one per worker; [0] is the caller's
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const Launch* launch_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::atomic<uint64_t> next_block_{0};
  Findings* findings_ = nullptr;
};

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_GRID_RUNNER_H_
