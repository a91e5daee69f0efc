#include "passes/simplify.h"

#include <gtest/gtest.h>

#include <string_view>

#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

// Parses `text`, runs simplify through the harness (verify + evaluate before
// and after), expects `changed`, and returns the result.
std::unique_ptr<ir::Module> Simplified(std::string_view text, bool changed = true) {
  auto module = ParseOrDie(text);
  EXPECT_NE(module, nullptr);
  if (module == nullptr) return nullptr;
  Simplify simplify;
  std::unique_ptr<ir::Module> after;
  EXPECT_EQ(RunPassAndCompare(simplify, *module, after), changed);
  if (!changed) {
    EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));
  }
  return after;
}

const ir::Instruction* Root(const ir::Module& m) { return m.entry()->root(); }

// The entry became `ROOT = parameter` and nothing else is left but parameters.
void ExpectRootIsParameter(const ir::Module& m, std::string_view name, int64_t count = 1) {
  EXPECT_EQ(Root(m)->name(), name) << ir::PrintModule(m);
  EXPECT_EQ(Root(m)->opcode(), ir::Opcode::kParameter);
  EXPECT_EQ(m.entry()->instruction_count(), count) << ir::PrintModule(m);
}

TEST(SimplifyTest, AddOfBroadcastZero) {
  // 2048 elements: too big to fold, so the broadcast-of-a-scalar matcher does it.
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[64,32] parameter(0)
  %z = f32[] constant(0)
  %b = f32[64,32] broadcast(%z), dimensions={}
  ROOT %r = f32[64,32] add(%x, %b)
}
)");
  ExpectRootIsParameter(*m, "x");
}

TEST(SimplifyTest, ZeroPlusX) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %z = f32[4] constant({0, 0, 0, 0})
  %a = f32[4] add(%z, %x)
  ROOT %r = f32[4] exp(%a)
}
)");
  EXPECT_EQ(Root(*m)->operand(0)->name(), "x");
  EXPECT_EQ(m->entry()->instruction_count(), 2);
}

TEST(SimplifyTest, SubZero) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = s32[4] parameter(0)
  %z = s32[] constant(0)
  %b = s32[4] broadcast(%z), dimensions={}
  ROOT %r = s32[4] sub(%x, %b)
}
)");
  ExpectRootIsParameter(*m, "x");
}

TEST(SimplifyTest, MulOneOnEitherSide) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[64,32] parameter(0)
  %one = f32[] constant(1)
  %b = f32[64,32] broadcast(%one), dimensions={}
  %l = f32[64,32] mul(%b, %x)
  ROOT %r = f32[64,32] mul(%l, %b)
}
)");
  ExpectRootIsParameter(*m, "x");
}

TEST(SimplifyTest, DivOneAndPowOne) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %one = f32[4] constant({1, 1, 1, 1})
  %d = f32[4] div(%x, %one)
  ROOT %p = f32[4] pow(%d, %one)
}
)");
  ExpectRootIsParameter(*m, "x");
}

TEST(SimplifyTest, IntegerMulZeroIsZero) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = s32[4] parameter(0)
  %z = s32[4] constant({0, 0, 0, 0})
  ROOT %r = s32[4] mul(%x, %z)
}
)");
  EXPECT_EQ(Root(*m)->name(), "z");
  EXPECT_EQ(m->entry()->instruction_count(), 2);
}

TEST(SimplifyTest, FloatMulZeroIsKept) {
  // inf * 0 and nan * 0 are nan: not an identity for floats (Note [float identities]).
  Simplified(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %z = f32[4] constant({0, 0, 0, 0})
  ROOT %r = f32[4] mul(%x, %z)
}
)",
             /*changed=*/false);
}

TEST(SimplifyTest, NegNeg) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %n1 = f32[4] neg(%x)
  %n2 = f32[4] neg(%n1)
  ROOT %r = f32[4] exp(%n2)
}
)");
  EXPECT_EQ(Root(*m)->operand(0)->name(), "x");
  EXPECT_EQ(m->entry()->instruction_count(), 2);
}

