// reduce, dot, gather and scatter-add.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/module.h"
#include "tests/compiler/eval/eval_test_util.h"

namespace gptc::eval {
namespace {

using ir::DType;
using ir::Instruction;
using ir::Opcode;
using ir::ReduceKind;
using ir::Shape;

using testing::Graph;
using testing::Lit;
using testing::Must;
using testing::Range;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(EvalReduceTest, SumAndMaxOverDimensionSets) {
  Graph g;
  Shape s(DType::kF32, {2, 3, 4});
  Instruction* x = g.Const(s, Range(s));  // x[i,j,k] = 12i + 4j + k
  auto run = [&](std::vector<int64_t> dims, ReduceKind kind) {
    return g.Run(Must(g.b.Reduce(x, dims, kind, DType::kF32))).values;
  };
  // sum_{i,k} = 4*12 + 8*4j + 2*(0+1+2+3)
  EXPECT_EQ(run({0, 2}, ReduceKind::kSum), (std::vector<double>{60, 92, 124}));
  // sum_j = 36i + 12 + 3k
  EXPECT_EQ(run({1}, ReduceKind::kSum), (std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57}));
  EXPECT_EQ(run({2}, ReduceKind::kSum), (std::vector<double>{6, 22, 38, 54, 70, 86}));
  EXPECT_EQ(run({0, 1, 2}, ReduceKind::kSum), (std::vector<double>{276}));
  EXPECT_EQ(run({}, ReduceKind::kSum), Range(s));
  EXPECT_EQ(run({0, 1}, ReduceKind::kMax), (std::vector<double>{20, 21, 22, 23}));
  EXPECT_EQ(run({2, 0}, ReduceKind::kMax), (std::vector<double>{15, 19, 23}));
}

TEST(EvalReduceTest, MaxOfNegativesAndLongRows) {
  Graph g;
  Instruction* x = g.Const(Shape(DType::kF32, {2, 7}),
                           {-5, -3, -9, -4, -8, -6, -7, -1, -2, -3, -4, -5, -6, -0.5});
  EXPECT_EQ(g.Run(Must(g.b.Reduce(x, {1}, ReduceKind::kMax, DType::kF32))).values,
            (std::vector<double>{-3, -0.5}));
  EXPECT_EQ(g.Run(Must(g.b.Reduce(x, {1}, ReduceKind::kSum, DType::kF32))).values,
            (std::vector<double>{-42, -21.5}));
}

TEST(EvalReduceTest, EmptyReductionsGiveTheIdentity) {
  Graph g;
  Instruction* f = g.Const(Shape(DType::kF32, {2, 0}), {});
  EXPECT_EQ(g.Run(Must(g.b.Reduce(f, {1}, ReduceKind::kSum, DType::kF32))).values,
            (std::vector<double>{0, 0}));
  EXPECT_EQ(g.Run(Must(g.b.Reduce(f, {1}, ReduceKind::kMax, DType::kF32))).values,
            (std::vector<double>{-kInf, -kInf}));
  Instruction* i = g.Const(Shape(DType::kS32, {0}), {});
  EXPECT_EQ(g.Run(Must(g.b.Reduce(i, {0}, ReduceKind::kMax, DType::kS32))).values,
            (std::vector<double>{-2147483648.0}));
}

TEST(EvalReduceTest, SixteenBitInputAccumulatesIntoF32) {
  Graph g;
  Instruction* x = g.Const(Shape(DType::kBF16, {2}), {256, 1});
  // 257 is exact in f32 but ties to even 256 in bf16.
  EXPECT_EQ(g.Run(Must(g.b.Reduce(x, {0}, ReduceKind::kSum, DType::kF32))).values[0], 257);
  EXPECT_EQ(g.Run(Must(g.b.Reduce(x, {0}, ReduceKind::kSum, DType::kBF16))).values[0], 256);
}

TEST(EvalReduceTest, IntegerSum) {
  Graph g;
  Instruction* x = g.Const(Shape(DType::kS32, {3}), {2147483647, 1, 5});
  EXPECT_EQ(g.Run(Must(g.b.Reduce(x, {0}, ReduceKind::kSum, DType::kS32))).values[0],
            -2147483648.0 + 5);
}

ir::DotDimensions Dims(std::vector<int64_t> lb, std::vector<int64_t> rb, std::vector<int64_t> lc,
                       std::vector<int64_t> rc) {
  return {std::move(lb), std::move(rb), std::move(lc), std::move(rc)};
}

TEST(EvalDotTest, MatrixProduct) {
  Graph g;
  Instruction* a = g.Const(Shape(DType::kF32, {2, 3}), {1, 2, 3, 4, 5, 6});
  Instruction* b = g.Const(Shape(DType::kF32, {3, 2}), {7, 8, 9, 10, 11, 12});
  Literal out = g.Run(Must(g.b.Dot(a, b, Dims({}, {}, {1}, {0}), DType::kF32)));
  EXPECT_EQ(out.shape, Shape(DType::kF32, {2, 2}));
  EXPECT_EQ(out.values, (std::vector<double>{58, 64, 139, 154}));
  EXPECT_EQ(g.Run(Must(g.b.Dot(a, b, Dims({}, {}, {1}, {0}), DType::kF32)), {},
                  {.precision = Precision::kF64})
                .values,
            (std::vector<double>{58, 64, 139, 154}));
}

TEST(EvalDotTest, ContractingDimsNotLast) {
  Graph g;
  // The transposes of the operands above: a^T contracts dim 0, b^T dim 1.
  Instruction* at = g.Const(Shape(DType::kF32, {3, 2}), {1, 4, 2, 5, 3, 6});
  Instruction* bt = g.Const(Shape(DType::kF32, {2, 3}), {7, 9, 11, 8, 10, 12});
  EXPECT_EQ(g.Run(Must(g.b.Dot(at, bt, Dims({}, {}, {0}, {1}), DType::kF32))).values,
            (std::vector<double>{58, 64, 139, 154}));
  // Vector-matrix with both free dims gone on one side.
  Instruction* v = g.Const(Shape(DType::kF32, {3}), {1, 0, -1});
  EXPECT_EQ(g.Run(Must(g.b.Dot(v, bt, Dims({}, {}, {0}, {1}), DType::kF32))).values,
            (std::vector<double>{-4, -4}));
}

TEST(EvalDotTest, BatchDims) {
  Graph g;
  Instruction* a = g.Const(Shape(DType::kF32, {2, 1, 2}), {1, 2, 3, 4});
  Instruction* b = g.Const(Shape(DType::kF32, {2, 2, 1}), {5, 6, 7, 8});
  Literal out = g.Run(Must(g.b.Dot(a, b, Dims({0}, {0}, {2}, {1}), DType::kF32)));
  EXPECT_EQ(out.shape, Shape(DType::kF32, {2, 1, 1}));
  EXPECT_EQ(out.values, (std::vector<double>{17, 53}));
}

TEST(EvalDotTest, BatchDimNotFirstNeedsARelayout) {
  Graph g;
  // lhs[k,b,m]: per batch b, A_b[m,k] = lhs[k,b,m]; A_0 = [[1,5],[2,6]], A_1 = [[3,7],[4,8]].
  Instruction* lhs = g.Const(Shape(DType::kF32, {2, 2, 2}), {1, 2, 3, 4, 5, 6, 7, 8});
  // rhs[b,k,n]: B_0 = identity, B_1 = [[2,1],[1,2]].
  Instruction* rhs = g.Const(Shape(DType::kF32, {2, 2, 2}), {1, 0, 0, 1, 2, 1, 1, 2});
  Literal out = g.Run(Must(g.b.Dot(lhs, rhs, Dims({1}, {0}, {0}, {1}), DType::kF32)));
  EXPECT_EQ(out.values, (std::vector<double>{1, 5, 2, 6, 13, 17, 16, 20}));
}

// Index-by-index reference dot for operands of any layout.
std::vector<double> NaiveDot(const Literal& lhs, const Literal& rhs, const ir::DotDimensions& dn,
                             const Shape& result) {
  auto free_dims = [](const Shape& s, const std::vector<int64_t>& b,
                      const std::vector<int64_t>& c) {
    std::vector<int64_t> f;
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (std::find(b.begin(), b.end(), d) == b.end() &&
          std::find(c.begin(), c.end(), d) == c.end()) {
        f.push_back(d);
      }
    }
    return f;
  };
  std::vector<int64_t> lf = free_dims(lhs.shape, dn.lhs_batch, dn.lhs_contracting);
  std::vector<int64_t> rf = free_dims(rhs.shape, dn.rhs_batch, dn.rhs_contracting);
  std::vector<int64_t> ls = lhs.shape.Strides(), rs = rhs.shape.Strides();
  std::vector<int64_t> k_dims;
  for (int64_t d : dn.lhs_contracting) k_dims.push_back(lhs.shape.dim(d));
  int64_t k_total = 1;
  for (int64_t d : k_dims) k_total *= d;
  std::vector<double> out(result.num_elements());
  std::vector<int64_t> ri = result.Strides();
  for (int64_t flat = 0; flat < result.num_elements(); ++flat) {
    std::vector<int64_t> idx(result.rank());
    for (int64_t d = 0, rest = flat; d < result.rank(); ++d) {
      idx[d] = rest / ri[d];
      rest %= ri[d];
    }
    int64_t l0 = 0, r0 = 0, pos = 0;
    for (size_t i = 0; i < dn.lhs_batch.size(); ++i, ++pos) {
      l0 += idx[pos] * ls[dn.lhs_batch[i]];
      r0 += idx[pos] * rs[dn.rhs_batch[i]];
    }
    for (int64_t d : lf) l0 += idx[pos++] * ls[d];
    for (int64_t d : rf) r0 += idx[pos++] * rs[d];
    double sum = 0;
    for (int64_t k = 0; k < k_total; ++k) {
      int64_t l = l0, r = r0;
      for (int64_t c = static_cast<int64_t>(k_dims.size()) - 1, rest = k; c >= 0; --c) {
        int64_t kc = rest % k_dims[c];
        rest /= k_dims[c];
        l += kc * ls[dn.lhs_contracting[c]];
        r += kc * rs[dn.rhs_contracting[c]];
      }
      sum += lhs.values[l] * rhs.values[r];
    }
    out[flat] = sum;
  }
  return out;
}

