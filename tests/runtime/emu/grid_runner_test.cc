// The emulated device's grid runner (runtime/emu/grid_runner.h) with kernels
// written in C++ against the emulator ABI, as host-compiled kernels call it:
// special registers, shared memory, barriers, warp shuffles (PTX semantics),
// and the defects of Note [emulated synchronization] and [emulated races].
#include "runtime/emu/grid_runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "runtime/emu/emu_math.h"

namespace gptc::rt::emu {
namespace {

namespace abi = program::emu;

const abi::EmuRuntime& Rt() { return *GridRunner::Table(); }
uint32_t Tid() { return Rt().special_register(abi::kTidX); }
uint32_t Ctaid() { return Rt().special_register(abi::kCtaidX); }
uint32_t Ntid() { return Rt().special_register(abi::kNtidX); }
float* SharedF() { return static_cast<float*>(Rt().shared_memory()); }
// The checks a host kernel makes before an access (emu_abi.h).
void Load(const void* p, uint32_t space = abi::kSharedSpace) {
  Rt().access(p, 4, abi::kLoad | space, 0);
}
void Store(const void* p, uint32_t space = abi::kSharedSpace) {
  Rt().access(p, 4, abi::kStore | space, 1);
}

float ShuffleF(uint32_t mode, float v, uint32_t b, uint32_t c, uint32_t mask = 0xffffffff) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  uint32_t out = Rt().shuffle(mode, mask, bits, b, c, 0);
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

Launch MakeLaunch(KernelFunction f, std::vector<uint64_t> args, uint32_t grid, uint32_t block,
                  bool sync, uint32_t shared = 0) {
  return Launch{.kernel = "test",
                .function = f,
                .args = std::move(args),
                .grid = Dim3{grid, 1, 1},
                .block = Dim3{block, 1, 1},
                .static_shared = shared,
                .uses_sync = sync,
                .checks = true};
}

uint64_t Ptr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// out[i] = 2 * i over the grid: no barrier, the plain loop.
void Iota(const uint64_t* args) {
  auto* out = reinterpret_cast<float*>(args[0]);
  const uint32_t i = Ctaid() * Ntid() + Tid();
  out[i] = 2.0f * i;
}

TEST(GridRunnerTest, LoopKernelCoversTheGridOnEveryWorker) {
  GridRunner runner(2);
  std::vector<float> out(64 * 37, -1);
  ASSERT_TRUE(runner.Run(MakeLaunch(&Iota, {Ptr(out.data())}, 37, 64, false)).ok());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 2.0f * i) << i;
}

// Appends its block to a log (thread 0 of each block), and notes which host
// thread ran it.
void LogBlocks(const uint64_t* args) {
  auto* log = reinterpret_cast<std::vector<uint32_t>*>(args[0]);
  auto* hosts = reinterpret_cast<std::vector<std::thread::id>*>(args[1]);
  if (Tid() != 0) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  log->push_back(Ctaid());
  hosts->push_back(std::this_thread::get_id());
}

// Note [ordered atomics]: an ordered launch runs its blocks in block order on
// the caller's thread, however many workers the runner has.
TEST(GridRunnerTest, OrderedLaunchRunsBlocksInOrderOnTheCaller) {
  GridRunner runner(4);
  for (bool ordered : {false, true}) {
    std::vector<uint32_t> log;
    std::vector<std::thread::id> hosts;
    Launch launch = MakeLaunch(&LogBlocks, {Ptr(&log), Ptr(&hosts)}, 200, 32, false);
    launch.checks = false;
    launch.ordered = ordered;
    ASSERT_TRUE(runner.Run(launch).ok());
    ASSERT_EQ(log.size(), 200u);
    std::vector<uint32_t> sorted = log;
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t b = 0; b < 200; ++b) ASSERT_EQ(sorted[b], b);
    if (ordered) {
      EXPECT_TRUE(std::is_sorted(log.begin(), log.end()));
      for (const std::thread::id& id : hosts) ASSERT_EQ(id, std::this_thread::get_id());
    }
  }
}

