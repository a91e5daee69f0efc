// The opcode table (compiler/ir/opcode.h): names, arities and the categories
// the passes, the evaluator and the emitters test.
#include "compiler/ir/opcode.h"

#include <gtest/gtest.h>

#include <set>

namespace gptc::ir {
namespace {

std::set<Opcode> Where(bool (*is)(Opcode)) {
  std::set<Opcode> out;
  for (int i = 0; i < kNumOpcodes; ++i) {
    if (is(static_cast<Opcode>(i))) out.insert(static_cast<Opcode>(i));
  }
  return out;
}

TEST(OpcodeTest, NamesRoundTrip) {
  for (int i = 0; i < kNumOpcodes; ++i) {
    const Opcode op = static_cast<Opcode>(i);
    EXPECT_EQ(ParseOpcode(OpcodeName(op)), op) << OpcodeName(op);
  }
  EXPECT_FALSE(ParseOpcode("no-such-op").has_value());
  EXPECT_EQ(OpcodeArity(Opcode::kAttentionGrad), 6);
  EXPECT_EQ(OpcodeArity(Opcode::kConcatenate), -1);
}

TEST(OpcodeTest, CategoriesAreTheListsTheyName) {
  using enum Opcode;
  EXPECT_EQ(Where(IsUnaryMath),
            (std::set<Opcode>{kNeg, kExp, kLog, kTanh, kSqrt, kRsqrt, kErf, kAbs}));
  EXPECT_EQ(Where(IsUnaryElementwise), (std::set<Opcode>{kConvert, kCopy, kNeg, kExp, kLog, kTanh,
                                                         kSqrt, kRsqrt, kErf, kAbs}));
  EXPECT_EQ(Where(IsBinaryElementwise),
            (std::set<Opcode>{kAdd, kSub, kMul, kDiv, kMax, kMin, kPow}));
  std::set<Opcode> elementwise = Where(IsUnaryElementwise);
  for (Opcode op : Where(IsBinaryElementwise)) elementwise.insert(op);
  elementwise.insert(kSelect);
  elementwise.insert(kCompare);
  EXPECT_EQ(Where(IsElementwise), elementwise);
  EXPECT_EQ(Where(IsLayout),
            (std::set<Opcode>{kBroadcast, kReshape, kTranspose, kSlice, kPad, kConcatenate}));
  EXPECT_EQ(Where(CallsComputation), (std::set<Opcode>{kFusion, kAttention, kAttentionLse,
                                                       kAttentionGrad, kSoftmaxCrossEntropy}));
  EXPECT_EQ(CategoryOf(kIota), OpcodeCategory::kLeaf);
  EXPECT_EQ(CategoryOf(kDot), OpcodeCategory::kOther);
}

}  // namespace
}  // namespace gptc::ir