TEST(EvalDotTest, GeneralDimensionNumbersMatchNaiveLoops) {
  std::mt19937_64 rng(7);
  Graph g;
  Shape ls(DType::kF32, {4, 3, 5, 2}), rs(DType::kF32, {2, 5, 6, 4});
  // Batch: lhs 2 / rhs 1 (size 5); contracting: lhs {0,3} / rhs {3,0} (sizes 4, 2).
  ir::DotDimensions dn = Dims({2}, {1}, {0, 3}, {3, 0});
  Instruction* lhs = g.Param(0, ls);
  Instruction* rhs = g.Param(1, rs);
  Instruction* dot = Must(g.b.Dot(lhs, rhs, dn, DType::kF32));
  ASSERT_EQ(dot->shape(), Shape(DType::kF32, {5, 3, 6}));
  Literal l = Literal::Random(ls, rng), r = Literal::Random(rs, rng);
  std::vector<double> expected = NaiveDot(l, r, dn, dot->shape());
  std::vector<double> f64 = g.Run(dot, {l, r}, {.precision = Precision::kF64}).values;
  std::vector<double> f32 = g.Run(dot, {l, r}).values;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(f64[i], expected[i], 1e-12) << i;
    EXPECT_NEAR(f32[i], expected[i], 1e-5) << i;
    EXPECT_EQ(f32[i], static_cast<float>(f32[i]));
  }
}