// A shared-memory tree reduction of 128 values per block into out[block];
// kMissingBarrier leaves out the barrier between its steps.
template <bool kMissingBarrier>
void BlockSum(const uint64_t* args) {
  const auto* in = reinterpret_cast<const float*>(args[0]);
  auto* out = reinterpret_cast<float*>(args[1]);
  float* s = SharedF();
  const uint32_t t = Tid();
  Store(&s[t]);
  s[t] = in[Ctaid() * Ntid() + t];
  Rt().barrier(0);
  for (uint32_t stride = Ntid() / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      Load(&s[t + stride]);
      Load(&s[t]);
      Store(&s[t]);
      s[t] += s[t + stride];
    }
    if (!kMissingBarrier) Rt().barrier(1);
  }
  if (t == 0) {
    Load(&s[0]);
    out[Ctaid()] = s[0];
  }
}

TEST(GridRunnerTest, BarriersOrderSharedMemoryAcrossFibers) {
  GridRunner runner(2);
  std::vector<float> in(128 * 5);
  std::iota(in.begin(), in.end(), 0.0f);
  std::vector<float> out(5, 0);
  ASSERT_TRUE(runner
                  .Run(MakeLaunch(&BlockSum<false>, {Ptr(in.data()), Ptr(out.data())}, 5, 128, true,
                                  128 * 4))
                  .ok());
  for (int b = 0; b < 5; ++b) {
    EXPECT_EQ(out[b], std::accumulate(in.begin() + b * 128, in.begin() + (b + 1) * 128, 0.0f));
  }
}

