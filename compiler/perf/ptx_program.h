// A PTX kernel decoded for the H100 model (docs/PERFORMANCE.md, Note [kernel
// model] in kernel_model.h): its basic blocks of instructions, each with its
// registers as dense numbers, its operands, and what the model needs to know
// of it (what it computes when it is integer or address arithmetic, what it
// reads and writes of memory, where it branches).
//
// The grammar read is what LLVM's NVPTX backend writes, plus the inline
// assembly of compiler/codegen/wgmma_asm.h: `.reg` declarations, `.shared`
// arrays, labels, one statement per `;` (an mma's operand lists span lines),
// `{ ... }` scopes of inline assembly. A statement it does not know is kept
// as kOther (it still takes an issue slot); what it cannot parse is an error
// naming the line.
#ifndef GPTC_COMPILER_PERF_PTX_PROGRAM_H_
#define GPTC_COMPILER_PERF_PTX_PROGRAM_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::perf {

// What an instruction does, as far as the model cares.
enum class PtxOp : uint8_t {
  // Integer and predicate arithmetic, evaluated by the walker (ptx_walker.h)
  // when its type is an integer or pred type.
  kAdd,
  kSub,
  kMul,
  kMad,
  kDiv,
  kRem,
  kAnd,
  kOr,
  kXor,
  kNot,
  kShl,
  kShr,
  kMin,
  kMax,
  kNeg,
  kAbs,
  kBfe,
  kSelp,
  kSetp,
  kMov,
  kCvt,
  kCvta,
  kFma,   // fma (floating point only)
  kMufu,  // ex2, lg2, rcp, rsqrt, sqrt, sin, cos, tanh (.approx): the special-function unit
  kLd,
  kSt,
  kAtom,
  kCpAsync,
  kCpAsyncCommit,
  kCpAsyncWait,
  kBar,
  kShfl,
  kMma,
  kLdmatrix,
  kWgmma,
  kWgmmaFence,
  kWgmmaCommit,
  kWgmmaWait,
  kFence,
  kBra,
  kRet,
  kOther,
};

// The type suffix that decides how an operation computes.
enum class PtxType : uint8_t {
  kNone,
  kPred,
  kB8,
  kU8,
  kS8,
  kB16,
  kU16,
  kS16,
  kB32,
  kU32,
  kS32,
  kB64,
  kU64,
  kS64,
  kF16,
  kBf16,
  kF16x2,
  kBf16x2,
  kF32,
  kF64,
};
bool IsFloat(PtxType t);
bool IsSigned(PtxType t);
int TypeBits(PtxType t);  // 1 for pred, 32 for f16x2, ...

enum class PtxSpace : uint8_t { kNone, kGlobal, kShared, kParam, kLocal, kConst, kGeneric };

// setp's comparison.
enum class PtxCmp : uint8_t { kNone, kEq, kNe, kLt, kLe, kGt, kGe, kLo, kLs, kHi, kHs, kOther };

struct PtxOperand {
  enum Kind : uint8_t { kNone, kReg, kImm, kSymbol, kParam, kSpecial, kLabel };
  Kind kind = kNone;
  int32_t reg = -1;  // kReg: the register's number
  // kImm: the value (a float immediate's bits); kSymbol: the shared array
  // (PtxKernel::shared; -1 for another symbol); kParam: the parameter's
  // number; kSpecial: PtxSpecial; kLabel: the target block.
  int64_t imm = 0;
};

// %tid.x, %ntid.y, %ctaid.z, ...: kSpecial operands' `imm`.
enum PtxSpecial : int64_t {
  kTidX,
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
  kWarpId,
  kOtherSpecial,
};

struct PtxInst {
  PtxOp op = PtxOp::kOther;
  PtxType type = PtxType::kNone;   // the result's type (cvt: the destination's)
  PtxType type2 = PtxType::kNone;  // cvt: the source's; setp: the compared type
  PtxCmp cmp = PtxCmp::kNone;
  PtxSpace space = PtxSpace::kNone;
  bool wide = false, hi = false;  // mul/mad .wide and .hi
  bool approx = false;            // .approx (div, sqrt, rcp: the fast forms)
  uint8_t vec = 1;                // ld/st .v2/.v4
  uint8_t bytes = 0;              // ld/st/atom: bytes an element; cp.async: bytes copied
  // mma: m, n, k; wgmma: 64, N, 16; ldmatrix: its matrices (x1, x2, x4)
  uint16_t m = 0, n = 0, k = 0;
  int32_t guard = -1;  // predicate register, -1: unguarded
  bool guard_negated = false;
  std::vector<int32_t> dsts;     // registers written
  std::vector<PtxOperand> srcs;  // operands read, in order (a store's values included)
  // ld/st/atom/cp.async/ldmatrix: the address: `addr` (a register or a
  // symbol) + `offset`; cp.async's global source is `addr2` + `offset2`.
  PtxOperand addr, addr2;
  int64_t offset = 0, offset2 = 0;
  int32_t target = -1;  // bra: the target block
  int32_t line = 0;     // 1-based, in the text given to ParsePtx
};

struct PtxBlock {
  std::string label;  // empty for the entry block
  std::vector<PtxInst> insts;
};

struct PtxSharedArray {
  std::string name;
  int64_t offset = 0, bytes = 0;  // bytes 0: the dynamic array (`.extern .shared ... []`)
};

struct PtxKernel {
  std::string name;
  int32_t params = 0;  // .param operands, in order (each a pointer: Note [kernel ABI])
  std::vector<std::string> registers;  // by number, for messages
  std::vector<PtxType> register_types;
  std::vector<PtxSharedArray> shared;  // static arrays at their offsets, then the dynamic one
  int64_t static_shared_bytes = 0;
  std::vector<PtxBlock> blocks;  // in text order; control falls through to the next
  int32_t inst_count = 0;        // over all blocks
  int32_t max_threads = 0;       // .maxntid's product, 0 if absent
};

// Every `.entry` of `ptx` (a module, or several concatenated as an
// artifact's PTX section is). Errors: "ptx:LINE: what is wrong".
StatusOr<std::vector<PtxKernel>> ParsePtx(std::string_view ptx);

}  // namespace gptc::perf

#endif  // GPTC_COMPILER_PERF_PTX_PROGRAM_H_