TEST(SimplifyTest, NoOpConvertReshapeTransposeBroadcastSlice) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[2,3] parameter(0)
  %c = f32[2,3] convert(%x)
  %r = f32[2,3] reshape(%c)
  %t = f32[2,3] transpose(%r), dimensions={0,1}
  %b = f32[2,3] broadcast(%t), dimensions={0,1}
  ROOT %s = f32[2,3] slice(%b), slice={[0:2],[0:3]}
}
)");
  ExpectRootIsParameter(*m, "x");
}

TEST(SimplifyTest, ConvertRoundTripThroughF32) {
  // bf16 -> f32 -> bf16 is exact (autodiff makes it for the gradient of a
  // bf16 copy that feeds a bf16 dot); f32 -> bf16 -> f32 rounds: kept.
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = bf16[2,3] parameter(0)
  %w = f32[2,3] convert(%x)
  ROOT %n = bf16[2,3] convert(%w)
}
)");
  ExpectRootIsParameter(*m, "x");
  Simplified(R"(module m
ENTRY %main {
  %x = f32[2,3] parameter(0)
  %n = bf16[2,3] convert(%x)
  ROOT %w = f32[2,3] convert(%n)
}
)",
             /*changed=*/false);
  // f16 -> f32 -> bf16 changes the format: kept.
  Simplified(R"(module m
ENTRY %main {
  %x = f16[2,3] parameter(0)
  %w = f32[2,3] convert(%x)
  ROOT %n = bf16[2,3] convert(%w)
}
)",
             /*changed=*/false);
}

TEST(SimplifyTest, ReshapeChain) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[2,3,4] parameter(0)
  %r1 = f32[6,4] reshape(%x)
  ROOT %r2 = f32[24] reshape(%r1)
}
)");
  EXPECT_EQ(Root(*m)->opcode(), ir::Opcode::kReshape);
  EXPECT_EQ(Root(*m)->operand(0)->name(), "x");
  EXPECT_EQ(m->entry()->instruction_count(), 2);
}

TEST(SimplifyTest, ReshapeChainBackToTheSameShape) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[2,3,4] parameter(0)
  %r1 = f32[24] reshape(%x)
  ROOT %r2 = f32[2,3,4] reshape(%r1)
}
)");
  ExpectRootIsParameter(*m, "x");
}

TEST(SimplifyTest, TransposeChainComposes) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[2,3,4] parameter(0)
  %t1 = f32[3,4,2] transpose(%x), dimensions={1,2,0}
  ROOT %t2 = f32[4,3,2] transpose(%t1), dimensions={1,0,2}, meta="h.0.attn"
}
)");
  const ir::Instruction* root = Root(*m);
  EXPECT_EQ(root->opcode(), ir::Opcode::kTranspose);
  EXPECT_EQ(root->operand(0)->name(), "x");
  EXPECT_EQ(root->attrs().dimensions, (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(root->metadata(), "h.0.attn");  // the new instruction keeps the metadata
  EXPECT_EQ(m->entry()->instruction_count(), 2);
}

TEST(SimplifyTest, TransposeChainToIdentity) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[2,3,4] parameter(0)
  %t1 = f32[3,4,2] transpose(%x), dimensions={1,2,0}
  ROOT %t2 = f32[2,3,4] transpose(%t1), dimensions={2,0,1}
}
)");
  ExpectRootIsParameter(*m, "x");
}

TEST(SimplifyTest, BroadcastChainComposes) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %b1 = f32[3,4] broadcast(%x), dimensions={1}
  ROOT %b2 = f32[2,3,4] broadcast(%b1), dimensions={1,2}
}
)");
  const ir::Instruction* root = Root(*m);
  EXPECT_EQ(root->opcode(), ir::Opcode::kBroadcast);
  EXPECT_EQ(root->operand(0)->name(), "x");
  EXPECT_EQ(root->attrs().dimensions, (std::vector<int64_t>{2}));
  EXPECT_EQ(m->entry()->instruction_count(), 2);
}

