// The contract between a kernel compiled for the emulated device (gptc
// compile --emu: compiler/codegen/host_lowering.h) and the emulator that runs
// it (runtime/emu/). Both sides include this header; it has no dependency,
// so the runtime includes it as it includes kernel_spec.h.
//
// A host kernel is the LLVM module the NVPTX backend receives, compiled for
// x86-64 with only the GPU-specific parts replaced (Note [host kernels] in
// host_lowering.h): special registers, barriers, warp shuffles, warp matrix
// instructions (mma, ldmatrix), warpgroup instructions (wgmma and its fences,
// groups and waits), shared memory and directed-rounding math become calls
// through the table below, and every global and shared memory
// access is preceded by a call to `access` while the library's checks flag
// is set.
//
// The emulator library (one shared object per artifact, the `emu` section)
// defines:
//   kRuntimeSymbol   EmuRuntime* — null until the loader sets it
//   kChecksSymbol    uint8_t — 1: instrumented accesses call `access`
//   kAbiSymbol       uint32_t — kKernelAbiVersion of the compiler that built it
//   one function per kernel, `void SYMBOL(const uint64_t* args)`: args[i] is
//   the device pointer of kernel parameter i (Note [kernel ABI] in
//   compiler/codegen/kernel_spec.h). It runs one thread: the caller sets the
//   thread's identity first (EmuRuntime::special_register answers from it).
#ifndef GPTC_COMPILER_PROGRAM_EMU_ABI_H_
#define GPTC_COMPILER_PROGRAM_EMU_ABI_H_

#include <cstdint>

