// The warpgroup instructions of the emulated device (compiler/program/
// emu_abi.h: EmuRuntime::wgmma, warpgroup, wgmma_read): wgmma.mma_async's
// rendezvous of a warpgroup, its shared-memory reads and their checks, and
// the asynchronous semantics of wgmma.fence, commit_group, wait_group and
// the accumulators (Note [wgmma registers] in compiler/codegen/wgmma_asm.h).
// The grid runner (grid_runner.h) calls these; the math is
// warpgroup_matrix.h's.
//
// Note [emulated wgmma asynchrony]
// The emulator computes a wgmma when its warpgroup's 128 threads have all
// reached it (.sync.aligned: a thread that exited, waits elsewhere or does
// not exist is a defect) and keeps D itself: each thread's accumulators come
// back as tokens (NaNs whose payload names the instruction's slot and the
// register), which only two things may take: a later wgmma's C (chaining,
// which the hardware orders: the emulator substitutes the values) and the
// register fence after a wait (Note [wgmma registers]), which gives back the
// values once the thread's wgmma.wait_group has retired the wgmma's group,
// and is a defect before. Every other instruction that takes a token is
// preceded by a check (the host lowering finds them: EmuRuntime::wgmma_read)
// that reports it, naming the wgmma and the thread. Per thread, wgmma
// instructions since the last commit_group form the next group;
// wait_group N retires all but the newest N; a wgmma without a wgmma.fence
// since the thread's last wait_group (or its start) is a defect; a thread
// that exits with wgmma in flight is one. The shared memory a wgmma reads
// is checked then (in bounds, written, by stores a barrier ago that their
// threads made visible to the async proxy with fence.proxy.async) and stays
// the wgmma's until every thread of its warpgroup has retired it: a store
// there before is a defect (an operand overwritten in flight).
//
// Internal to runtime/emu.
#ifndef GPTC_RUNTIME_EMU_WARPGROUP_H_
#define GPTC_RUNTIME_EMU_WARPGROUP_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "runtime/emu/grid_runner.h"

namespace gptc::rt::emu {

// A thread's wgmma state.
struct WarpgroupThread {
  bool fenced = false;  // a wgmma.fence since the last wait_group (or the start)
  uint32_t commits = 0;
  std::vector<uint32_t> uncommitted;          // wgmma slots since the last commit
  std::deque<std::vector<uint32_t>> pending;  // committed groups not yet retired
  uint8_t proxy_fences = 0;                   // fence.proxy.async executed (mod 256)
  // The wgmma's operand words (on the thread's fiber) and where D goes.
  const uint32_t* operands = nullptr;
  float* d = nullptr;
};

// One wgmma of a warpgroup, from its rendezvous until every thread retired it.
struct WgmmaSlot {
  bool live = false;  // some thread has not retired it
  uint32_t generation = 0;
  uint32_t op = 0, site = 0, base = 0;  // base: the warpgroup's first thread
  uint32_t retired = 0;                 // threads whose wait_group retired it
  std::vector<uint8_t> done;            // per thread of the warpgroup
  std::vector<float> d;                 // [thread][N / 2]
  std::vector<uint32_t> granules;       // 16-byte pieces of shared memory it reads
};

// A block's warpgroup state.
struct WarpgroupBlock {
  std::vector<WarpgroupThread> threads;
  std::vector<WgmmaSlot> slots;
  uint32_t next_slot = 0;
  uint32_t live = 0;
  std::vector<uint16_t> reading;  // per 16-byte piece of shared memory: live wgmma reading it
  // With checks: per 2 bytes of shared memory, the last store's thread + 1
  // (upper bits) and its proxy_fences then (low 8 bits); 0: none.
  std::vector<uint32_t> writers;
  // A new block: keeps the storage; `writers` only when `track_writers`
  // (a kernel with wgmma, checks on).
  void Reset(uint32_t threads, size_t shared_bytes, bool track_writers);
};

// The table's functions (emu_abi.h), on the calling thread.
void EmuWgmma(uint32_t op, const uint32_t* operands, float* d, uint32_t site);
void EmuWarpgroup(uint32_t kind, uint32_t arg, uint32_t* regs, uint32_t count, uint32_t site);
void EmuWgmmaRead(uint32_t bits, uint32_t site);

// Note [emulated synchronization]: the wgmma instructions whose whole
// warpgroup waits at them run. False when none does; a defect is added to
// the findings.
bool ResolveWarpgroups(GridRunner::BlockContext& c);

// A store of `bytes` at shared offset `offset` by the running thread: a
// defect when a wgmma in flight reads them; with checks, its writer is noted.
void WarpgroupSharedStore(GridRunner::BlockContext& c, size_t offset, uint32_t bytes);

// The running thread exits: a defect with wgmma in flight.
void WarpgroupThreadExit(GridRunner::BlockContext& c);

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_WARPGROUP_H_
