// Note [evaluation workspace]: evaluating through a Workspace gives the same
// results as fresh evaluations, and reuses the storage handed back.
#include <gtest/gtest.h>

#include <vector>

#include "compiler/eval/evaluator.h"
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

}  // namespace
}  // namespace gptc::eval
