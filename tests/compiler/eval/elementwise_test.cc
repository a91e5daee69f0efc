// Elementwise opcodes, convert, and the precision rules of the evaluator.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/module.h"
#include "tests/compiler/eval/eval_test_util.h"

namespace gptc::eval {
namespace {

using ir::CompareDirection;
using ir::DType;
using ir::Instruction;
using ir::Opcode;
using ir::Shape;

using testing::Graph;
using testing::Lit;
using testing::Must;
using testing::Range;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(EvalElementwiseTest, FloatBinaryOps) {
  Graph g;
  Shape s(DType::kF32, {3});
  Instruction* a = g.Const(s, {6, -7, 2});
  Instruction* b = g.Const(s, {4, 2, 0.5});
  auto run = [&](Opcode op) { return g.Run(Must(g.b.Binary(op, a, b))).values; };
  EXPECT_EQ(run(Opcode::kAdd), (std::vector<double>{10, -5, 2.5}));
  EXPECT_EQ(run(Opcode::kSub), (std::vector<double>{2, -9, 1.5}));
  EXPECT_EQ(run(Opcode::kMul), (std::vector<double>{24, -14, 1}));
  EXPECT_EQ(run(Opcode::kDiv), (std::vector<double>{1.5, -3.5, 4}));
  EXPECT_EQ(run(Opcode::kMax), (std::vector<double>{6, 2, 2}));
  EXPECT_EQ(run(Opcode::kMin), (std::vector<double>{4, -7, 0.5}));
  std::vector<double> pow = run(Opcode::kPow);
  EXPECT_EQ(pow[0], 1296);
  EXPECT_EQ(pow[1], 49);
  EXPECT_FLOAT_EQ(pow[2], std::sqrt(2.0));
}

TEST(EvalElementwiseTest, MaxAndMinPropagateNaN) {
  Graph g;
  Shape s(DType::kF32, {2});
  Instruction* a = g.Const(s, {kNaN, 1});
  Instruction* b = g.Const(s, {1, kNaN});
  for (Opcode op : {Opcode::kMax, Opcode::kMin}) {
    std::vector<double> v = g.Run(Must(g.b.Binary(op, a, b))).values;
    EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1])) << ir::OpcodeName(op);
  }
}

TEST(EvalElementwiseTest, IntegerBinaryOpsTruncateAndWrap) {
  Graph g;
  Shape s(DType::kS32, {5});
  Instruction* a = g.Const(s, {7, -7, 5, 2147483647, 65536});
  Instruction* b = g.Const(s, {2, 2, 0, 1, 65536});
  auto run = [&](Opcode op) { return g.Run(Must(g.b.Binary(op, a, b))).values; };
  // Division truncates toward zero; x / 0 is 0.
  EXPECT_EQ(run(Opcode::kDiv), (std::vector<double>{3, -3, 0, 2147483647, 1}));
  // INT_MAX + 1 and 2^16 * 2^16 wrap like two's complement.
  EXPECT_EQ(run(Opcode::kAdd), (std::vector<double>{9, -5, 5, -2147483648.0, 131072}));
  EXPECT_EQ(run(Opcode::kMul), (std::vector<double>{14, -14, 0, 2147483647, 0}));
  EXPECT_EQ(run(Opcode::kMax), (std::vector<double>{7, 2, 5, 2147483647, 65536}));

  Shape u(DType::kU16, {2});
  Instruction* x = g.Const(u, {0, 65535});
  Instruction* y = g.Const(u, {1, 2});
  EXPECT_EQ(g.Run(Must(g.b.Binary(Opcode::kSub, x, y))).values,
            (std::vector<double>{65535, 65533}));
  EXPECT_EQ(g.Run(Must(g.b.Binary(Opcode::kAdd, x, y))).values, (std::vector<double>{1, 1}));
}

TEST(EvalElementwiseTest, FloatUnaryOps) {
  Graph g;
  Shape s(DType::kF32, {3});
  Instruction* x = g.Const(s, {0.5, 4, -3});
  auto run = [&](Opcode op) { return g.Run(Must(g.b.Unary(op, x))).values; };
  EXPECT_EQ(run(Opcode::kNeg), (std::vector<double>{-0.5, -4, 3}));
  EXPECT_EQ(run(Opcode::kAbs), (std::vector<double>{0.5, 4, 3}));
  std::vector<double> exp = run(Opcode::kExp);
  EXPECT_FLOAT_EQ(exp[0], 1.6487212707);
  EXPECT_FLOAT_EQ(exp[1], 54.598150033);
  EXPECT_FLOAT_EQ(run(Opcode::kLog)[1], 1.3862943611);
  EXPECT_TRUE(std::isnan(run(Opcode::kLog)[2]));
  EXPECT_FLOAT_EQ(run(Opcode::kTanh)[0], 0.46211715726);
  EXPECT_EQ(run(Opcode::kSqrt)[1], 2);
  EXPECT_EQ(run(Opcode::kRsqrt)[1], 0.5);
  EXPECT_FLOAT_EQ(run(Opcode::kErf)[0], 0.52049987781);
  EXPECT_FLOAT_EQ(run(Opcode::kErf)[2], -0.99997790950);
  // Results are f32 values in kF32 mode.
  for (double v : exp) EXPECT_EQ(v, static_cast<float>(v));
}

