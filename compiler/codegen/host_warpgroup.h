// The warpgroup instructions of a host kernel (Note [host kernels] in
// host_lowering.h): the inline asm of wgmma_asm.h becomes calls of the
// emulator (EmuRuntime::wgmma and warpgroup), each instruction that takes a
// wgmma's accumulators other than the two that may (Note [wgmma registers]
// in wgmma_asm.h) is preceded by a check (EmuRuntime::wgmma_read), and
// integers made of shared-memory pointers become offsets in the block's
// shared memory, as a GPU's shared addresses are (matrix descriptors hold
// them).
//
// Internal to compiler/codegen.
#ifndef GPTC_COMPILER_CODEGEN_HOST_WARPGROUP_H_
#define GPTC_COMPILER_CODEGEN_HOST_WARPGROUP_H_

#include <cstdint>
#include <map>

#include "compiler/codegen/wgmma_asm.h"
#include "compiler/support/status.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Instructions.h"

namespace gptc::codegen {

class HostWarpgroup {
 public:
  // `runtime`: the kernel's kRuntimeSymbol global (emu_abi.h).
  HostWarpgroup(llvm::Module& m, llvm::GlobalVariable* runtime);

  // Before the asm is replaced: the checks before every other reader of a
  // wgmma's results (through phis, selects, extracts, inserts and casts).
  Status GuardAccumulators();
  // The replacement of `call`, the inline asm `wg` (RecognizeWarpgroupAsm),
  // built before it; null when it has no result.
  StatusOr<llvm::Value*> Emulate(llvm::CallInst& call, const WarpgroupAsm& wg);
  // After shared memory is placed: ptrtoint of a shared pointer is its
  // offset in the block's shared memory, inttoptr to one its inverse.
  void RebaseSharedIntegers();

  int64_t wgmmas() const { return wgmmas_; }
  // Fences, commits, waits and register fences.
  int64_t others() const { return others_; }

 private:
  // The function's stack arrays passing operands and results.
  std::pair<llvm::Value*, llvm::Value*> Scratch(llvm::Function* f);

  llvm::Module& m_;
  llvm::GlobalVariable* runtime_;
  uint32_t scratch_words_;  // the most words an asm of the module passes
  std::map<llvm::Function*, std::pair<llvm::Value*, llvm::Value*>> scratch_;
  int64_t wgmmas_ = 0, others_ = 0, reads_ = 0;
  std::map<int, uint32_t> sites_;  // per WarpgroupAsm::Kind: the next site
};

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_HOST_WARPGROUP_H_