TEST(SimplifyTest, ReduceOverNoDims) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %y = bf16[4] parameter(1)
  %rx = f32[4] reduce(%x), dimensions={}, kind=sum
  %ry = f32[4] reduce(%y), dimensions={}, kind=max
  ROOT %t = (f32[4], f32[4]) tuple(%rx, %ry)
}
)");
  const ir::Instruction* root = Root(*m);
  EXPECT_EQ(root->operand(0)->name(), "x");
  EXPECT_EQ(root->operand(1)->opcode(), ir::Opcode::kConvert);  // bf16 into f32
  EXPECT_EQ(root->operand(1)->operand(0)->name(), "y");
}

TEST(SimplifyTest, SingleConcatenateAndSelects) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[64,32] parameter(0)
  %y = f32[64,32] parameter(1)
  %p = pred[64,32] parameter(2)
  %c = f32[64,32] concatenate(%x), dimensions={0}
  %s1 = f32[64,32] select(%p, %c, %c)
  %t = pred[] constant(true)
  %tb = pred[64,32] broadcast(%t), dimensions={}
  %s2 = f32[64,32] select(%tb, %y, %s1)
  ROOT %r = f32[64,32] add(%s1, %s2)
}
)");
  const ir::Instruction* root = Root(*m);
  EXPECT_EQ(root->operand(0)->name(), "x");
  EXPECT_EQ(root->operand(1)->name(), "y");
  EXPECT_EQ(m->entry()->instruction_count(), 4);
}

TEST(SimplifyTest, FoldsSmallConstantExpressions) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %a = f32[4] constant({1, 2, 3, 4})
  %two = f32[] constant(2)
  %b = f32[4] broadcast(%two), dimensions={}
  %m = f32[4] mul(%a, %b), meta="scale"
  %n = s32[4] convert(%m)
  %f = f32[4] convert(%n)
  ROOT %r = f32[4] add(%x, %f)
}
)");
  const ir::Instruction* c = Root(*m)->operand(1);
  ASSERT_EQ(c->opcode(), ir::Opcode::kConstant);
  EXPECT_EQ(c->attrs().literal, (std::vector<double>{2, 4, 6, 8}));
  EXPECT_EQ(m->entry()->instruction_count(), 3);
}

TEST(SimplifyTest, FoldedConstantKeepsMetadata) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %a = f32[2] constant({1, 4})
  ROOT %s = f32[2] sqrt(%a), meta="h.1.ln"
}
)");
  const ir::Instruction* root = Root(*m);
  ASSERT_EQ(root->opcode(), ir::Opcode::kConstant);
  EXPECT_EQ(root->attrs().literal, (std::vector<double>{1, 2}));
  EXPECT_EQ(root->metadata(), "h.1.ln");
}

TEST(SimplifyTest, DoesNotFoldLargeResults) {
  // exp of a 2048-element broadcast stays computed at run time.
  Simplified(R"(module m
ENTRY %main {
  %c = f32[] constant(0.5)
  %b = f32[64,32] broadcast(%c), dimensions={}
  ROOT %e = f32[64,32] exp(%b)
}
)",
             /*changed=*/false);
}

TEST(SimplifyTest, RewritesFusedComputations) {
  auto m = Simplified(R"(module m
%fused {
  %p = f32[4] parameter(0)
  %one = f32[4] constant({1, 1, 1, 1})
  %m = f32[4] mul(%p, %one)
  ROOT %e = f32[4] exp(%m)
}
ENTRY %main {
  %x = f32[4] parameter(0)
  ROOT %f = f32[4] fusion(%x), kind=loop, calls=%fused
}
)");
  const ir::Computation* fused = m->FindComputation("fused");
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->instruction_count(), 2);
  EXPECT_EQ(fused->root()->operand(0)->name(), "p");
}

