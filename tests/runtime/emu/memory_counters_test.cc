// Note [emulated memory counters] (runtime/emu/grid_runner.h): hand-written
// kernels whose requests, sectors and shared-memory wavefronts are known.
#include <gtest/gtest.h>

#include <vector>

#include "compiler/program/emu_abi.h"
#include "runtime/emu/emu_device.h"
#include "runtime/emu/grid_runner.h"

namespace gptc::rt::emu {
namespace {

namespace abi = program::emu;

const abi::EmuRuntime& Rt() { return *GridRunner::Table(); }
uint32_t Tid() { return Rt().special_register(abi::kTidX); }
char* Shared() { return static_cast<char*>(Rt().shared_memory()); }

// args[0]: the global buffer; args[1]: the element stride in floats (for the
// global kernels) or in 4-byte words (shared); args[2]: bytes an access.
void GlobalCopy(const uint64_t* args) {
  auto* base = reinterpret_cast<char*>(args[0]);
  const uint32_t bytes = static_cast<uint32_t>(args[2]);
  char* p = base + uint64_t{Tid()} * args[1] * 4;
  Rt().access(p, bytes, abi::kLoad | abi::kGlobalSpace, 0);
  Rt().access(p, bytes, abi::kStore | abi::kGlobalSpace, 1);
}

void SharedStrided(const uint64_t* args) {
  const uint32_t bytes = static_cast<uint32_t>(args[2]);
  char* p = Shared() + uint64_t{Tid()} * args[1] * 4;
  Rt().access(p, bytes, abi::kStore | abi::kSharedSpace, 0);
  Rt().barrier(0);
  Rt().access(p, bytes, abi::kLoad | abi::kSharedSpace, 1);
}

// Every lane reads the first word: a broadcast.
void SharedBroadcast(const uint64_t*) {
  if (Tid() == 0) Rt().access(Shared(), 4, abi::kStore | abi::kSharedSpace, 0);
  Rt().barrier(0);
  Rt().access(Shared(), 4, abi::kLoad | abi::kSharedSpace, 1);
}

// Odd lanes load twice as often as even ones, from consecutive floats.
void Divergent(const uint64_t* args) {
  auto* base = reinterpret_cast<char*>(args[0]);
  const int times = Tid() % 2 == 0 ? 1 : 2;
  for (int i = 0; i < times; ++i) {
    Rt().access(base + 4 * Tid(), 4, abi::kLoad | abi::kGlobalSpace, 0);
  }
}

// Lane 0 first loads alone (its lanes diverge from the start), then every
// lane loads a word and the warp an ldmatrix.x1, both site 0: two
// instructions the counting must keep apart.
void LoadThenLdmatrix(const uint64_t*) {
  char* s = Shared();
  Rt().access(s + 16 * Tid(), 16, abi::kStore | abi::kSharedSpace, 1);
  Rt().barrier(0);
  if (Tid() == 0) Rt().access(s, 4, abi::kLoad | abi::kSharedSpace, 5);
  Rt().access(s + 4 * Tid(), 4, abi::kLoad | abi::kSharedSpace, 0);
  uint32_t reg;
  Rt().ldmatrix(1, s + 16 * (Tid() % 8), &reg, 0);
}

LaunchCounters Count(KernelFunction f, uint32_t threads, std::vector<uint64_t> args, bool sync,
                     uint32_t shared = 0) {
  GridRunner runner(1);
  LaunchCounters counters;
  Launch l{.kernel = "counted",
           .function = f,
           .args = std::move(args),
           .grid = Dim3{2, 1, 1},
           .block = Dim3{threads, 1, 1},
           .static_shared = shared,
           .uses_sync = sync,
           .checks = false,
           .counters = &counters};
  Status s = runner.Run(l);
  EXPECT_TRUE(s.ok()) << s.message();
  return counters;
}

uint64_t Ptr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Sector-aligned floats, as a device allocation is.
struct Buffer {
  explicit Buffer(size_t n) : storage(n + 64) {}
  float* data() {
    const uintptr_t p = reinterpret_cast<uintptr_t>(storage.data());
    return reinterpret_cast<float*>((p + 255) / 256 * 256);
  }
  std::vector<float> storage;
};

TEST(LaunchCountersTest, ACoalescedF32CopyIsFourSectorsARequest) {
  Buffer buffer(64 * 32 + 64);
  const LaunchCounters m = Count(&GlobalCopy, 64, {Ptr(buffer.data()), 1, 4}, false);
  // Two blocks of two warps: four loads and four stores of 128 bytes.
  EXPECT_EQ(m.global_load_requests, 4u);
  EXPECT_EQ(m.global_load_sectors, 16u);
  EXPECT_EQ(m.global_load_bytes, 4u * 128);
  EXPECT_EQ(m.global_store_requests, 4u);
  EXPECT_EQ(m.global_store_sectors, 16u);
}

TEST(LaunchCountersTest, AStrideOf32FloatsIsASectorALane) {
  Buffer buffer(64 * 32 + 64);
  const LaunchCounters m = Count(&GlobalCopy, 64, {Ptr(buffer.data()), 32, 4}, false);
  EXPECT_EQ(m.global_load_requests, 4u);
  EXPECT_EQ(m.global_load_sectors, 4u * 32);
}

TEST(LaunchCountersTest, SixteenByteAccessesAreSixteenSectorsARequest) {
  Buffer buffer(64 * 4 + 64);
  const LaunchCounters m = Count(&GlobalCopy, 64, {Ptr(buffer.data()), 4, 16}, false);
  EXPECT_EQ(m.global_load_requests, 4u);
  EXPECT_EQ(m.global_load_sectors, 4u * 16);
}

TEST(LaunchCountersTest, SharedBankConflicts) {
  // Consecutive words: one wavefront. Every other word: two lanes a bank.
  // A stride of 32 words: all 32 lanes on bank 0.
  for (auto [stride, wavefronts] : {std::pair{1u, 1u}, std::pair{2u, 2u}, std::pair{32u, 32u}}) {
    const LaunchCounters m = Count(&SharedStrided, 32, {0, stride, 4}, true, 32 * 32 * 4);
    EXPECT_EQ(m.shared_load_requests, 2u) << "stride " << stride;
    EXPECT_EQ(m.shared_load_wavefronts, 2u * wavefronts) << "stride " << stride;
    EXPECT_EQ(m.shared_store_wavefronts, 2u * wavefronts) << "stride " << stride;
  }
  // 16 bytes a lane, consecutive: 512 bytes, four wavefronts, no conflict.
  const LaunchCounters v4 = Count(&SharedStrided, 32, {0, 4, 16}, true, 32 * 16);
  EXPECT_EQ(v4.shared_load_wavefronts, 2u * 4);
}

TEST(LaunchCountersTest, ABroadcastIsNoConflict) {
  const LaunchCounters m = Count(&SharedBroadcast, 32, {}, true, 128);
  EXPECT_EQ(m.shared_load_requests, 2u);
  EXPECT_EQ(m.shared_load_wavefronts, 2u);
  EXPECT_EQ(m.shared_store_requests, 2u);  // lane 0 alone
}

TEST(LaunchCountersTest, DivergentLanesPairByExecution) {
  // The first execution: all 32 lanes, 4 sectors; the second: the 16 odd
  // lanes, still 4 sectors (every other float of the same 128 bytes).
  Buffer buffer(32);
  const LaunchCounters m = Count(&Divergent, 32, {Ptr(buffer.data())}, false);
  EXPECT_EQ(m.global_load_requests, 2u * 2);
  EXPECT_EQ(m.global_load_sectors, 2u * 8);
  EXPECT_EQ(m.global_load_bytes, 2u * (32 + 16) * 4);
}

TEST(LaunchCountersTest, AnLdmatrixIsNotTheAccessOfTheSameSiteNumber) {
  const LaunchCounters m = Count(&LoadThenLdmatrix, 32, {}, true, 32 * 16);
  // Per block: lane 0's load, the lanes' word loads, the ldmatrix (8 rows
  // of 16 bytes: one wavefront).
  EXPECT_EQ(m.shared_load_requests, 2u * 3);
  EXPECT_EQ(m.shared_load_wavefronts, 2u * 3);
}

TEST(LaunchCountersTest, OccupancyFollowsThreadsRegistersAndSharedMemory) {
  auto blocks = [](int64_t threads, int64_t registers, int64_t shared) {
    return KernelCounters{.registers = registers, .threads = threads, .shared_bytes = shared}
        .BlocksPerSm();
  };
  EXPECT_EQ(blocks(256, 32, 0), 8);         // 2048 threads
  EXPECT_EQ(blocks(32, 16, 0), 32);         // the 32-block limit
  EXPECT_EQ(blocks(128, 255, 0), 2);        // 8192 registers a warp
  EXPECT_EQ(blocks(128, 0, 100 << 10), 2);  // 101 KiB a block of 228
  EXPECT_EQ(blocks(64, 168, 48 << 10), 4);  // shared memory first
  EXPECT_EQ(blocks(0, 0, 0), 0);
}

}  // namespace
}  // namespace gptc::rt::emu
