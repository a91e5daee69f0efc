// The inline PTX of Hopper's warpgroup instructions, written in one place:
// the emitters call them (LLVM 19 has no wgmma, fence.proxy.async or
// register-fence intrinsics) and the host lowering recognizes exactly these
// texts and constraints (Note [host kernels]); any other inline asm is
// refused there by name. No MLIR or LLVM here.
//
// Note [wgmma registers]
// wgmma.mma_async writes its accumulators asynchronously: until a
// wgmma.wait_group retires its group, reading them is undefined. LLVM does
// not know that the asm's results are not ready when it returns, and may move
// arithmetic on them above the wait. So the accumulators leave a wgmma only
// through a register fence placed after the wait: an empty asm that takes
// them and gives them back ("=f" tied to each input, as CUTLASS's
// warpgroup_fence_operand), which nothing can be hoisted above. Their only
// other legal use is as the C of a later wgmma (accumulator chaining, which
// the hardware orders). The emulator enforces exactly that (runtime/emu/
// warpgroup.h): a fence of registers whose wgmma has not been waited for, and
// any other use of them, is a defect naming the instruction and the thread.
//
// Internal to compiler/codegen.
#ifndef GPTC_COMPILER_CODEGEN_WGMMA_ASM_H_
#define GPTC_COMPILER_CODEGEN_WGMMA_ASM_H_

#include <cstdint>
#include <optional>
#include <string>

namespace gptc::codegen {

// One form of wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}: D (64 x
// N, f32) += A (64 x 16) B (16 x N), A from registers (`register_a`, the RS
// form) or a shared-memory descriptor, B from a descriptor.
struct WgmmaForm {
  int64_t n = 64;  // a multiple of 8, 8 to 256
  bool register_a = true;
  bool f16 = false;                   // else bf16
  bool trans_a = false;               // imm-trans-a (shared A only): A is M-major
  bool trans_b = false;               // imm-trans-b: B is N-major
  bool neg_a = false, neg_b = false;  // imm-scale-a, imm-scale-b = -1
  bool operator==(const WgmmaForm&) const = default;

  int64_t accumulators() const { return n / 2; }  // f32 registers a thread holds
  // "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"
  std::string Mnemonic() const;
  // The emulator's op (compiler/program/emu_abi.h).
  uint32_t EmuOp() const;
};

// Whether `form` is one the hardware has (N a multiple of 8 in [8, 256],
// trans_a only with a shared A).
bool IsValid(const WgmmaForm& form);

// An inline asm statement: its text and LLVM constraint string. Operands of
// a wgmma, in order: the accumulators as "=f" results, then A (4 x "r") or
// A's descriptor ("l"), B's descriptor ("l"), scale-d ("r": nonzero keeps C),
// then C tied to the results.
struct InlineAsm {
  std::string text, constraints;
};
InlineAsm WgmmaAsm(const WgmmaForm& form);
InlineAsm WgmmaFenceAsm();          // wgmma.fence.sync.aligned
InlineAsm WgmmaCommitAsm();         // wgmma.commit_group.sync.aligned
InlineAsm WgmmaWaitAsm(int64_t n);  // wgmma.wait_group.sync.aligned n (0 to 7)
// Note [wgmma registers]: `count` f32 registers in and out.
InlineAsm WgmmaRegisterFenceAsm(int64_t count);
// fence.proxy.async.shared::cta: a thread's generic-proxy stores to shared
// memory become visible to the async proxy (wgmma's operand reads).
InlineAsm FenceProxyAsyncAsm();

// What a recognized statement is.
struct WarpgroupAsm {
  enum class Kind { kWgmma, kFence, kCommit, kWait, kRegisterFence, kFenceProxyAsync };
  Kind kind = Kind::kFence;
  WgmmaForm wgmma;    // kWgmma
  int64_t count = 0;  // kWait: the groups left pending; kRegisterFence: registers
};
// The statement of exactly one of the texts and constraints above, or none.
std::optional<WarpgroupAsm> RecognizeWarpgroupAsm(const std::string& text,
                                                  const std::string& constraints);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_WGMMA_ASM_H_
