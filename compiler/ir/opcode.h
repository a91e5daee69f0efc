// The closed set of IR opcodes and the small enums their attributes use.
#ifndef GPTC_COMPILER_IR_OPCODE_H_
#define GPTC_COMPILER_IR_OPCODE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace gptc::ir {

// The category of an opcode, which the passes, the evaluator and the
// emitters test instead of listing opcodes in switches of their own.
enum class OpcodeCategory : uint8_t {
  kLeaf,        // parameter, constant, iota: no operand
  kConversion,  // convert, copy: elementwise, one operand, no arithmetic
  kLayout,      // maps each element's index to an operand's (broadcast .. concatenate)
  kSelection,   // select, compare: elementwise
  kUnaryMath,   // neg .. abs
  kBinaryMath,  // add .. pow
  kCalls,       // calls a computation: fusion, and the composites
  kOther,       // reduce, dot, gather, scatter-add, collectives, tuples
};

// X-macro: (enumerator, text name, operand count or -1 for variadic,
// OpcodeCategory).
#define GPTC_OPCODES(V)                                       \
  V(kParameter, "parameter", 0, kLeaf)                        \
  V(kConstant, "constant", 0, kLeaf)                          \
  V(kIota, "iota", 0, kLeaf)                                  \
  V(kConvert, "convert", 1, kConversion)                      \
  V(kCopy, "copy", 1, kConversion)                            \
  V(kBroadcast, "broadcast", 1, kLayout)                      \
  V(kReshape, "reshape", 1, kLayout)                          \
  V(kTranspose, "transpose", 1, kLayout)                      \
  V(kSlice, "slice", 1, kLayout)                              \
  V(kPad, "pad", 2, kLayout)                                  \
  V(kConcatenate, "concatenate", -1, kLayout)                 \
  V(kSelect, "select", 3, kSelection)                         \
  V(kCompare, "compare", 2, kSelection)                       \
  V(kNeg, "neg", 1, kUnaryMath)                               \
  V(kExp, "exp", 1, kUnaryMath)                               \
  V(kLog, "log", 1, kUnaryMath)                               \
  V(kTanh, "tanh", 1, kUnaryMath)                             \
  V(kSqrt, "sqrt", 1, kUnaryMath)                             \
  V(kRsqrt, "rsqrt", 1, kUnaryMath)                           \
  V(kErf, "erf", 1, kUnaryMath)                               \
  V(kAbs, "abs", 1, kUnaryMath)                               \
  V(kAdd, "add", 2, kBinaryMath)                              \
  V(kSub, "sub", 2, kBinaryMath)                              \
  V(kMul, "mul", 2, kBinaryMath)                              \
  V(kDiv, "div", 2, kBinaryMath)                              \
  V(kMax, "max", 2, kBinaryMath)                              \
  V(kMin, "min", 2, kBinaryMath)                              \
  V(kPow, "pow", 2, kBinaryMath)                              \
  V(kReduce, "reduce", 1, kOther)                             \
  V(kDot, "dot", 2, kOther)                                   \
  V(kGather, "gather", 2, kOther)                             \
  V(kScatterAdd, "scatter-add", 3, kOther)                    \
  V(kAllReduce, "all-reduce", 1, kOther)                      \
  V(kFusion, "fusion", -1, kCalls)                            \
  V(kAttention, "attention", 3, kCalls)                       \
  V(kAttentionLse, "attention-lse", 2, kCalls)                \
  V(kAttentionGrad, "attention-grad", 6, kCalls)              \
  V(kSoftmaxCrossEntropy, "softmax-cross-entropy", 2, kCalls) \
  V(kTuple, "tuple", -1, kOther)                              \
  V(kGetTupleElement, "get-tuple-element", 1, kOther)         \
  V(kReduceScatter, "reduce-scatter", 1, kOther)              \
  V(kAllGather, "all-gather", 1, kOther)

enum class Opcode : uint8_t {
#define GPTC_OPCODE_ENUM(e, name, arity, category) e,
  GPTC_OPCODES(GPTC_OPCODE_ENUM)
#undef GPTC_OPCODE_ENUM
};

inline constexpr int kNumOpcodes = 0
#define GPTC_OPCODE_COUNT(e, name, arity, category) +1
    GPTC_OPCODES(GPTC_OPCODE_COUNT)
#undef GPTC_OPCODE_COUNT
    ;

std::string_view OpcodeName(Opcode opcode);
std::optional<Opcode> ParseOpcode(std::string_view name);
// Fixed operand count, or -1 when the opcode is variadic.
int OpcodeArity(Opcode opcode);

OpcodeCategory CategoryOf(Opcode opcode);

bool IsUnaryMath(Opcode opcode);          // neg .. abs
bool IsUnaryElementwise(Opcode opcode);   // neg .. abs, plus convert and copy
bool IsBinaryElementwise(Opcode opcode);  // add .. pow
bool IsElementwise(Opcode opcode);        // unary, binary, select, compare
bool IsLayout(Opcode opcode);             // broadcast, reshape, transpose, slice, pad, concatenate
// Ops that call a computation: fusion, and the composites whose `calls=`
// computation is their decomposition into primitives.
bool CallsComputation(Opcode opcode);
// all-reduce, reduce-scatter, all-gather: every rank of the data-parallel
// group calls them with the same operands' shapes, in the same order, so no
// pass may merge, remove, recompute, fuse or reorder them.
bool IsCollective(Opcode opcode);

enum class CompareDirection : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
std::string_view CompareDirectionName(CompareDirection d);  // "EQ", ...
std::optional<CompareDirection> ParseCompareDirection(std::string_view s);

enum class ReduceKind : uint8_t { kSum, kMax };
std::string_view ReduceKindName(ReduceKind k);  // "sum", "max"
std::optional<ReduceKind> ParseReduceKind(std::string_view s);

// What a fusion computes, which picks its code generator.
enum class FusionKind : uint8_t {
  kLoop,          // elementwise ops, one thread per output element
  kReduction,     // row or column reductions with elementwise prologue/epilogue
  kGemm,          // a dot with an epilogue handed to cuBLASLt
  kAttention,     // fused attention
  kCrossEntropy,  // fused softmax cross-entropy
  kOptimizer,     // horizontal parameter update over many tensors
};
std::string_view FusionKindName(FusionKind k);  // "loop", ...
std::optional<FusionKind> ParseFusionKind(std::string_view s);

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_OPCODE_H_
