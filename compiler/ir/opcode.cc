#include "compiler/ir/opcode.h"

#include <array>

namespace gptc::ir {

namespace {
struct OpcodeInfo {
  std::string_view name;
  int arity;
  OpcodeCategory category;
};
constexpr std::array<OpcodeInfo, kNumOpcodes> kOpcodeInfo = {{
#define GPTC_OPCODE_INFO(e, name, arity, category) {name, arity, OpcodeCategory::category},
    GPTC_OPCODES(GPTC_OPCODE_INFO)
#undef GPTC_OPCODE_INFO
}};

// Looks `s` up in a table of names indexed by enumerator value.
template <typename Enum, size_t N>
std::optional<Enum> Lookup(const std::array<std::string_view, N>& names, std::string_view s) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == s) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

constexpr std::array<std::string_view, 6> kCompareNames = {"EQ", "NE", "LT", "LE", "GT", "GE"};
constexpr std::array<std::string_view, 2> kReduceNames = {"sum", "max"};
constexpr std::array<std::string_view, 6> kFusionNames = {
    "loop", "reduction", "gemm", "attention", "cross_entropy", "optimizer"};
}  // namespace

std::string_view OpcodeName(Opcode opcode) {
  return kOpcodeInfo[static_cast<int>(opcode)].name;
}

std::optional<Opcode> ParseOpcode(std::string_view name) {
  for (int i = 0; i < kNumOpcodes; ++i) {
    if (kOpcodeInfo[i].name == name) return static_cast<Opcode>(i);
  }
  return std::nullopt;
}

int OpcodeArity(Opcode opcode) { return kOpcodeInfo[static_cast<int>(opcode)].arity; }

OpcodeCategory CategoryOf(Opcode opcode) { return kOpcodeInfo[static_cast<int>(opcode)].category; }

bool IsUnaryMath(Opcode opcode) { return CategoryOf(opcode) == OpcodeCategory::kUnaryMath; }

bool IsUnaryElementwise(Opcode opcode) {
  return IsUnaryMath(opcode) || CategoryOf(opcode) == OpcodeCategory::kConversion;
}

bool IsBinaryElementwise(Opcode opcode) {
  return CategoryOf(opcode) == OpcodeCategory::kBinaryMath;
}

bool IsElementwise(Opcode opcode) {
  return IsUnaryElementwise(opcode) || IsBinaryElementwise(opcode) ||
         CategoryOf(opcode) == OpcodeCategory::kSelection;
}

bool IsLayout(Opcode opcode) { return CategoryOf(opcode) == OpcodeCategory::kLayout; }

bool CallsComputation(Opcode opcode) { return CategoryOf(opcode) == OpcodeCategory::kCalls; }

bool IsCollective(Opcode opcode) {
  return opcode == Opcode::kAllReduce || opcode == Opcode::kReduceScatter ||
         opcode == Opcode::kAllGather;
}

std::string_view CompareDirectionName(CompareDirection d) {
  return kCompareNames[static_cast<int>(d)];
}
std::optional<CompareDirection> ParseCompareDirection(std::string_view s) {
  return Lookup<CompareDirection>(kCompareNames, s);
}
std::string_view ReduceKindName(ReduceKind k) { return kReduceNames[static_cast<int>(k)]; }
std::optional<ReduceKind> ParseReduceKind(std::string_view s) {
  return Lookup<ReduceKind>(kReduceNames, s);
}
std::string_view FusionKindName(FusionKind k) { return kFusionNames[static_cast<int>(k)]; }
std::optional<FusionKind> ParseFusionKind(std::string_view s) {
  return Lookup<FusionKind>(kFusionNames, s);
}

}  // namespace gptc::ir