TEST(EvalDotTest, Bf16OperandsWithF32OrBf16Result) {
  Graph g;
  Shape s(DType::kBF16, {1, 2});
  Shape t(DType::kBF16, {2, 1});
  Instruction* a = g.Const(s, {256, 1});
  Instruction* b = g.Const(t, {1, 1});
  EXPECT_EQ(g.Run(Must(g.b.Dot(a, b, Dims({}, {}, {1}, {0}), DType::kF32))).values[0], 257);
  EXPECT_EQ(g.Run(Must(g.b.Dot(a, b, Dims({}, {}, {1}, {0}), DType::kBF16))).values[0], 256);
}

TEST(EvalDotTest, LogitsSizedProductIsFast) {
  // The LM head of a small GPT-2: [256,64] x [64,50304], about 1.6 GFLOP.
  Graph g;
  Shape xs(DType::kF32, {256, 64}), ws(DType::kF32, {64, 50304});
  Instruction* dot =
      Must(g.b.Dot(g.Param(0, xs), g.Param(1, ws), Dims({}, {}, {1}, {0}), DType::kF32));
  Literal x = Literal::Zeros(xs), w = Literal::Zeros(ws);
  x.values[64 + 3] = 2;           // x[1,3]
  w.values[3 * 50304 + 7] = 1.5;  // w[3,7]
  auto start = std::chrono::steady_clock::now();
  Literal out = g.Run(dot, {x, w});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(out.values[50304 + 7], 3);
  EXPECT_LT(seconds, 2.0) << "the dot must go through BLAS";
}