TEST(SimplifyTest, RemovesDeadCodeButKeepsParameters) {
  auto m = Simplified(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %unused = f32[4] parameter(1)
  %dead = f32[4] exp(%unused)
  ROOT %r = f32[4] neg(%x)
}
)");
  EXPECT_EQ(m->entry()->instruction_count(), 3);
  EXPECT_NE(m->entry()->FindInstruction("unused"), nullptr);
  EXPECT_EQ(m->entry()->FindInstruction("dead"), nullptr);
}

// Note [scatter into the addend]: the rows of u land on x's (either side of
// the add); the zeros and the add go. Random x, u and indices (0..15, so
// repeated) compare before and after, to rounding: the adds reassociate.
TEST(SimplifyTest, AddOfAScatterIntoZerosScattersIntoTheAddend) {
  for (const char* add : {"add(%x, %s)", "add(%s, %x)"}) {
    auto module = ParseOrDie(std::string(R"(module m
ENTRY %main {
  %x = f32[16,128] parameter(0)
  %i = s32[40] parameter(1)
  %u = f32[40,128] parameter(2)
  %z = f32[] constant(0)
  %zb = f32[16,128] broadcast(%z), dimensions={}
  %s = f32[16,128] scatter-add(%zb, %i, %u), axis=0
  ROOT %r = f32[16,128] )") + add +
                             "\n}\n");
    ASSERT_NE(module, nullptr);
    Simplify simplify;
    std::unique_ptr<ir::Module> m;
    EXPECT_TRUE(RunPassAndCompare(simplify, *module, m, /*trials=*/3, /*rel_tol=*/1e-6));
    const ir::Instruction* root = Root(*m);
    EXPECT_EQ(root->opcode(), ir::Opcode::kScatterAdd) << ir::PrintModule(*m);
    EXPECT_EQ(root->operand(0)->name(), "x");
    EXPECT_EQ(root->operand(1)->name(), "i");
    EXPECT_EQ(root->operand(2)->name(), "u");
    EXPECT_EQ(root->attrs().index, 0);  // the axis
    EXPECT_EQ(m->entry()->instruction_count(), 4) << ir::PrintModule(*m);
  }
}

// Not into zeros, or read by another user too: the scatter-adds stay.
TEST(SimplifyTest, ScatterAddsIntoOtherOperandsOrWithOtherUsersStay) {
  Simplified(R"(module m
ENTRY %main {
  %x = f32[16,128] parameter(0)
  %i = s32[40] parameter(1)
  %u = f32[40,128] parameter(2)
  %y = f32[16,128] parameter(3)
  %z = f32[] constant(0)
  %zb = f32[16,128] broadcast(%z), dimensions={}
  %s = f32[16,128] scatter-add(%zb, %i, %u), axis=0
  %a = f32[16,128] add(%x, %s)
  %t = f32[16,128] scatter-add(%y, %i, %u), axis=0
  %c = f32[16,128] add(%x, %t)
  ROOT %r = (f32[16,128], f32[16,128], f32[16,128]) tuple(%a, %s, %c)
}
)",
             /*changed=*/false);
}

TEST(SimplifyTest, LeavesSimpleModuleAlone) {
  // Nothing to rewrite: a real convert, a real transpose, float x * 0,
  // add of a non-zero broadcast, an unused parameter, an all-reduce.
  Simplified(R"(module m
ENTRY %main {
  %x = f32[32,64] parameter(0)
  %unused = f32[4] parameter(1)
  %h = bf16[32,64] convert(%x)
  %t = bf16[64,32] transpose(%h), dimensions={1,0}
  %half = bf16[] constant(0.5)
  %b = bf16[64,32] broadcast(%half), dimensions={}
  %a = bf16[64,32] add(%t, %b)
  %zero = bf16[] constant(0)
  %zb = bf16[64,32] broadcast(%zero), dimensions={}
  %m = bf16[64,32] mul(%a, %zb)
  %ar = bf16[64,32] all-reduce(%m), kind=sum
  %r = bf16[2048] reshape(%ar)
  ROOT %tuple = (bf16[2048], bf16[64,32]) tuple(%r, %a)
}
)",
             /*changed=*/false);
}

}  // namespace
}  // namespace gptc::passes