namespace gptc::program::emu {

// 2: EmuRuntime::mma and ldmatrix. 3: `access` names its site. 4:
// EmuRuntime::block. 5: EmuRuntime::wgmma, warpgroup and wgmma_read.
inline constexpr uint32_t kKernelAbiVersion = 5;

inline constexpr char kRuntimeSymbol[] = "gptc_emu_runtime";
inline constexpr char kChecksSymbol[] = "gptc_emu_checks";
inline constexpr char kAbiSymbol[] = "gptc_emu_abi_version";
// The symbol of kernel `name` of entry `entry`: kKernelSymbolPrefix + entry +
// "__" + name (both are identifiers).
inline constexpr char kKernelSymbolPrefix[] = "gptc_emu_kernel__";

// PTX special registers, as EmuRuntime::special_register's argument.
enum SpecialRegister : uint32_t {
  kTidX = 0,
  kTidY,
  kTidZ,
  kNtidX,
  kNtidY,
  kNtidZ,
  kCtaidX,
  kCtaidY,
  kCtaidZ,
  kNctaidX,
  kNctaidY,
  kNctaidZ,
  kLaneId,
  kNumSpecialRegisters,
};

// shfl.sync modes (PTX ISA, "shfl.sync"), as EmuRuntime::shuffle's `mode`.
enum ShuffleMode : uint32_t { kShuffleUp = 0, kShuffleDown, kShuffleBfly, kShuffleIdx };

// EmuRuntime::access's `kind`: the access (bits 0-3) and the address space
// (bits 4-7) of the instruction.
enum AccessKind : uint32_t {
  kLoad = 1,
  kStore = 2,
  kAtomic = 4,  // an atomicrmw or cmpxchg: kLoad | kStore | kAtomic
  kGlobalSpace = 0 << 4,
  kSharedSpace = 1 << 4,
  kGenericSpace = 2 << 4,  // a generic pointer that is not a local variable
};
inline constexpr uint32_t kAccessMask = 0xf;
inline constexpr uint32_t kSpaceMask = 0xf0;

// Math whose result depends on a rounding mode the host does not use by
// default, as EmuRuntime::math's `op` (PTX .rm / .rp / .rz; .rn is inlined).
enum MathOp : uint32_t {
  kFmaRm = 0,
  kFmaRp,
  kFmaRz,
  kAddRm,
  kAddRp,
  kAddRz,
  kMulRm,
  kMulRp,
  kMulRz,
  kDivRm,
  kDivRp,
  kDivRz,
  kSqrtRm,
  kSqrtRp,
  kSqrtRz,  // of a
  kNumMathOps,
};

// Warp-level matrix multiply-accumulates (PTX ISA, "mma"), as EmuRuntime::mma's
// `op`: D (16x8, f32) = A (16x16, row) * B (16x8, col) + C (16x8, f32).
enum MmaOp : uint32_t {
  kMmaM16N8K16Bf16 = 0,  // mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
  kMmaM16N8K16F16,       // mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
  kNumMmaOps,
};
// EmuRuntime::mma's `fragments`: the lane's registers in PTX operand order,
// A (4 x b32, two 16-bit elements each, the lower first), B (2 x b32), then
// C (4 x f32 as its bits); `out` receives D (4 x f32).
inline constexpr uint32_t kMmaARegs = 4, kMmaBRegs = 2, kMmaCRegs = 4;
inline constexpr uint32_t kMmaFragmentRegs = kMmaARegs + kMmaBRegs + kMmaCRegs;

// ldmatrix.sync.aligned.m8n8.NUM[.trans].shared.b16 (PTX ISA, "ldmatrix"), as
// EmuRuntime::ldmatrix's `op`: the number of 8x8 matrices (1, 2 or 4), plus
// kLdmatrixTrans for .trans.
inline constexpr uint32_t kLdmatrixTrans = 0x10;
inline constexpr uint32_t kLdmatrixCountMask = 0xf;

// Warpgroup matrix multiply-accumulates (PTX ISA, "wgmma.mma_async"), as
// EmuRuntime::wgmma's `op`: D (64 x N, f32) = A (64 x 16) * B (16 x N) + C,
// A from registers (kWgmmaRegisterA, the RS form) or shared memory, B from
// shared memory, each through a matrix descriptor (Note [emulated warpgroup
// matrix operations] in runtime/emu/warpgroup_matrix.h).
inline constexpr uint32_t kWgmmaNMask = 0x1ff;  // N: a multiple of 8, 8 to 256
inline constexpr uint32_t kWgmmaRegisterA = 1u << 9;
inline constexpr uint32_t kWgmmaF16 = 1u << 10;     // .f16.f16 multiplicands, else .bf16.bf16
inline constexpr uint32_t kWgmmaTransA = 1u << 11;  // imm-trans-a = 1 (shared A only)
inline constexpr uint32_t kWgmmaTransB = 1u << 12;  // imm-trans-b = 1
inline constexpr uint32_t kWgmmaNegA = 1u << 13;    // imm-scale-a = -1
inline constexpr uint32_t kWgmmaNegB = 1u << 14;    // imm-scale-b = -1
inline constexpr uint32_t kWgmmaOpMask = (1u << 15) - 1;
// EmuRuntime::wgmma's `operands`, 32-bit words in order: A (4 registers of
// two 16-bit elements, the lower first) or A's descriptor (2 words, the low
// one first), B's descriptor (2), scale-d (nonzero: D = A * B + C, zero: D =
// A * B), then C (N / 2 f32 as their bits). `d` receives N / 2 f32.
inline constexpr uint32_t kWgmmaARegs = 4;
inline constexpr uint32_t kWgmmaMaxOperands = kWgmmaARegs + 2 + 1 + 128;
inline uint32_t WgmmaAccumulators(uint32_t op) { return (op & kWgmmaNMask) / 2; }

// EmuRuntime::warpgroup's `kind`.
enum WarpgroupKind : uint32_t {
  kWgmmaFence = 0,      // wgmma.fence.sync.aligned
  kWgmmaCommit,         // wgmma.commit_group.sync.aligned
  kWgmmaWait,           // wgmma.wait_group.sync.aligned `arg`
  kWgmmaRegisterFence,  // registers out of wgmma, after the wait (Note [wgmma registers])
  kFenceProxyAsync,     // fence.proxy.async.shared::cta
  kNumWarpgroupKinds,
};

// The classes of EmuRuntime::block's instruction mix (Note [emulated
// instruction counters] in runtime/emu/grid_runner.h).
enum InstructionClass : uint32_t {
  kGlobalMemoryClass = 0,  // loads, stores and atomics of global or generic memory
  kSharedMemoryClass,      // of shared memory, and ldmatrix
  kMmaClass,
  kFloatClass,    // floating-point arithmetic, comparisons and conversions
  kIntegerClass,  // integer and bit arithmetic, address arithmetic, special registers
  kControlClass,  // branches and returns
  kBarrierClass,
  kShuffleClass,
  kNumInstructionClasses,
};

// Every function is called on the emulated thread (a fiber of its block, or
// the block's loop when the kernel has no barrier and no shuffle).
struct EmuRuntime {
  uint32_t abi_version;
  uint32_t (*special_register)(uint32_t which);
  // bar.sync 0 (__syncthreads); `site` numbers the barriers of the kernel.
  void (*barrier)(uint32_t site);
  // shfl.sync.MODE.b32 d, value, b, c, member_mask; returns d (the 32 bits).
  uint32_t (*shuffle)(uint32_t mode, uint32_t member_mask, uint32_t value, uint32_t b, uint32_t c,
                      uint32_t site);
  // Before every instrumented load, store or atomic of `bytes` at `address`;
  // `site` numbers the kernel's instrumented accesses, so that the lanes of
  // a warp executing one instruction can be told apart from another's
  // (Note [emulated memory counters] in runtime/emu/grid_runner.h).
  void (*access)(const void* address, uint32_t bytes, uint32_t kind, uint32_t site);
  // The block's shared memory: the kernel's static variables at the offsets
  // the host lowering chose, then the dynamic shared memory.
  void* (*shared_memory)();
  float (*math)(uint32_t op, float a, float b, float c);
  // mma.sync.aligned: waits, like a shuffle, for all 32 lanes of the warp at
  // the same `site`, then writes each lane's D (Note [emulated warp matrix
  // operations] in runtime/emu/warp_matrix.h).
  void (*mma)(uint32_t op, const uint32_t* fragments, float* out, uint32_t site);
  // ldmatrix.sync.aligned: `row` is the lane's row address (in shared
  // memory); waits for all 32 lanes at `site`, then writes the lane's one
  // b32 register per matrix to `out`.
  void (*ldmatrix)(uint32_t op, const void* row, uint32_t* out, uint32_t site);
  // A basic block of the device code starts, while the checks flag is set:
  // `site` numbers the kernel's blocks, `mix` (kNumInstructionClasses
  // counts, constant) says what it executes.
  void (*block)(uint32_t site, const uint32_t* mix);
  // wgmma.mma_async.sync.aligned: waits for all 128 threads of the thread's
  // warpgroup at the same `site`, then computes D and writes the thread's
  // accumulators to `d` as the emulator's tokens of them (Note [wgmma
  // registers] in runtime/emu/warpgroup.h).
  void (*wgmma)(uint32_t op, const uint32_t* operands, float* d, uint32_t site);
  // The other warpgroup instructions, by `kind`; kWgmmaRegisterFence passes
  // `count` registers (f32 bits) in `regs` and gets them back.
  void (*warpgroup)(uint32_t kind, uint32_t arg, uint32_t* regs, uint32_t count, uint32_t site);
  // Before an instruction that reads a register a wgmma wrote other than
  // through kWgmmaRegisterFence or as another wgmma's C: `bits` is its value.
  void (*wgmma_read)(uint32_t bits, uint32_t site);
};

}  // namespace gptc::program::emu

#endif  // GPTC_COMPILER_PROGRAM_EMU_ABI_H_
