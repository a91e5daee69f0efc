// Note [evaluation workspace]: evaluating through a Workspace gives the same
// results as fresh evaluations, and reuses the storage handed back.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "compiler/eval/evaluator.h"
#include "compiler/eval/value.h"
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

// x -> (exp(x) * x, sum(x)): arrays of more than a pooled buffer's minimum
// size, and a tuple result.
struct StepGraph {
  static constexpr int64_t kSize = 20000;
  Graph g;
  Shape shape{DType::kF32, {kSize}};
  Instruction* root;
  StepGraph() {
    Instruction* x = g.Param(0, shape, "x");
    Instruction* y = Must(g.b.Binary(Opcode::kMul, Must(g.b.Unary(Opcode::kExp, x)), x));
    Instruction* sum = Must(g.b.Reduce(x, {0}, ir::ReduceKind::kSum, DType::kF32));
    root = Must(g.b.Tuple({y, sum}));
  }
  Literal Input(double scale) const {
    std::vector<double> v = Range(shape);
    for (double& x : v) x = x * scale / kSize;
    return Lit(shape, v);
  }
};

TEST(WorkspaceTest, ResultsEqualFreshEvaluationsCallAfterCall) {
  StepGraph s;
  Workspace workspace;
  EvalOptions with;
  with.workspace = &workspace;
  for (int call = 0; call < 4; ++call) {
    const Literal input = s.Input(0.5 + call);
    Literal fresh = s.g.Run(s.root, {input});
    Literal reused = s.g.Run(s.root, {input}, with);
    ASSERT_EQ(reused.elements.size(), 2u);
    EXPECT_EQ(reused.elements[0].values, fresh.elements[0].values) << "call " << call;
    EXPECT_EQ(reused.elements[1].values, fresh.elements[1].values) << "call " << call;
    // Hand back what the caller is done with, as the CPU trainer does with
    // the state a step replaced: its storage (stale values) feeds the next result.
    workspace.Recycle(std::move(reused));
  }
}

TEST(WorkspaceTest, RecycledStorageIsReusedBySize) {
  Workspace workspace;
  Literal literal;
  literal.shape = Shape(DType::kF32, {1000});
  literal.values.assign(1000, 7.0);
  const double* storage = literal.values.data();
  workspace.Recycle(std::move(literal));
  EXPECT_EQ(workspace.TakeValues(999).size(), 999u);  // no kept vector of that size: new
  std::vector<double> taken = workspace.TakeValues(1000);
  EXPECT_EQ(taken.data(), storage);
  EXPECT_NE(workspace.TakeValues(1000).data(), storage);  // handed out once only
}

// The CPU trainer's step: the state given up once converted, the results
// built in its storage, equal to an evaluation that keeps its arguments.
TEST(WorkspaceTest, EvaluateRecyclingBuildsTheResultsInTheArgumentsStorage) {
  StepGraph s;
  s.g.main->set_root(s.root);
  Workspace workspace;
  EvalOptions options;
  options.workspace = &workspace;
  const Literal input = s.Input(0.5);
  StatusOr<Literal> want = Evaluate(s.g.module, std::vector<Literal>{input}, options);
  ASSERT_TRUE(want.ok());
  std::vector<Literal> args = {input};
  const double* storage = args[0].values.data();
  StatusOr<Literal> got = EvaluateRecycling(s.g.module, args, {true}, options);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_TRUE(args[0].values.empty());
  ASSERT_EQ(got->elements.size(), 2u);
  EXPECT_EQ(got->elements[0].values, want->elements[0].values);
  EXPECT_EQ(got->elements[1].values, want->elements[1].values);
  EXPECT_EQ(got->elements[0].values.data(), storage);  // the argument's vector, reused
}

// Note [buffer pool]: a new size evicts kept buffers rather than let the
// held and handed-out buffers pass twice the most handed out at once.
TEST(WorkspaceTest, ThePoolStaysWithinTwiceItsLargestLiveSet) {
  auto pool = std::make_shared<internal::BufferPool>();
  constexpr size_t kMiB = size_t{1} << 20;
  {
    auto a = internal::BufferPool::Allocate(pool, 8 * kMiB);
    auto b = internal::BufferPool::Allocate(pool, 8 * kMiB);
  }
  EXPECT_EQ(pool->high_water(), 16 * kMiB);
  EXPECT_EQ(pool->pooled_bytes(), 16 * kMiB);
  {
    auto same = internal::BufferPool::Allocate(pool, 8 * kMiB);  // a kept one
    EXPECT_EQ(pool->pooled_bytes(), 8 * kMiB);
  }
  {
    // c fits beside the 16 kept (28 of 32); d would make 40: one kept 8 goes.
    auto c = internal::BufferPool::Allocate(pool, 12 * kMiB);
    auto d = internal::BufferPool::Allocate(pool, 12 * kMiB);
    EXPECT_EQ(pool->live_bytes(), 24 * kMiB);
    EXPECT_LE(pool->live_bytes() + pool->pooled_bytes(), 2 * pool->high_water());
    EXPECT_EQ(pool->pooled_bytes(), 8 * kMiB);
  }
  EXPECT_EQ(pool->live_bytes(), 0u);
}

}  // namespace
}  // namespace gptc::eval
