// The contract between a kernel compiled for the emulated device (gptc
// compile --emu: compiler/codegen/host_lowering.h) and the emulator that runs
// it (runtime/emu/). Both sides include this header; it has no dependency,
// so the runtime includes it as it includes kernel_spec.h.
//
// A host kernel is the LLVM module the NVPTX backend receives, compiled for
// x86-64 with only the GPU-specific parts replaced (Note [host kernels] in
// host_lowering.h): special registers, barriers, warp shuffles, shared
// memory and directed-rounding math become calls through the table below,
// and every global and shared memory access is preceded by a call to
// `access` while the library's checks flag is set.
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
#ifndef GPTC_COMPILER_CODEGEN_EMU_ABI_H_
#define GPTC_COMPILER_CODEGEN_EMU_ABI_H_

#include <cstdint>

namespace gptc::codegen::emu {

inline constexpr uint32_t kKernelAbiVersion = 1;

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
  // Before every instrumented load, store or atomic of `bytes` at `address`.
  void (*access)(const void* address, uint32_t bytes, uint32_t kind);
  // The block's shared memory: the kernel's static variables at the offsets
  // the host lowering chose, then the dynamic shared memory.
  void* (*shared_memory)();
  float (*math)(uint32_t op, float a, float b, float c);
};

}  // namespace gptc::codegen::emu

#endif  // GPTC_COMPILER_CODEGEN_EMU_ABI_H_
