// Kernels for the emulated device: the LLVM module the NVPTX backend
// receives, compiled for the host instead (gptc compile --emu).
//
// Note [host kernels]
// The emulator must run the code the GPU runs, not a re-derivation of it, so
// the host kernel starts from the very module NVPTX compiles (after the NVVM
// lowering, the libdevice link, NVVMReflect and O3) and replaces only what is
// GPU-specific, through the table of compiler/program/emu_abi.h:
//   - special registers (tid, ntid, ctaid, nctaid, laneid) read the emulated
//     thread's identity; warpsize is 32;
//   - barrier0, shfl.sync and the warp matrix instructions (mma.m16n8k16 with
//     bf16 or f16 multiplicands and f32 accumulators, ldmatrix.m8n8 .b16:
//     Note [emulated warp matrix operations] in runtime/emu/warp_matrix.h)
//     call the emulator, which runs a block's threads as fibers when the
//     kernel has any (HostKernel::uses_sync); other mma shapes and types are
//     refused by name;
//   - the warpgroup instructions (wgmma and its fences, groups and waits:
//     the inline PTX of wgmma_asm.h) call the emulator too, and every other
//     reader of a wgmma's accumulators gets a check before it
//     (host_warpgroup.h, Note [wgmma registers]); integers made of shared
//     pointers become offsets in the block's shared memory, as on a GPU;
//   - address-space-3 (shared) globals become offsets into the block's
//     shared memory, laid out here (HostKernelInfo::shared_bytes), the dynamic
//     shared memory after them;
//   - NVVM math intrinsics and the inline asm libdevice uses become their host
//     equivalents (Note [emulated intrinsics] in host_lowering.cc), the
//     directed-rounding ones a call; float -> bf16 truncation is expanded
//     inline (Debian 12's libgcc has no __truncsfbf2);
//   - every load, store and atomic of global, shared or generic (non-local)
//     memory is preceded by a call to EmuRuntime::access while the library's
//     checks flag is set.
// An intrinsic or inline asm not in the table is refused by name: the
// emulator never runs what it does not know how to emulate.
//
// Internal to compiler/codegen.
#ifndef GPTC_COMPILER_CODEGEN_HOST_LOWERING_H_
#define GPTC_COMPILER_CODEGEN_HOST_LOWERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/support/status.h"

namespace llvm {
class Module;
}  // namespace llvm

namespace gptc::codegen {

// Rewrites `module` (kernel `kernel_name` as the NVPTX backend receives it;
// consumed) for the host and compiles it to an ELF object exporting
// `void symbol(const uint64_t* args)` (emu_abi.h). Errors name the kernel
// and the intrinsic, asm or access that has no emulation.
StatusOr<HostKernel> CompileForHost(llvm::Module& module, const std::string& kernel_name,
                                    const std::string& symbol);

// CompileForHost on LLVM IR text: a hand-written NVPTX kernel (tests of the
// emulator's checks build their defects this way). Errors name the line.
StatusOr<HostKernel> CompileLlvmTextForHost(const std::string& ir_text,
                                            const std::string& kernel_name,
                                            const std::string& symbol);

// The object defining the library's globals (emu_abi.h: the runtime table
// pointer, the checks flag, the ABI version) and the bf16 truncation
// routine the host code generator may call.
StatusOr<std::string> HostSupportObject();

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_HOST_LOWERING_H_
