// Note [affine layouts]: the element offsets of a value in the buffer it is
// stored to or read from, checked against the offsets the evaluator's
// row-major layout gives for every element of small shapes.
#include "compiler/codegen/affine_layout.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/compiler/codegen/codegen_test_util.h"

namespace gptc::codegen {
namespace {

const ir::Instruction& Find(const ir::Module& m, const std::string& name) {
  const ir::Instruction* x = m.entry()->FindInstruction(name);
  EXPECT_NE(x, nullptr) << name;
  return *x;
}

// Every index of `dims`, row-major.
std::vector<std::vector<int64_t>> Indices(const std::vector<int64_t>& dims) {
  std::vector<std::vector<int64_t>> out(1);
  for (int64_t n : dims) {
    std::vector<std::vector<int64_t>> next;
    for (const auto& prefix : out) {
      for (int64_t i = 0; i < n; ++i) {
        next.push_back(prefix);
        next.back().push_back(i);
      }
    }
    out = std::move(next);
  }
  return out;
}

int64_t Offset(const AffineLayout& l, const std::vector<int64_t>& index) {
  int64_t at = l.offset;
  for (size_t i = 0; i < index.size(); ++i) at += index[i] * l.strides[i];
  return at;
}

// GPT-2's attention output: [B, H, T, D] -> [B, T, H, D] -> [B, T, H*D],
// rounded to bf16: (b, h, t, d) at b T C + t C + h D + d.
TEST(AffineLayoutTest, ResultThroughTransposeReshapeAndConvert) {
  std::unique_ptr<ir::Module> m = Parse(R"(module t
ENTRY %main {
  %o = f32[2,3,5,4] parameter(0)
  %t = f32[2,5,3,4] transpose(%o), dimensions={0,2,1,3}
  %r = f32[2,5,12] reshape(%t)
  ROOT %c = bf16[2,5,12] convert(%r)
}
)");
  ASSERT_NE(m, nullptr);
  const std::optional<AffineLayout> l =
      LayoutOfResult(Find(*m, "o"), {&Find(*m, "t"), &Find(*m, "r"), &Find(*m, "c")});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->buffer, &Find(*m, "c"));
  EXPECT_EQ(l->strides, (std::vector<int64_t>{60, 4, 12, 1}));
  EXPECT_EQ(l->offset, 0);
  // Against the row-major position of the transposed index in [2, 5, 12].
  for (const auto& i : Indices({2, 3, 5, 4})) {
    EXPECT_EQ(Offset(*l, i), (i[0] * 5 + i[2]) * 12 + i[1] * 4 + i[3]);
  }
}

// q out of a [B, T, 3C] projection: slice the second C, split the heads,
// move them before T; widened from bf16 as the forward reads it.
TEST(AffineLayoutTest, OperandThroughSliceReshapeTransposeAndConvert) {
  std::unique_ptr<ir::Module> m = Parse(R"(module t
ENTRY %main {
  %qkv = bf16[2,5,36] parameter(0)
  %s = bf16[2,5,12] slice(%qkv), slice={[0:2],[0:5],[12:24]}
  %r = bf16[2,5,3,4] reshape(%s)
  %t = bf16[2,3,5,4] transpose(%r), dimensions={0,2,1,3}
  ROOT %w = f32[2,3,5,4] convert(%t)
}
)");
  ASSERT_NE(m, nullptr);
  const std::optional<AffineLayout> l = LayoutOfOperand(Find(*m, "w"));
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->buffer, &Find(*m, "qkv"));
  EXPECT_EQ(l->strides, (std::vector<int64_t>{180, 4, 36, 1}));
  EXPECT_EQ(l->offset, 12);
  for (const auto& i : Indices({2, 3, 5, 4})) {
    EXPECT_EQ(Offset(*l, i), (i[0] * 5 + i[2]) * 36 + 12 + i[1] * 4 + i[3]);
  }
}

// A packed output's piece: dq of [B, H, T, D] written at columns C..2C of
// the [B, T, 3C] gradient through its transpose, reshape and pad.
TEST(AffineLayoutTest, ResultThroughAPadIsABoxOfThePaddedBuffer) {
  std::unique_ptr<ir::Module> m = Parse(R"(module t
ENTRY %main {
  %g = f32[2,3,5,4] parameter(0)
  %t = f32[2,5,3,4] transpose(%g), dimensions={0,2,1,3}
  %r = f32[2,5,12] reshape(%t)
  %zero = f32[] constant(0)
  %p = f32[2,5,36] pad(%r, %zero), low={0,0,12}, high={0,0,12}
  ROOT %q = f32[10,36] reshape(%p)
}
)");
  ASSERT_NE(m, nullptr);
  const std::optional<AffineLayout> l =
      LayoutOfResult(Find(*m, "g"), {&Find(*m, "t"), &Find(*m, "r"), &Find(*m, "p")});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->buffer, &Find(*m, "p"));
  EXPECT_EQ(l->strides, (std::vector<int64_t>{180, 4, 36, 1}));
  EXPECT_EQ(l->offset, 12);
  // Only at the end of the chain.
  EXPECT_FALSE(LayoutOfResult(Find(*m, "r"), {&Find(*m, "p"), &Find(*m, "q")}).has_value());
}

// Dims of size 1 take no part (stride 0); a reshape that splits a dim, an
// op that computes, and a slice not over a parameter give no layout.
TEST(AffineLayoutTest, UnitDimsAndWhatHasNoLayout) {
  std::unique_ptr<ir::Module> m = Parse(R"(module t
ENTRY %main {
  %x = f32[1,2,1,4] parameter(0)
  %r = f32[2,4] reshape(%x)
  %y = f32[2,12] parameter(1)
  %split = f32[2,3,4] reshape(%y)
  %neg = f32[2,12] neg(%y)
  %z = f32[2,12] parameter(2)
  %e = f32[2,12] exp(%z)
  %se = f32[2,6] slice(%e), slice={[0:2],[0:6]}
  ROOT %out = (f32[2,4], f32[2,3,4], f32[2,12], f32[2,6]) tuple(%r, %split, %neg, %se)
}
)");
  ASSERT_NE(m, nullptr);
  const std::optional<AffineLayout> unit = LayoutOfResult(Find(*m, "x"), {&Find(*m, "r")});
  ASSERT_TRUE(unit.has_value());
  EXPECT_EQ(unit->strides, (std::vector<int64_t>{0, 4, 0, 1}));
  EXPECT_FALSE(LayoutOfResult(Find(*m, "y"), {&Find(*m, "split")}).has_value());
  EXPECT_FALSE(LayoutOfResult(Find(*m, "y"), {&Find(*m, "neg")}).has_value());
  EXPECT_FALSE(LayoutOfOperand(Find(*m, "neg")).has_value());
  EXPECT_FALSE(LayoutOfOperand(Find(*m, "se")).has_value());
  // A split seen from the operand side is a merge: fine.
  const std::optional<AffineLayout> split = LayoutOfOperand(Find(*m, "split"));
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->strides, (std::vector<int64_t>{12, 4, 1}));
}

}  // namespace
}  // namespace gptc::codegen
