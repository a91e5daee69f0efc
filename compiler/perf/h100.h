// The H100 the model times kernels on: its multiprocessors, pipes,
// latencies and bandwidths (Note [H100 machine model]), and what one PTX
// instruction costs there.
//
// Note [H100 machine model]
// An H100 SXM: 132 multiprocessors at 1.755 GHz, each with four schedulers
// (sub-partitions) that issue one warp instruction a clock each. The figures
// are public ones, not fitted to our measurements:
//   - pipes (CUDA C++ Programming Guide, arithmetic throughput for compute
//     capability 9.0, per multiprocessor a clock; a warp instruction takes a
//     sub-partition 32 / (results / 4) clocks of its pipe): fp32 add, mul,
//     fma 128 (1 clock); integer and logic, compare, min/max 64 (2 clocks);
//     the special-function unit (ex2, lg2, rcp, rsqrt, sqrt, sin, cos) 16
//     (8 clocks; FlashAttention-3 quotes H100's exp at 3.9 TFLOP/s: the
//     same 16); other conversions 16 (8 clocks); warp shuffles 32, through
//     the multiprocessor's shared-memory path (one a clock);
//   - the shared-memory and L1 path: 128 bytes a clock a multiprocessor
//     (one wavefront; a global request's sectors four to a clock);
//   - latencies (Jia et al., "Dissecting the NVIDIA Volta/Turing GPU
//     architecture through microbenchmarking"; Luo et al., "Benchmarking and
//     dissecting the Nvidia Hopper GPU architecture", 2024): dependent fp32
//     and integer arithmetic 4 clocks; the special-function unit 18; shared
//     loads 30 and ldmatrix 32; shuffles 24; an L1 hit 35, an L2 hit 270, a
//     DRAM access 550; a barrier releases 20 clocks after its last warp;
//   - tensor cores: wgmma's 989 TFLOP/s dense bf16 is 512 multiply-adds a
//     clock a sub-partition; mma.sync m16n8k16 (2048 multiply-adds) holds a
//     sub-partition's tensor pipe 6 clocks: the rate at which ncu's "tensor
//     pipe busy" of the attention kernels the H100 measured matches their
//     mma counts and times (docs/PERFORMANCE.md), and the two-thirds of
//     wgmma's rate that mma.sync is known to reach on Hopper; its result is
//     ready 33 clocks after it starts;
//   - memory: DRAM 3.0 TB/s (what copies reach of the 3.35 TB/s peak, as
//     Note [H100 time estimate] in runtime/emu/kernel_estimate.h), L2 twice
//     that, each busy multiprocessor served an equal share, at most the 64
//     bytes a clock of its own port to L2;
//   - occupancy: 64K registers, 228 KiB of shared memory (1 KiB reserved a
//     block), 64 warps and 32 blocks a multiprocessor (BlocksPerSm in
//     compiler/support/ptx_stats.h); L1 is what shared memory leaves of 256
//     KiB.
// PTX is not SASS: ptxas folds moves, parameter loads and 64-bit zero
// extensions away (they cost nothing here), splits 64-bit integer
// arithmetic in two (two issue slots), and expands an IEEE division or
// square root into about eight instructions.
#ifndef GPTC_COMPILER_PERF_H100_H_
#define GPTC_COMPILER_PERF_H100_H_

#include <cstdint>

#include "compiler/perf/ptx_program.h"

namespace gptc::perf {

struct MachineModel {
  int sms = 132;
  double clock_mhz = 1755;
  int sub_partitions = 4;
  // Clocks (Note [H100 machine model]).
  int alu_latency = 4, mufu_latency = 18, shared_latency = 30, ldmatrix_latency = 32;
  int shuffle_latency = 24, l1_latency = 35, l2_latency = 270, dram_latency = 550;
  int barrier_latency = 20, special_register_latency = 20, division_latency = 40;
  int mma_latency = 33;
  // Tensor-pipe clocks of a sub-partition per 2048 multiply-adds (one
  // m16n8k16): mma.sync, and wgmma.
  double mma_clocks = 6, wgmma_clocks = 4;
  // Bytes a clock, the whole GPU.
  double dram_bytes_per_clock = 3.0e12 / 1.755e9;
  double l2_bytes_per_clock = 6.0e12 / 1.755e9;
  double sm_port_bytes_per_clock = 64;  // what one multiprocessor can draw from L2
  int l1_bytes = 256 * 1024;
  // The gap an eager launch leaves between kernels (as kLaunchUs of Note
  // [H100 time estimate]).
  double launch_us = 2.0;
};

// The H100 SXM of Note [H100 machine model].
const MachineModel& H100();

// The units a warp instruction occupies: its sub-partition's pipes, or the
// multiprocessor's shared-memory path (kMio: shared memory, L1, shuffles).
enum class Pipe : uint8_t { kNone, kFma, kAlu, kMufu, kConvert, kTensor, kMio };
inline constexpr int kNumPipes = 7;

// Why a warp waited for an instruction's result (ncu's stall reasons).
enum class Wait : uint8_t { kNone, kFixed, kShort, kLong, kTensor };

struct InstTiming {
  Pipe pipe = Pipe::kNone;
  uint8_t issue = 1;         // issue slots (SASS instructions)
  uint16_t pipe_clocks = 0;  // clocks the pipe is held (kMio: computed per request)
  uint16_t latency = 0;      // clocks until its results are ready (memory: per request)
  Wait wait = Wait::kNone;   // what its readers wait on
};

InstTiming TimingOf(const PtxInst& inst, const MachineModel& machine);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_H100_H_