TEST(GridRunnerTest, AMissingBarrierIsARaceOnSharedMemory) {
  GridRunner runner(1);
  std::vector<float> in(128, 1), out(1);
  Status s = runner.Run(
      MakeLaunch(&BlockSum<true>, {Ptr(in.data()), Ptr(out.data())}, 1, 128, true, 128 * 4));
  ASSERT_FALSE(s.ok());
  // Thread 0 runs every step first (reading s[1] in the last); thread 1 then
  // stores s[1] in the same epoch.
  EXPECT_NE(s.message().find("thread (1,0,0): store at shared offset 4 races with reads by "
                             "several threads (no barrier between)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("kernel test: block (0,0,0) thread"), std::string::npos)
      << s.message();
}

// A warp sum by butterfly shuffles: every lane ends with the total.
void WarpSum(const uint64_t* args) {
  const auto* in = reinterpret_cast<const float*>(args[0]);
  auto* out = reinterpret_cast<float*>(args[1]);
  const uint32_t i = Ctaid() * Ntid() + Tid();
  float v = in[i];
  for (uint32_t offset = 16; offset > 0; offset /= 2)
    v += ShuffleF(abi::kShuffleBfly, v, offset, 31);
  out[i] = v;
}

TEST(GridRunnerTest, ButterflyShufflesReduceAWarp) {
  GridRunner runner(2);
  std::vector<float> in(64 * 3), out(64 * 3);
  std::iota(in.begin(), in.end(), 1.0f);
  ASSERT_TRUE(
      runner.Run(MakeLaunch(&WarpSum, {Ptr(in.data()), Ptr(out.data())}, 3, 64, true)).ok());
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t w = i / 32 * 32;
    EXPECT_EQ(out[i], std::accumulate(in.begin() + w, in.begin() + w + 32, 0.0f)) << i;
  }
}

// out[lane] = shfl.MODE(lane, b, c) of every lane, as floats.
template <uint32_t kMode, uint32_t kB, uint32_t kC>
void ShuffleOf(const uint64_t* args) {
  auto* out = reinterpret_cast<float*>(args[0]);
  const uint32_t t = Tid();
  out[t] = ShuffleF(kMode, static_cast<float>(t), kB, kC);
}

std::vector<float> RunShuffle(KernelFunction f) {
  GridRunner runner(1);
  std::vector<float> out(32, -1);
  Status s = runner.Run(MakeLaunch(f, {Ptr(out.data())}, 1, 32, true));
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

TEST(GridRunnerTest, ShuffleModesFollowPtxClampAndSegments) {
  // __shfl_down_sync(v, 1): c = 0x1f; the last lane keeps its own value.
  std::vector<float> down = RunShuffle(&ShuffleOf<abi::kShuffleDown, 1, 0x1f>);
  for (int l = 0; l < 31; ++l) EXPECT_EQ(down[l], l + 1);
  EXPECT_EQ(down[31], 31);
  // __shfl_down_sync(v, 1, 16): c = (16 << 8) | 0x1f: segments of 16 lanes.
  std::vector<float> down16 = RunShuffle(&ShuffleOf<abi::kShuffleDown, 1, (16 << 8) | 0x1f>);
  EXPECT_EQ(down16[14], 15);
  EXPECT_EQ(down16[15], 15);
  EXPECT_EQ(down16[16], 17);
  EXPECT_EQ(down16[31], 31);
  // __shfl_up_sync(v, 2): c = 0; the first two lanes keep theirs.
  std::vector<float> up = RunShuffle(&ShuffleOf<abi::kShuffleUp, 2, 0>);
  EXPECT_EQ(up[0], 0);
  EXPECT_EQ(up[1], 1);
  EXPECT_EQ(up[2], 0);
  EXPECT_EQ(up[31], 29);
  // __shfl_sync(v, 5, 8): c = (24 << 8) | 0x1f: lane 5 of each segment of 8.
  std::vector<float> idx = RunShuffle(&ShuffleOf<abi::kShuffleIdx, 5, (24 << 8) | 0x1f>);
  EXPECT_EQ(idx[0], 5);
  EXPECT_EQ(idx[7], 5);
  EXPECT_EQ(idx[8], 13);
  EXPECT_EQ(idx[31], 29);
  // __shfl_xor_sync(v, 3).
  std::vector<float> bfly = RunShuffle(&ShuffleOf<abi::kShuffleBfly, 3, 0x1f>);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(bfly[l], l ^ 3);
}

// Lanes 0-15 return before a full-warp shuffle.
void ShuffleAfterExit(const uint64_t* args) {
  if (Tid() < 16) return;
  auto* out = reinterpret_cast<float*>(args[0]);
  out[Tid()] = ShuffleF(abi::kShuffleBfly, 1.0f, 1, 31);
}

TEST(GridRunnerTest, AShuffleWaitingForAnExitedLaneIsADefect) {
  GridRunner runner(1);
  std::vector<float> out(32);
  Status s = runner.Run(MakeLaunch(&ShuffleAfterExit, {Ptr(out.data())}, 1, 32, true));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("which has exited"), std::string::npos) << s.message();
}

// A shuffle whose mask names lanes beyond a 48-thread block's last warp.
void PartialWarpShuffle(const uint64_t* args) {
  auto* out = reinterpret_cast<float*>(args[0]);
  out[Tid()] = ShuffleF(abi::kShuffleBfly, 1.0f, 1, 31);
}

TEST(GridRunnerTest, AFullMaskInAPartialWarpIsADefect) {
  GridRunner runner(1);
  std::vector<float> out(48);
  Status s = runner.Run(MakeLaunch(&PartialWarpShuffle, {Ptr(out.data())}, 1, 48, true));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the block has 48 threads"), std::string::npos) << s.message();
}

// Even threads wait at barrier #0, odd ones at barrier #1.
void DivergentBarriers(const uint64_t*) { Rt().barrier(Tid() % 2); }

TEST(GridRunnerTest, BarriersAtDifferentSitesAreADefect) {
  GridRunner runner(1);
  Status s = runner.Run(MakeLaunch(&DivergentBarriers, {}, 1, 64, true));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("barrier divergence"), std::string::npos) << s.message();
}

