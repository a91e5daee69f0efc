// The closed set of IR opcodes and the small enums their attributes use.
#ifndef GPTC_COMPILER_IR_OPCODE_H_
#define GPTC_COMPILER_IR_OPCODE_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace gptc::ir {

// X-macro: (enumerator, text name, operand count or -1 for variadic).
#define GPTC_OPCODES(V)                               \
  V(kParameter, "parameter", 0)                       \
  V(kConstant, "constant", 0)                         \
  V(kIota, "iota", 0)                                 \
  V(kConvert, "convert", 1)                           \
  V(kCopy, "copy", 1)                                 \
  V(kBroadcast, "broadcast", 1)                       \
  V(kReshape, "reshape", 1)                           \
  V(kTranspose, "transpose", 1)                       \
  V(kSlice, "slice", 1)                               \
  V(kPad, "pad", 2)                                   \
  V(kConcatenate, "concatenate", -1)                  \
  V(kSelect, "select", 3)                             \
  V(kCompare, "compare", 2)                           \
  V(kNeg, "neg", 1)                                   \
  V(kExp, "exp", 1)                                   \
  V(kLog, "log", 1)                                   \
  V(kTanh, "tanh", 1)                                 \
  V(kSqrt, "sqrt", 1)                                 \
  V(kRsqrt, "rsqrt", 1)                               \
  V(kErf, "erf", 1)                                   \
  V(kAbs, "abs", 1)                                   \
  V(kAdd, "add", 2)                                   \
  V(kSub, "sub", 2)                                   \
  V(kMul, "mul", 2)                                   \
  V(kDiv, "div", 2)                                   \
  V(kMax, "max", 2)                                   \
  V(kMin, "min", 2)                                   \
  V(kPow, "pow", 2)                                   \
  V(kReduce, "reduce", 1)                             \
  V(kDot, "dot", 2)                                   \
  V(kGather, "gather", 2)                             \
  V(kScatterAdd, "scatter-add", 3)                    \
  V(kAllReduce, "all-reduce", 1)                      \
  V(kFusion, "fusion", -1)                            \
  V(kAttention, "attention", 3)                       \
  V(kAttentionLse, "attention-lse", 2)                \
  V(kAttentionGrad, "attention-grad", 6)              \
  V(kSoftmaxCrossEntropy, "softmax-cross-entropy", 2) \
  V(kTuple, "tuple", -1)                              \
  V(kGetTupleElement, "get-tuple-element", 1)

enum class Opcode : uint8_t {
#define GPTC_OPCODE_ENUM(e, name, arity) e,
  GPTC_OPCODES(GPTC_OPCODE_ENUM)
#undef GPTC_OPCODE_ENUM
};

inline constexpr int kNumOpcodes = 0
#define GPTC_OPCODE_COUNT(e, name, arity) +1
    GPTC_OPCODES(GPTC_OPCODE_COUNT)
#undef GPTC_OPCODE_COUNT
    ;

std::string_view OpcodeName(Opcode opcode);
std::optional<Opcode> ParseOpcode(std::string_view name);
// Fixed operand count, or -1 when the opcode is variadic.
int OpcodeArity(Opcode opcode);

bool IsUnaryElementwise(Opcode opcode);   // neg .. abs, plus convert and copy
bool IsBinaryElementwise(Opcode opcode);  // add .. pow
bool IsElementwise(Opcode opcode);        // unary, binary, select, compare
// Ops that call a computation: fusion, and the composites whose `calls=`
// computation is their decomposition into primitives.
bool CallsComputation(Opcode opcode);

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
