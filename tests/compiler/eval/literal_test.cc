#include "compiler/eval/literal.h"

#include <gtest/gtest.h>

#include "compiler/support/float_bits.h"

namespace gptc::eval {
namespace {

using ir::DType;
using ir::Shape;

TEST(LiteralTest, ZerosFillsArraysAndTuples) {
  Literal z = Literal::Zeros(Shape(DType::kF32, {2, 3}));
  EXPECT_EQ(z.values, std::vector<double>(6, 0.0));
  Literal t = Literal::Zeros(Shape::Tuple({Shape(DType::kS32, {2}), Shape::Scalar(DType::kBF16)}));
  ASSERT_EQ(t.elements.size(), 2u);
  EXPECT_EQ(t.elements[0].values, (std::vector<double>{0, 0}));
  EXPECT_EQ(t.elements[1].values, (std::vector<double>{0}));
  EXPECT_TRUE(t.values.empty());
}

TEST(LiteralTest, RandomIsDeterministicAndFitsTheDType) {
  Shape s(DType::kF32, {64});
  std::mt19937_64 a(1), b(1);
  EXPECT_EQ(Literal::Random(s, a).values, Literal::Random(s, b).values);

  std::mt19937_64 rng(3);
  for (double v : Literal::Random(Shape(DType::kBF16, {64}), rng).values) {
    EXPECT_EQ(v, RoundToBF16(static_cast<float>(v)));
  }
  for (double v : Literal::Random(Shape(DType::kF16, {64}), rng).values) {
    EXPECT_EQ(v, RoundToF16(static_cast<float>(v)));
  }
  Literal f = Literal::Random(Shape(DType::kF32, {1000}), rng);
  double mean = 0;
  for (double v : f.values) {
    EXPECT_EQ(v, static_cast<float>(v));
    mean += v / 1000;
  }
  EXPECT_NEAR(mean, 0, 0.2);
  for (DType dtype : {DType::kS32, DType::kU16}) {
    for (double v : Literal::Random(Shape(dtype, {64}), rng).values) {
      EXPECT_TRUE(v >= 0 && v < 16 && v == static_cast<int>(v)) << v;
    }
  }
  int ones = 0;
  for (double v : Literal::Random(Shape(DType::kPred, {100}), rng).values) {
    EXPECT_TRUE(v == 0 || v == 1);
    ones += static_cast<int>(v);
  }
  EXPECT_GT(ones, 20);
  EXPECT_LT(ones, 80);
  Literal t = Literal::Random(Shape::Tuple({Shape(DType::kS32, {3}), s}), rng);
  EXPECT_EQ(t.elements[1].values.size(), 64u);
}

TEST(LiteralTest, Summary) {
  Literal x{Shape(DType::kF32, {2, 3}), {1, -1.125, 1.375, 0, 0, 0}, {}};
  EXPECT_EQ(x.Summary(), "f32[2,3] sum=1.25 abs=3.5");
  Literal t{
      Shape::Tuple({Shape(DType::kF32, {1}), Shape(DType::kS32, {2})}),
      {},
      {Literal{Shape(DType::kF32, {1}), {1}, {}}, Literal{Shape(DType::kS32, {2}), {1, 2}, {}}}};
  EXPECT_EQ(t.Summary(), "f32[1] sum=1 abs=1; s32[2] sum=3 abs=3");
}

}  // namespace
}  // namespace gptc::eval