// Warp 0 waits at a barrier while warp 1 waits at a shuffle: neither completes.
void BarrierAgainstShuffle(const uint64_t*) {
  if (Tid() < 32) {
    Rt().barrier(0);
  } else {
    ShuffleF(abi::kShuffleBfly, 1.0f, 1, 31, 0xffffffff);
    Rt().barrier(0);
  }
}

TEST(GridRunnerTest, ShufflesCompleteWhileOtherWarpsWaitAtABarrier) {
  GridRunner runner(1);
  // Warp 1 shuffles, then meets warp 0 at the barrier: fine.
  EXPECT_TRUE(runner.Run(MakeLaunch(&BarrierAgainstShuffle, {}, 1, 64, true)).ok());
}

// Lanes 32-62 shuffle with the whole warp while lane 63 waits at the barrier.
void HalfDeadlock(const uint64_t*) {
  if (Tid() >= 32 && Tid() < 63) {
    ShuffleF(abi::kShuffleBfly, 1.0f, 1, 31, 0xffffffff);
  } else {
    Rt().barrier(0);
  }
}

TEST(GridRunnerTest, ADeadlockNamesWhereEveryThreadWaits) {
  GridRunner runner(1);
  Status s = runner.Run(MakeLaunch(&HalfDeadlock, {}, 1, 64, true));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("deadlock: threads 0-31 wait at barrier #0"), std::string::npos)
      << s.message();
}

void SharedOutOfBounds(const uint64_t*) {
  float* s = SharedF();
  Store(&s[Tid() + 1]);
  s[Tid() + 1] = 1;
}

TEST(GridRunnerTest, SharedMemoryOutOfBoundsIsStoppedBeforeTheAccess) {
  GridRunner runner(1);
  Status s = runner.Run(MakeLaunch(&SharedOutOfBounds, {}, 1, 32, false, 32 * 4));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the block's 128 bytes of shared memory"), std::string::npos)
      << s.message();
}

// Threads store neighbouring 16-bit elements (a bf16 tile): the halves of
// one word, which is no race (Note [emulated races]).
void StoreHalves(const uint64_t*) {
  auto* s = static_cast<uint16_t*>(Rt().shared_memory());
  Rt().access(&s[Tid()], 2, abi::kStore | abi::kSharedSpace, 0);
  s[Tid()] = 1;
}

TEST(GridRunnerTest, NeighbouringHalvesOfAWordDoNotRace) {
  GridRunner runner(1);
  Status s = runner.Run(MakeLaunch(&StoreHalves, {}, 1, 32, false, 64));
  EXPECT_TRUE(s.ok()) << s.message();
}

void ReadUnwrittenShared(const uint64_t* args) {
  auto* out = reinterpret_cast<float*>(args[0]);
  Load(&SharedF()[Tid()]);
  out[Tid()] = SharedF()[Tid()];
}

TEST(GridRunnerTest, AReadOfUnwrittenSharedMemoryIsADefect) {
  GridRunner runner(1);
  std::vector<float> out(32);
  Status s = runner.Run(MakeLaunch(&ReadUnwrittenShared, {Ptr(out.data())}, 1, 32, false, 128));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no thread has written"), std::string::npos) << s.message();
}

TEST(GridRunnerTest, DirectedRoundingMatchesTheHostInThatMode) {
  const float a = 1.0f / 3.0f, b = 3.0f, c = -1.0f;  // a * b - 1 is a tiny non-zero
  const float down = DirectedMath(abi::kFmaRm, a, b, c);
  const float up = DirectedMath(abi::kFmaRp, a, b, c);
  EXPECT_LE(down, up);
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);  // restored
  EXPECT_LT(DirectedMath(abi::kDivRm, 1.0f, 3.0f, 0), DirectedMath(abi::kDivRp, 1.0f, 3.0f, 0));
  EXPECT_EQ(DirectedMath(abi::kDivRz, -1.0f, 3.0f, 0), -DirectedMath(abi::kDivRz, 1.0f, 3.0f, 0));
}

}  // namespace
}  // namespace gptc::rt::emu