TEST(EvalElementwiseTest, IntegerUnaryOps) {
  Graph g;
  Instruction* x = g.Const(Shape(DType::kS32, {3}), {-5, 7, -2147483648.0});
  EXPECT_EQ(g.Run(Must(g.b.Unary(Opcode::kAbs, x))).values,
            (std::vector<double>{5, 7, -2147483648.0}));
  EXPECT_EQ(g.Run(Must(g.b.Unary(Opcode::kNeg, x))).values,
            (std::vector<double>{5, -7, -2147483648.0}));
}

TEST(EvalElementwiseTest, CompareAndSelect) {
  Graph g;
  Shape s(DType::kF32, {3});
  Instruction* a = g.Const(s, {1, 2, 3});
  Instruction* b = g.Const(s, {2, 2, 2});
  auto run = [&](CompareDirection d) { return g.Run(Must(g.b.Compare(a, b, d))).values; };
  EXPECT_EQ(run(CompareDirection::kEq), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(run(CompareDirection::kNe), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(run(CompareDirection::kLt), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(run(CompareDirection::kLe), (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(run(CompareDirection::kGt), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(run(CompareDirection::kGe), (std::vector<double>{0, 1, 1}));
  Literal lt = g.Run(Must(g.b.Compare(a, b, CompareDirection::kLt)));
  EXPECT_EQ(lt.shape, Shape(DType::kPred, {3}));

  Instruction* pred = Must(g.b.Compare(a, b, CompareDirection::kLt));
  EXPECT_EQ(g.Run(Must(g.b.Select(pred, a, b))).values, (std::vector<double>{1, 2, 2}));

  // Integer compares are exact beyond f32's 24 bits.
  Shape i(DType::kS32, {1});
  Instruction* big = g.Const(i, {16777217});
  Instruction* big_minus_one = g.Const(i, {16777216});
  EXPECT_EQ(g.Run(Must(g.b.Compare(big, big_minus_one, CompareDirection::kGt))).values,
            (std::vector<double>{1}));
}

TEST(EvalElementwiseTest, ConvertFloatToIntTruncatesAndSaturates) {
  Graph g;
  Instruction* x = g.Param(0, Shape(DType::kF32, {5}));
  Literal arg = Lit(Shape(DType::kF32, {5}), {-1.75, 2.75, 1e10, -1e10, kNaN});
  EXPECT_EQ(g.Run(Must(g.b.Convert(x, DType::kS32)), {arg}).values,
            (std::vector<double>{-1, 2, 2147483647, -2147483648.0, 0}));
  EXPECT_EQ(g.Run(Must(g.b.Convert(x, DType::kU16)), {arg}).values,
            (std::vector<double>{0, 2, 65535, 0, 0}));
  // Any nonzero (NaN included) is true.
  EXPECT_EQ(g.Run(Must(g.b.Convert(x, DType::kPred)), {arg}).values,
            (std::vector<double>{1, 1, 1, 1, 1}));
}

TEST(EvalElementwiseTest, ConvertBetweenIntegersAndFloats) {
  Graph g;
  Instruction* s32 = g.Const(Shape(DType::kS32, {3}), {-1, 70000, 16777217});
  EXPECT_EQ(g.Run(Must(g.b.Convert(s32, DType::kU16))).values,
            (std::vector<double>{65535, 70000 - 65536, 16777217 % 65536}));
  // f32 has 24 bits: 2^24 + 1 rounds to 2^24 in kF32 mode, stays exact in kF64.
  Instruction* f32 = Must(g.b.Convert(s32, DType::kF32));
  EXPECT_EQ(g.Run(f32).values[2], 16777216);
  EXPECT_EQ(g.Run(f32, {}, {.precision = Precision::kF64}).values[2], 16777217);
  Instruction* pred = g.Const(Shape(DType::kPred, {2}), {0, 1});
  EXPECT_EQ(g.Run(Must(g.b.Convert(pred, DType::kF32))).values, (std::vector<double>{0, 1}));
  Instruction* zero_one = g.Const(Shape(DType::kF32, {2}), {0, -0.5});
  EXPECT_EQ(g.Run(Must(g.b.Convert(zero_one, DType::kPred))).values, (std::vector<double>{0, 1}));
}

TEST(EvalElementwiseTest, ConvertRoundsTo16BitFormats) {
  Graph g;
  // bf16 has 8 significant bits (spacing 2^-7 at 1): 1 + 2^-8 ties to even 1,
  // 1 + 3*2^-8 ties to even 1 + 2^-6, 1 + 2^-8 + 2^-20 rounds up.
  Instruction* x =
      g.Const(Shape(DType::kF32, {3}), {1.00390625, 1.01171875, 1.00390625 + std::ldexp(1.0, -20)});
  EXPECT_EQ(g.Run(Must(g.b.Convert(x, DType::kBF16))).values,
            (std::vector<double>{1.0, 1.015625, 1.0078125}));
  // f16 has 11 significant bits (spacing 2^-10 at 1).
  EXPECT_EQ(g.Run(Must(g.b.Convert(x, DType::kF16))).values,
            (std::vector<double>{1.00390625, 1.01171875, 1.00390625}));
  // In kF64 mode too, 16-bit results are rounded.
  EXPECT_EQ(g.Run(Must(g.b.Convert(x, DType::kBF16)), {}, {.precision = Precision::kF64}).values,
            (std::vector<double>{1.0, 1.015625, 1.0078125}));
}

TEST(EvalPrecisionTest, F64ModeKeepsWhatF32Loses) {
  Graph g;
  Shape s = Shape::Scalar(DType::kF32);
  const double tiny = static_cast<float>(1e-10);
  Instruction* sum = Must(g.b.Binary(Opcode::kAdd, g.Const(s, {1}), g.Const(s, {tiny})));
  EXPECT_EQ(g.Run(sum).values[0], 1.0);
  EXPECT_EQ(g.Run(sum, {}, {.precision = Precision::kF64}).values[0], 1.0 + tiny);
  // And every intermediate is rounded: (1 + tiny) - 1 is 0 in f32.
  Instruction* diff = Must(g.b.Binary(Opcode::kSub, sum, g.Const(s, {1})));
  EXPECT_EQ(g.Run(diff).values[0], 0.0);
  EXPECT_NEAR(g.Run(diff, {}, {.precision = Precision::kF64}).values[0], tiny, 1e-16);
}

TEST(EvalPrecisionTest, SixteenBitResultsRoundOnStore) {
  Graph g;
  const double eps = std::ldexp(1.0, -9);  // exact in bf16, under half its spacing at 1
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Shape s = Shape::Scalar(dtype);
    const double small = dtype == DType::kBF16 ? eps : std::ldexp(1.0, -12);
    Instruction* sum = Must(g.b.Binary(Opcode::kAdd, g.Const(s, {1}), g.Const(s, {small})));
    for (Precision p : {Precision::kF32, Precision::kF64}) {
      EXPECT_EQ(g.Run(sum, {}, {.precision = p}).values[0], 1.0) << DTypeName(dtype);
      EXPECT_EQ(g.Run(sum, {}, {.precision = p, .round_16bit = false}).values[0], 1.0 + small)
          << DTypeName(dtype);
    }
  }
}

TEST(EvalPrecisionTest, SixteenBitArgumentsAreRounded) {
  Graph g;
  Instruction* x = g.Param(0, Shape(DType::kBF16, {1}));
  EXPECT_EQ(g.Run(x, {Lit(Shape(DType::kBF16, {1}), {1.001})}).values[0], 1.0);
}

TEST(EvalElementwiseTest, AllReduceSimulatesIdenticalReplicas) {
  Graph g;
  Instruction* x = g.Const(Shape(DType::kF32, {2}), {1.5, -2});
  Instruction* sum = Must(g.b.AllReduce(x, ir::ReduceKind::kSum));
  Instruction* max = Must(g.b.AllReduce(x, ir::ReduceKind::kMax));
  EXPECT_EQ(g.Run(sum).values, (std::vector<double>{1.5, -2}));
  EXPECT_EQ(g.Run(sum, {}, {.world_size = 4}).values, (std::vector<double>{6, -8}));
  EXPECT_EQ(g.Run(max, {}, {.world_size = 4}).values, (std::vector<double>{1.5, -2}));
}

// Note [collectives]: in a world of one, reduce-scatter and all-gather with
// replicas=1 are the identity; other replicas need a group of that size.
TEST(EvalElementwiseTest, ReduceScatterAndAllGatherAloneAreTheIdentity) {
  Graph g;
  Instruction* x = g.Param(0, Shape(DType::kBF16, {3}));
  Instruction* rs = Must(g.b.ReduceScatter(x, ir::ReduceKind::kSum, 1));
  Instruction* ag = Must(g.b.AllGather(rs, 1));
  const Literal in = Lit(Shape(DType::kBF16, {3}), {1.5, -2, 0.25});
  EXPECT_EQ(g.Run(ag, {in}).values, (std::vector<double>{1.5, -2, 0.25}));
  EXPECT_EQ(g.Run(ag, {in}).shape, Shape(DType::kBF16, {3}));

  Instruction* two = Must(g.b.AllGather(x, 2));
  StatusOr<Literal> simulated = g.TryRun(two, {in}, {.world_size = 2});
  ASSERT_FALSE(simulated.ok());
  EXPECT_EQ(simulated.status().message(),
            fmt::format("%{}: all-gather over replicas=2 needs a collective (the evaluator "
                        "simulates identical replicas, which have no rank to shard for)",
                        two->name()));
  StatusOr<Literal> alone = g.TryRun(two, {in});
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().message(),
            fmt::format("%{}: all-gather over replicas=2 in a group of 1 rank", two->name()));
}

// Note [collectives]: with a Collective, each all-reduce hands it a copy of
// its operand (in the storage type: float for f32 in kF32 mode) and the
// result is what the collective leaves there.
class FakeCollective : public Collective {
 public:
  int64_t rank() const override { return 1; }
  int64_t world_size() const override { return 3; }
  Status AllReduce(ir::ReduceKind kind, std::span<float> data) override {
    calls.push_back(fmt::format("{} f32 {}", kind == ir::ReduceKind::kSum ? "sum" : "max",
                                data.size()));
    for (float& v : data) v = v * 10 + 1;  // "the other ranks' contribution"
    return Status::Ok();
  }
  Status AllReduce(ir::ReduceKind kind, std::span<double> data) override {
    calls.push_back(fmt::format("f64 {}", data.size()));
    if (fail) return Error("rank 2 is gone");
    for (double& v : data) v = -v;
    return Status::Ok();
  }
  // Not called here: the evaluator tests of reduce-scatter and all-gather
  // run real ranks (tests/runtime/eval_collectives_test.cc).
  Status ReduceScatter(ir::ReduceKind, std::span<const float>, std::span<float>) override {
    return Error("unexpected reduce-scatter");
  }
  Status ReduceScatter(ir::ReduceKind, std::span<const double>, std::span<double>) override {
    return Error("unexpected reduce-scatter");
  }
  Status AllGather(std::span<const float>, std::span<float>) override {
    return Error("unexpected all-gather");
  }
  Status AllGather(std::span<const double>, std::span<double>) override {
    return Error("unexpected all-gather");
  }
  std::vector<std::string> calls;
  bool fail = false;
};

TEST(EvalElementwiseTest, AllReduceGoesThroughTheCollective) {
  Graph g;
  Instruction* x = g.Param(0, Shape(DType::kF32, {2}));
  Instruction* sum = Must(g.b.AllReduce(x, ir::ReduceKind::kSum));
  Instruction* max = Must(g.b.AllReduce(sum, ir::ReduceKind::kMax));
  Instruction* both = Must(g.b.Tuple({x, max}));
  FakeCollective c;
  Literal out = g.Run(both, {Lit(Shape(DType::kF32, {2}), {1, 2})}, {.collective = &c});
  EXPECT_EQ(out.elements[0].values, (std::vector<double>{1, 2}));  // the operand is untouched
  EXPECT_EQ(out.elements[1].values, (std::vector<double>{111, 211}));
  EXPECT_EQ(c.calls, (std::vector<std::string>{"sum f32 2", "max f32 2"}));

  // kF64 hands over doubles; a failing collective fails the evaluation, naming the instruction.
  c.calls.clear();
  Literal f64 = g.Run(sum, {Lit(Shape(DType::kF32, {2}), {1, 2})},
                      {.precision = Precision::kF64, .collective = &c});
  EXPECT_EQ(f64.values, (std::vector<double>{-1, -2}));
  c.fail = true;
  StatusOr<Literal> failed = g.TryRun(sum, {Lit(Shape(DType::kF32, {2}), {1, 2})},
                                      {.precision = Precision::kF64, .collective = &c});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), fmt::format("%{}: rank 2 is gone", sum->name()));
}

}  // namespace
}  // namespace gptc::eval
