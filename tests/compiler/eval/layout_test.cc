// Data movement, tuples, called computations and the evaluator's error messages.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/module.h"
#include "tests/compiler/eval/eval_test_util.h"

namespace gptc::eval {
namespace {

using ir::DType;
using ir::Instruction;
using ir::Opcode;
using ir::Shape;

using testing::Graph;
using testing::Lit;
using testing::Must;
using testing::Range;

TEST(EvalLayoutTest, ParameterAndConstant) {
  Graph g;
  Shape s(DType::kF32, {2, 2});
  Instruction* x = g.Param(0, s);
  Literal out = g.Run(x, {Lit(s, {1, 2, 3, 4})});
  EXPECT_EQ(out.shape, s);
  EXPECT_EQ(out.values, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(g.Run(g.Const(s, {4, 3, 2, 1}), {Lit(s, {1, 2, 3, 4})}).values,
            (std::vector<double>{4, 3, 2, 1}));
}

TEST(EvalLayoutTest, Iota) {
  Graph g;
  Shape s(DType::kS32, {2, 3});
  EXPECT_EQ(g.Run(Must(g.b.Iota(s, 0))).values, (std::vector<double>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(g.Run(Must(g.b.Iota(s, 1))).values, (std::vector<double>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(g.Run(Must(g.b.Iota(Shape(DType::kF32, {3}), 0))).values,
            (std::vector<double>{0, 1, 2}));
}

TEST(EvalLayoutTest, Broadcast) {
  Graph g;
  Instruction* row = g.Const(Shape(DType::kF32, {3}), {1, 2, 3});
  EXPECT_EQ(g.Run(Must(g.b.Broadcast(row, {2, 3}, {1}))).values,
            (std::vector<double>{1, 2, 3, 1, 2, 3}));
  Instruction* col = g.Const(Shape(DType::kF32, {2}), {1, 2});
  EXPECT_EQ(g.Run(Must(g.b.Broadcast(col, {2, 3}, {0}))).values,
            (std::vector<double>{1, 1, 1, 2, 2, 2}));
  Instruction* scalar = g.Const(Shape::Scalar(DType::kF32), {7});
  EXPECT_EQ(g.Run(Must(g.b.Broadcast(scalar, {2, 2}, {}))).values,
            (std::vector<double>{7, 7, 7, 7}));
  // Operand dims land out of order: result[i,j,k] = x[k,i].
  Instruction* x = g.Const(Shape(DType::kF32, {2, 3}), {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(g.Run(Must(g.b.Broadcast(x, {3, 2, 2}, {2, 0}))).values,
            (std::vector<double>{1, 4, 1, 4, 2, 5, 2, 5, 3, 6, 3, 6}));
}

TEST(EvalLayoutTest, TransposeAndReshape) {
  Graph g;
  Instruction* x = g.Const(Shape(DType::kF32, {2, 3}), {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(g.Run(Must(g.b.Transpose(x, {1, 0}))).values, (std::vector<double>{1, 4, 2, 5, 3, 6}));
  Literal reshaped = g.Run(Must(g.b.Reshape(x, {3, 1, 2})));
  EXPECT_EQ(reshaped.shape, Shape(DType::kF32, {3, 1, 2}));
  EXPECT_EQ(reshaped.values, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(g.Run(Must(g.b.Unary(Opcode::kCopy, x))).values,
            (std::vector<double>{1, 2, 3, 4, 5, 6}));

  // Rank 3: result[a,b,c] = y[b,c,a] for permutation {2,0,1}.
  Shape s(DType::kF32, {2, 3, 4});
  Instruction* y = g.Const(s, Range(s));
  Literal t = g.Run(Must(g.b.Transpose(y, {2, 0, 1})));
  ASSERT_EQ(t.shape, Shape(DType::kF32, {4, 2, 3}));
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(t.values[a * 6 + b * 3 + c], b * 12 + c * 4 + a);
    }
  }
}

TEST(EvalLayoutTest, LargeTransposes) {
  // Big enough for the tiled transpose path (and for pooled buffers).
  Graph g;
  Shape s(DType::kF32, {3, 200, 70});
  Instruction* x = g.Const(s, Range(s));  // x[i,j,k] = 14000i + 70j + k
  Literal t = g.Run(Must(g.b.Transpose(x, {2, 1, 0})));
  ASSERT_EQ(t.shape, Shape(DType::kF32, {70, 200, 3}));
  for (int k = 0; k < 70; ++k) {
    for (int j = 0; j < 200; ++j) {
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(t.values[(k * 200 + j) * 3 + i], 14000 * i + 70 * j + k) << k << "," << j;
      }
    }
  }
  Literal u = g.Run(Must(g.b.Transpose(x, {0, 2, 1})));
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 70; ++k) {
      for (int j = 0; j < 200; ++j) {
        ASSERT_EQ(u.values[(i * 70 + k) * 200 + j], 14000 * i + 70 * j + k);
      }
    }
  }
}

TEST(EvalLayoutTest, ReusedBuffersDoNotAliasLiveValues) {
  // Values of 128 KiB go through the buffer pool; a chain where dead
  // buffers are recycled while others stay live must still be exact.
  Graph g;
  Shape s(DType::kF32, {256, 128});
  Instruction* x = g.Param(0, s);
  Instruction* a = Must(g.b.Binary(Opcode::kAdd, x, x));  // 2x
  Instruction* r = Must(g.b.Reshape(a, {128, 256}));      // shares a's buffer
  Instruction* b = Must(g.b.Binary(Opcode::kMul, a, a));  // 4x^2
  Instruction* c = Must(g.b.Binary(Opcode::kSub, b, a));  // 4x^2 - 2x
  Instruction* d = Must(g.b.Binary(Opcode::kAdd, c, x));  // 4x^2 - x
  Instruction* e = Must(g.b.Reshape(d, {128, 256}));
  Instruction* f = Must(g.b.Binary(Opcode::kSub, e, r));  // 4x^2 - 3x
  Literal arg = Literal::Zeros(s);
  for (size_t i = 0; i < arg.values.size(); ++i) arg.values[i] = static_cast<double>(i % 97);
  Literal out = g.Run(f, {arg});
  for (size_t i = 0; i < out.values.size(); ++i) {
    double v = arg.values[i];
    ASSERT_EQ(out.values[i], 4 * v * v - 3 * v) << i;
  }
}

TEST(EvalLayoutTest, SliceWithStride) {
  Graph g;
  Instruction* v = g.Const(Shape(DType::kF32, {10}), Range(Shape(DType::kF32, {10})));
  EXPECT_EQ(g.Run(Must(g.b.Slice(v, {1}, {8}, {3}))).values, (std::vector<double>{1, 4, 7}));
  Shape s(DType::kF32, {3, 4});
  Instruction* m = g.Const(s, Range(s));
  EXPECT_EQ(g.Run(Must(g.b.Slice(m, {0, 1}, {3, 4}, {2, 2}))).values,
            (std::vector<double>{1, 3, 9, 11}));
  EXPECT_EQ(g.Run(Must(g.b.Slice(m, {1, 0}, {2, 4}))).values, (std::vector<double>{4, 5, 6, 7}));
}

TEST(EvalLayoutTest, Pad) {
  Graph g;
  Instruction* x = g.Const(Shape(DType::kF32, {2, 2}), {1, 2, 3, 4});
  Instruction* nine = g.Const(Shape::Scalar(DType::kF32), {9});
  Literal out = g.Run(Must(g.b.Pad(x, nine, {1, 0}, {0, 1})));
  EXPECT_EQ(out.shape, Shape(DType::kF32, {3, 3}));
  EXPECT_EQ(out.values, (std::vector<double>{9, 9, 9, 1, 2, 9, 3, 4, 9}));
}

TEST(EvalLayoutTest, Concatenate) {
  Graph g;
  Instruction* a = g.Const(Shape(DType::kF32, {2, 1}), {1, 2});
  Instruction* b = g.Const(Shape(DType::kF32, {2, 2}), {3, 4, 5, 6});
  EXPECT_EQ(g.Run(Must(g.b.Concatenate({a, b}, 1))).values,
            (std::vector<double>{1, 3, 4, 2, 5, 6}));
  Instruction* c = g.Const(Shape(DType::kF32, {1, 2}), {7, 8});
  EXPECT_EQ(g.Run(Must(g.b.Concatenate({b, c}, 0))).values,
            (std::vector<double>{3, 4, 5, 6, 7, 8}));
}

TEST(EvalLayoutTest, TupleAndGetTupleElement) {
  Graph g;
  Instruction* a = g.Const(Shape(DType::kF32, {2}), {1, 2});
  Instruction* b = g.Const(Shape(DType::kS32, {1}), {3});
  Instruction* t = Must(g.b.Tuple({a, b}));
  Literal out = g.Run(t);
  ASSERT_TRUE(out.shape.is_tuple());
  ASSERT_EQ(out.elements.size(), 2u);
  EXPECT_EQ(out.elements[0].values, (std::vector<double>{1, 2}));
  EXPECT_EQ(out.elements[1].values, (std::vector<double>{3}));
  EXPECT_EQ(g.Run(Must(g.b.GetTupleElement(t, 1))).values, (std::vector<double>{3}));
}

TEST(EvalLayoutTest, FusionEvaluatesItsComputation) {
  Graph g;
  Shape s(DType::kF32, {2});
  // fused(p0, p1) = p0 + p1 * p1
  ir::Computation* fused = g.module.AddComputation("fused");
  ir::Builder fb(fused);
  Instruction* p0 = Must(fb.Parameter(0, s));
  Instruction* p1 = Must(fb.Parameter(1, s));
  fused->set_root(Must(fb.Binary(Opcode::kAdd, p0, Must(fb.Binary(Opcode::kMul, p1, p1)))));

  Instruction* x = g.Param(0, s);
  Instruction* y = g.Const(s, {3, -4});
  Instruction* fusion = Must(g.b.Fusion({x, y}, fused, ir::FusionKind::kLoop));
  EXPECT_EQ(g.Run(fusion, {Lit(s, {1, 2})}).values, (std::vector<double>{10, 18}));
}

TEST(EvalLayoutTest, CompositesEvaluateTheirDecomposition) {
  Graph g;
  Shape qkv(DType::kF32, {1, 1, 2, 1});
  ir::Computation* attn = g.module.AddComputation("attention_decomposition");
  {
    // Not real attention: the evaluator must simply run whatever the body says.
    ir::Builder ab(attn);
    Instruction* q = Must(ab.Parameter(0, qkv));
    Must(ab.Parameter(1, qkv));
    Instruction* v = Must(ab.Parameter(2, qkv));
    attn->set_root(Must(ab.Binary(Opcode::kSub, q, v)));
  }
  Instruction* q = g.Const(qkv, {5, 6});
  Instruction* v = g.Const(qkv, {1, 2});
  EXPECT_EQ(g.Run(Must(g.b.Attention(q, q, v, true, 0.5, attn))).values,
            (std::vector<double>{4, 4}));

  Shape logits_shape(DType::kF32, {2, 3});
  Shape targets_shape(DType::kS32, {2});
  ir::Computation* xent = g.module.AddComputation("xent_decomposition");
  {
    ir::Builder xb(xent);
    Instruction* logits = Must(xb.Parameter(0, logits_shape));
    Must(xb.Parameter(1, targets_shape));
    xent->set_root(Must(xb.Reduce(logits, {1}, ir::ReduceKind::kSum, DType::kF32)));
  }
  Instruction* logits = g.Const(logits_shape, {1, 2, 3, 4, 5, 6});
  Instruction* targets = g.Const(targets_shape, {0, 2});
  EXPECT_EQ(g.Run(Must(g.b.SoftmaxCrossEntropy(logits, targets, 0, xent))).values,
            (std::vector<double>{6, 15}));
}

TEST(EvalErrorTest, WrongArgumentCount) {
  Graph g;
  Instruction* x = g.Param(0, Shape(DType::kF32, {2}), "x");
  g.Param(1, Shape(DType::kF32, {2}), "y");
  StatusOr<Literal> out = g.TryRun(x, {Lit(Shape(DType::kF32, {2}), {1, 2})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "%main takes 2 arguments, got 1");
}

TEST(EvalErrorTest, WrongArgumentShapeNamesTheParameter) {
  Graph g;
  g.Param(0, Shape(DType::kF32, {2}), "x");
  Instruction* tokens = g.Param(1, Shape(DType::kS32, {4, 64}), "tokens");
  StatusOr<Literal> out = g.TryRun(
      tokens, {Lit(Shape(DType::kF32, {2}), {1, 2}), Lit(Shape(DType::kS32, {4}), {1, 2, 3, 4})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "parameter 1 (%tokens): expected s32[4,64], got s32[4]");
}

TEST(EvalErrorTest, MalformedLiteral) {
  Graph g;
  Instruction* x = g.Param(0, Shape(DType::kF32, {2}), "x");
  StatusOr<Literal> out = g.TryRun(x, {Lit(Shape(DType::kF32, {2}), {1, 2, 3})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "parameter 0 (%x): f32[2] literal has 3 values");
}

TEST(EvalErrorTest, MissingRootAndEntry) {
  Graph g;
  std::vector<Literal> none;
  StatusOr<Literal> out = Evaluate(g.module, none);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "%main has no root");
  ir::Module empty("empty");
  EXPECT_FALSE(Evaluate(empty, none).ok());
}

TEST(EvalErrorTest, ErrorInsideFusionNamesBothInstructions) {
  Graph g;
  Shape table(DType::kF32, {4});
  Shape idx(DType::kS32, {1});
  ir::Computation* fused = g.module.AddComputation("fused");
  ir::Builder fb(fused);
  Instruction* t = Must(fb.Parameter(0, table));
  Instruction* i = Must(fb.Parameter(1, idx));
  fused->set_root(Must(fb.Build(Opcode::kGather, {t, i}, {}, table, nullptr, "lookup")));

  Instruction* fusion =
      Must(g.b.Build(Opcode::kFusion, {g.Const(table, {1, 2, 3, 4}), g.Const(idx, {4})}, {},
                     Shape(), fused, "embed"));
  StatusOr<Literal> out = g.TryRun(fusion);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(),
            "%embed: %lookup: gather index 4 at indices[0] is out of range for axis 0 of size 4");
}

TEST(EvalErrorTest, DeadInstructionsAreNotEvaluated) {
  Graph g;
  Shape table(DType::kF32, {4});
  Must(g.b.Gather(g.Const(table, {1, 2, 3, 4}), g.Const(Shape(DType::kS32, {1}), {9}), 0));
  EXPECT_EQ(g.Run(g.Const(table, {1, 2, 3, 4})).values, (std::vector<double>{1, 2, 3, 4}));
}

TEST(EvalApiTest, EvaluateComputationRunsANonEntryComputation) {
  Graph g;
  Shape s = Shape::Scalar(DType::kF32);
  ir::Computation* twice = g.module.AddComputation("twice");
  ir::Builder tb(twice);
  Instruction* p = Must(tb.Parameter(0, s));
  twice->set_root(Must(tb.Binary(Opcode::kAdd, p, p)));
  std::vector<Literal> args = {Lit(s, {21})};
  EXPECT_EQ(Must(EvaluateComputation(*twice, args)).values, (std::vector<double>{42}));
}

}  // namespace
}  // namespace gptc::eval
