// Tensor operations: NumPy broadcasting, matmul forms, reshapes and
// reductions, checked by evaluating the traced IR against hand-computed values.
#include "frontend/tensor.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>

#include "compiler/eval/evaluator.h"
#include "frontend/tracer.h"

namespace gptc::frontend {
namespace {

using ir::DType;
using ir::Shape;

// Traces `f` over inputs of `shapes`, evaluates it in f64 on `values` and
// returns the result (values and shape).
eval::Literal TraceAndRun(const std::vector<Shape>& shapes,
                          const std::vector<std::vector<double>>& values,
                          const std::function<Tensor(Tracer&, std::vector<Tensor>&)>& f) {
  Tracer tracer("t");
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    inputs.push_back(tracer.Input(fmt::format("x{}", i), shapes[i]));
  }
  StatusOr<TracedModule> traced = tracer.Finish(f(tracer, inputs));
  EXPECT_TRUE(traced.ok()) << traced.status().message();
  if (!traced.ok()) return {};
  std::vector<eval::Literal> args;
  for (size_t i = 0; i < shapes.size(); ++i) args.push_back({shapes[i], values[i], {}});
  eval::EvalOptions options;
  options.precision = eval::Precision::kF64;
  StatusOr<eval::Literal> result = eval::Evaluate(*traced->module, args, options);
  EXPECT_TRUE(result.ok()) << result.status().message();
  return result.ok() ? *result : eval::Literal{};
}

Shape F32(std::vector<int64_t> dims) { return Shape(DType::kF32, std::move(dims)); }

TEST(TensorTest, BinaryOpsBroadcastLikeNumPy) {
  // [2,1] * [1,3] + [3] -> [2,3]
  eval::Literal r =
      TraceAndRun({F32({2, 1}), F32({1, 3}), F32({3})}, {{1, 2}, {10, 20, 30}, {1, 2, 3}},
                  [](Tracer&, std::vector<Tensor>& x) { return x[0] * x[1] + x[2]; });
  EXPECT_EQ(r.shape, F32({2, 3}));
  EXPECT_EQ(r.values, (std::vector<double>{11, 22, 33, 21, 42, 63}));
}

TEST(TensorTest, ScalarArithmeticOnBothSides) {
  eval::Literal r = TraceAndRun({F32({3})}, {{1, 2, 4}}, [](Tracer&, std::vector<Tensor>& x) {
    return (1.0 - x[0]) * 2.0 + 8.0 / x[0] - (-x[0]);
  });
  EXPECT_EQ(r.values, (std::vector<double>{9, 4, 0}));
}

TEST(TensorTest, KeepDimsReductionBroadcastsBackWithoutExtraReshapes) {
  // Softmax-style normalization: x - max(x, keepdims).
  Tracer tracer("t");
  Tensor x = tracer.Input("x", F32({2, 3}));
  Tensor y = x - x.Max({-1}, /*keep_dims=*/true);
  StatusOr<TracedModule> traced = tracer.Finish(y);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  // x, reduce, broadcast, sub: the keep_dims reshape is looked through and dropped.
  EXPECT_EQ(traced->module->entry()->instruction_count(), 4);
  eval::Literal r =
      TraceAndRun({F32({2, 3})}, {{1, 5, 3, 2, 2, 7}},
                  [](Tracer&, std::vector<Tensor>& x) { return x[0] - x[0].Max({-1}, true); });
  EXPECT_EQ(r.values, (std::vector<double>{-4, 0, -2, -5, -5, 0}));
}

TEST(TensorTest, MeanSumAndKeepDims) {
  eval::Literal r = TraceAndRun({F32({2, 2})}, {{1, 2, 3, 5}}, [](Tracer&, std::vector<Tensor>& x) {
    return x[0].Mean({0}, true) + x[0].Sum({1}, true);  // [1,2] + [2,1] -> [2,2]
  });
  EXPECT_EQ(r.shape, F32({2, 2}));
  EXPECT_EQ(r.values, (std::vector<double>{5, 6.5, 10, 11.5}));
}

TEST(TensorTest, MatmulWithRank2RightOperandIsOneDot) {
  Tracer tracer("t");
  Tensor x = tracer.Input("x", F32({2, 3, 4}));
  Tensor w = tracer.Input("w", F32({4, 5}));
  Tensor y = Matmul(x, w);
  EXPECT_EQ(y.shape(), F32({2, 3, 5}));
  EXPECT_EQ(y.instruction()->opcode(), ir::Opcode::kDot);
  EXPECT_TRUE(y.instruction()->attrs().dot.lhs_batch.empty());
}

TEST(TensorTest, BatchedMatmulBroadcastsLeadingDims) {
  // a [2,1,2] (two 1x2 rows) @ b [2,1] broadcast over the batch.
  eval::Literal r = TraceAndRun({F32({2, 1, 2}), F32({1, 2, 2})}, {{1, 2, 3, 4}, {1, 0, 0, 1}},
                                [](Tracer&, std::vector<Tensor>& x) { return Matmul(x[0], x[1]); });
  EXPECT_EQ(r.shape, F32({2, 1, 2}));
  EXPECT_EQ(r.values, (std::vector<double>{1, 2, 3, 4}));
  // A rank-2 left operand broadcast against a batched right one.
  eval::Literal s = TraceAndRun({F32({1, 2}), F32({2, 2, 1})}, {{1, 2}, {1, 1, 2, 3}},
                                [](Tracer&, std::vector<Tensor>& x) { return Matmul(x[0], x[1]); });
  EXPECT_EQ(s.shape, F32({2, 1, 1}));
  EXPECT_EQ(s.values, (std::vector<double>{3, 8}));
}

TEST(TensorTest, MatmulTransposeBContractsLastDims) {
  // [1,2] @ [3,2]^T -> [1,3]
  eval::Literal r =
      TraceAndRun({F32({1, 2}), F32({3, 2})}, {{1, 2}, {1, 0, 0, 1, 1, 1}},
                  [](Tracer&, std::vector<Tensor>& x) { return MatmulTransposeB(x[0], x[1]); });
  EXPECT_EQ(r.shape, F32({1, 3}));
  EXPECT_EQ(r.values, (std::vector<double>{1, 2, 3}));
}

TEST(TensorTest, ReshapeTransposeSlice) {
  eval::Literal r =
      TraceAndRun({F32({6})}, {{0, 1, 2, 3, 4, 5}}, [](Tracer&, std::vector<Tensor>& x) {
        return x[0].Reshape({2, -1}).Transpose({1, 0}).Slice(0, 1, 3);  // [[1,4],[2,5]]
      });
  EXPECT_EQ(r.shape, F32({2, 2}));
  EXPECT_EQ(r.values, (std::vector<double>{1, 4, 2, 5}));
}

TEST(TensorTest, IdentityReshapesAndTransposesBuildNothing) {
  Tracer tracer("t");
  Tensor x = tracer.Input("x", F32({2, 3}));
  EXPECT_EQ(x.Reshape({2, 3}).instruction(), x.instruction());
  EXPECT_EQ(x.Transpose({0, 1}).instruction(), x.instruction());
  EXPECT_EQ(x.Reshape({3, 2}).Reshape({2, 3}).instruction(), x.instruction());
  EXPECT_EQ(x.Slice(1, 0, 3).instruction(), x.instruction());
  EXPECT_EQ(x.BroadcastTo({2, 3}).instruction(), x.instruction());
}

TEST(TensorTest, WhereCompareIotaAndTake) {
  // Causal mask of a 3x3: keep j <= i, else -1.
  eval::Literal r = TraceAndRun(
      {F32({3, 3})}, {std::vector<double>(9, 5.0)}, [](Tracer& t, std::vector<Tensor>& x) {
        Tensor row = Iota(t, DType::kS32, {3, 3}, 0);
        Tensor col = Iota(t, DType::kS32, {3, 3}, 1);
        return Where(Compare(col, row, ir::CompareDirection::kLe), x[0], -1.0);
      });
  EXPECT_EQ(r.values, (std::vector<double>{5, -1, -1, 5, 5, -1, 5, 5, 5}));
  eval::Literal g =
      TraceAndRun({F32({3, 2}), Shape(DType::kS32, {2})}, {{0, 1, 10, 11, 20, 21}, {2, 0}},
                  [](Tracer&, std::vector<Tensor>& x) { return Take(x[0], x[1], 0); });
  EXPECT_EQ(g.shape, F32({2, 2}));
  EXPECT_EQ(g.values, (std::vector<double>{20, 21, 0, 1}));
}

TEST(TensorTest, UnaryMath) {
  eval::Literal r = TraceAndRun({F32({2})}, {{1, 4}}, [](Tracer&, std::vector<Tensor>& x) {
    return Sqrt(x[0]) + Rsqrt(x[0]) + Log(Exp(x[0])) + Tanh(x[0] * 0.0) +
           Maximum(x[0], 2.0 - x[0] * 0.0) - Minimum(x[0], x[0]);
  });
  EXPECT_NEAR(r.values[0], 1 + 1 + 1 + 0 + 2 - 1, 1e-12);
  EXPECT_NEAR(r.values[1], 2 + 0.5 + 4 + 0 + 4 - 4, 1e-12);
}

TEST(TensorTest, ConvertAndDtypeErrors) {
  Tracer tracer("t");
  Tensor x = tracer.Input("x", F32({2}));
  Tensor i = tracer.Input("i", Shape(DType::kS32, {2}));
  EXPECT_EQ(x.Convert(DType::kBF16).dtype(), DType::kBF16);
  EXPECT_FALSE((x + i).valid());
  EXPECT_EQ(tracer.error().message(), "add of f32[2] and s32[2]: dtypes differ");
}

TEST(TensorTest, ReshapeErrors) {
  Tracer tracer("t");
  Tensor x = tracer.Input("x", F32({2, 3}));
  EXPECT_FALSE(x.Reshape({4, -1}).valid());
  EXPECT_EQ(tracer.error().message(),
            "reshape of f32[2,3] to [4,-1]: cannot infer the -1 dimension");
}

TEST(TensorTest, UninitializedOperandIsAnError) {
  Tracer tracer("t");
  Tensor x = tracer.Input("x", F32({2}));
  Tensor nothing;
  EXPECT_FALSE((x + nothing).valid());
  EXPECT_EQ(tracer.error().message(), "add: operand 1 is an uninitialized Tensor");
}

}  // namespace
}  // namespace gptc::frontend