TEST(EvalGatherTest, TakesRowsAlongAnAxis) {
  Graph g;
  Instruction* table = g.Const(Shape(DType::kF32, {4, 2}), {0, 1, 10, 11, 20, 21, 30, 31});
  Instruction* idx = g.Const(Shape(DType::kS32, {2, 2}), {3, 0, 1, 1});
  Literal out = g.Run(Must(g.b.Gather(table, idx, 0)));
  EXPECT_EQ(out.shape, Shape(DType::kF32, {2, 2, 2}));
  EXPECT_EQ(out.values, (std::vector<double>{30, 31, 0, 1, 10, 11, 10, 11}));

  Instruction* m = g.Const(Shape(DType::kF32, {2, 3}), {1, 2, 3, 4, 5, 6});
  Instruction* cols = g.Const(Shape(DType::kU16, {2}), {2, 0});
  EXPECT_EQ(g.Run(Must(g.b.Gather(m, cols, 1))).values, (std::vector<double>{3, 1, 6, 4}));
}

TEST(EvalGatherTest, OutOfRangeIndexIsAnError) {
  Graph g;
  Instruction* table = g.Const(Shape(DType::kF32, {4, 2}), {0, 1, 10, 11, 20, 21, 30, 31});
  Instruction* idx = g.Param(0, Shape(DType::kS32, {2, 2}));
  Instruction* gather = Must(g.b.Build(Opcode::kGather, {table, idx}, {}, Shape(), nullptr, "wte"));
  StatusOr<Literal> out = g.TryRun(gather, {Lit(Shape(DType::kS32, {2, 2}), {0, 1, 4, 2})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "%wte: gather index 4 at indices[1,0] is out of range for axis 0 of size 4");
  EXPECT_FALSE(g.TryRun(gather, {Lit(Shape(DType::kS32, {2, 2}), {0, -1, 0, 0})}).ok());
}

TEST(EvalScatterAddTest, DuplicateIndicesAccumulate) {
  Graph g;
  Instruction* operand = g.Const(Shape(DType::kF32, {3, 2}), {1, 1, 1, 1, 1, 1});
  Instruction* idx = g.Const(Shape(DType::kS32, {3}), {2, 0, 2});
  Instruction* updates = g.Const(Shape(DType::kF32, {3, 2}), {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(g.Run(Must(g.b.ScatterAdd(operand, idx, updates, 0))).values,
            (std::vector<double>{4, 5, 1, 1, 7, 9}));

  Instruction* zeros = g.Const(Shape(DType::kF32, {2, 3}), {0, 0, 0, 0, 0, 0});
  Instruction* cols = g.Const(Shape(DType::kU16, {2}), {1, 1});
  Instruction* col_updates = g.Const(Shape(DType::kF32, {2, 2}), {1, 2, 3, 4});
  EXPECT_EQ(g.Run(Must(g.b.ScatterAdd(zeros, cols, col_updates, 1))).values,
            (std::vector<double>{0, 3, 0, 0, 7, 0}));
}

TEST(EvalScatterAddTest, OutOfRangeIndexIsAnError) {
  Graph g;
  Instruction* operand = g.Const(Shape(DType::kF32, {2}), {0, 0});
  Instruction* idx = g.Const(Shape(DType::kS32, {1}), {2});
  Instruction* updates = g.Const(Shape(DType::kF32, {1}), {1});
  StatusOr<Literal> out = g.TryRun(Must(g.b.ScatterAdd(operand, idx, updates, 0)));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "%scatter-add: scatter-add index 2 at indices[0] is out of "
            "range for axis 0 of size 2");
}

}  // namespace
}  // namespace gptc::eval
