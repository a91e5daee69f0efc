// The tracer: scopes and metadata, parameter naming and numbering, the
// first-error discipline, decomposition sharing.
#include "frontend/tracer.h"

#include <gtest/gtest.h>

#include "compiler/ir/printer.h"
#include "frontend/nn.h"

namespace gptc::frontend {
namespace {

using ir::DType;
using ir::Shape;

// The layer is typed (the role), not read back from the scope's name: a
// block scope named anything carries it, inner scopes inherit it, and
// scopes without one (and the inputs) are forward of no layer.
TEST(TracerTest, LayerScopesGiveTheRoleItsLayer) {
  Tracer tracer("m");
  Tensor x = tracer.Input("x", Shape(DType::kF32, {2, 4}), program::SlotRole::kTokens);
  EXPECT_EQ(x.instruction()->role(), (ir::Role{ir::Phase::kForward, -1}));
  Tensor y = x, z;
  {
    auto block = tracer.LayerScope("block_seven", 7);
    auto mlp = tracer.Scope("mlp");
    y = Linear(tracer, "fc", x, 4, InitRule::Normal(0.02));
    EXPECT_EQ(y.instruction()->metadata(), "block_seven.mlp.fc");
    EXPECT_EQ(y.instruction()->role(), (ir::Role{ir::Phase::kForward, 7}));
    {
      auto inner = tracer.LayerScope("h.2", 2);  // the innermost layer wins
      z = y + y;
      EXPECT_EQ(z.instruction()->role().layer, 2);
    }
  }
  Tensor out = z + x;
  EXPECT_EQ(out.instruction()->role(), (ir::Role{ir::Phase::kForward, -1}));
  StatusOr<TracedModule> traced = tracer.Finish(out);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  ASSERT_EQ(traced->inputs.size(), 1u);
  EXPECT_EQ(traced->inputs[0].role, program::SlotRole::kTokens);
  EXPECT_EQ(traced->module->entry()->parameters()[0]->role().layer, 7);  // fc.weight

  Tracer bad("m");
  { auto scope = bad.LayerScope("h", -1); }
  EXPECT_EQ(bad.error().message(), "layer -1 of scope 'h' is outside [0, 32767]");
}

TEST(TracerTest, ScopesBecomeMetadataAndParameterNames) {
  Tracer tracer("m");
  Tensor x = tracer.Input("x", Shape(DType::kF32, {2, 4}));
  Tensor y;
  {
    auto h = tracer.Scope("h.3");
    EXPECT_EQ(tracer.scope_path(), "h.3");
    auto attn = tracer.Scope("attn");
    EXPECT_EQ(tracer.scope_path(), "h.3.attn");
    y = Linear(tracer, "c_attn", x, 6, InitRule::Normal(0.02));
    EXPECT_EQ(y.instruction()->metadata(), "h.3.attn.c_attn");
  }
  EXPECT_EQ(tracer.scope_path(), "");
  StatusOr<TracedModule> traced = tracer.Finish(y);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  ASSERT_EQ(traced->params.size(), 2u);
  EXPECT_EQ(traced->params[0].name, "h.3.attn.c_attn.weight");
  EXPECT_EQ(traced->params[0].shape, Shape(DType::kF32, {4, 6}));
  EXPECT_EQ(traced->params[0].init, InitRule::Normal(0.02));
  EXPECT_EQ(traced->params[1].name, "h.3.attn.c_attn.bias");
  EXPECT_EQ(traced->params[1].init, InitRule::Zeros());
  for (const auto& c : traced->module->computations()) {
    for (const auto& inst : c->instructions()) {
      EXPECT_FALSE(inst->metadata().empty()) << ir::PrintInstruction(*inst);
    }
  }
}

TEST(TracerTest, ParametersComeFirstThenInputsWhateverTheDeclarationOrder) {
  // Note [entry signature]: inputs declared before lazily declared parameters
  // are still numbered after them, and printed after them.
  Tracer tracer("m");
  Tensor a = tracer.Input("a", Shape(DType::kF32, {3}));
  Tensor w = tracer.Parameter("w", {3}, InitRule::Ones());
  Tensor b = tracer.Input("b", Shape(DType::kF32, {3}));
  Tensor z = (a + w) * b;
  Tensor v = tracer.Parameter("v", {3}, InitRule::Zeros());
  StatusOr<TracedModule> traced = tracer.Finish((z - v).Sum({0}));
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  const ir::Computation& entry = *traced->module->entry();
  std::vector<std::string> names;
  for (const ir::Instruction* p : entry.parameters()) names.push_back(p->name());
  EXPECT_EQ(names, (std::vector<std::string>{"w", "v", "a", "b"}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(entry.instructions()[i]->opcode(), ir::Opcode::kParameter);
    EXPECT_EQ(entry.instructions()[i]->attrs().index, i);
  }
  ASSERT_EQ(traced->inputs.size(), 2u);
  EXPECT_EQ(traced->inputs[1].name, "b");
  EXPECT_EQ(traced->ParameterValues(), 6);
}

TEST(TracerTest, FirstErrorNamesScopeAndOpAndLaterOpsAreInert) {
  Tracer tracer("m");
  Tensor x = tracer.Input("x", Shape(DType::kF32, {4, 64, 64}));
  Tensor w = tracer.Parameter("w", {32, 192}, InitRule::Normal(0.02));
  Tensor bad;
  {
    auto h = tracer.Scope("h.3");
    auto attn = tracer.Scope("attn");
    bad = Matmul(x, w);
  }
  EXPECT_FALSE(bad.valid());
  ASSERT_TRUE(tracer.failed());
  EXPECT_EQ(tracer.error().message(),
            "h.3.attn: matmul of f32[4,64,64] and f32[32,192]: contracting dims differ (64 vs 32)");
  // Nothing is built after the first error, and the error stays the first one.
  Tensor y = Exp(x) + bad;
  Tensor z = x.Reshape({7});
  EXPECT_FALSE(y.valid());
  EXPECT_FALSE(z.valid());
  StatusOr<TracedModule> traced = tracer.Finish(y);
  ASSERT_FALSE(traced.ok());
  EXPECT_EQ(traced.status().message(),
            "h.3.attn: matmul of f32[4,64,64] and f32[32,192]: contracting dims differ (64 vs 32)");
}

TEST(TracerTest, BroadcastErrorsNameTheShapes) {
  Tracer tracer("m");
  Tensor a = tracer.Input("a", Shape(DType::kF32, {2, 3}));
  Tensor b = tracer.Input("b", Shape(DType::kF32, {4}));
  auto s = tracer.Scope("mlp");
  Tensor c = a + b;
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(tracer.error().message(),
            "mlp: add of f32[2,3] and f32[4]: shapes do not broadcast (size 4 against 3)");
}

TEST(TracerTest, DuplicateParameterIsAnError) {
  Tracer tracer("m");
  auto s = tracer.Scope("ln");
  Tensor a = tracer.Parameter("weight", {3}, InitRule::Ones());
  Tensor b = tracer.Parameter("weight", {3}, InitRule::Ones());
  EXPECT_TRUE(a.valid());
  EXPECT_FALSE(b.valid());
  EXPECT_EQ(tracer.error().message(), "ln: parameter ln.weight declared twice");
}

TEST(TracerTest, BuilderErrorsAreReportedOnce) {
  Tracer tracer("m");
  Tensor x = tracer.Input("x", Shape(DType::kF32, {4, 4}));
  auto s = tracer.Scope("block");
  Tensor y = x.Slice(1, 2, 9);
  EXPECT_FALSE(y.valid());
  // The scope leads once; the builder's own copy of it is dropped.
  EXPECT_EQ(tracer.error().message().rfind("block: slice [2:9] of axis 1 of f32[4,4]: %block.slice", 0),
            0u)
      << tracer.error().message();
}

TEST(TracerTest, FinishDropsUnusedValuesButKeepsParameters) {
  Tracer tracer("m");
  Tensor x = tracer.Input("x", Shape(DType::kF32, {4}));
  EXPECT_TRUE(tracer.Parameter("p", {4}, InitRule::Zeros()).valid());
  Tensor dead = Exp(x) * 3.0;
  (void)dead;
  StatusOr<TracedModule> traced = tracer.Finish(Log(x));
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  const ir::Computation& entry = *traced->module->entry();
  EXPECT_EQ(entry.instruction_count(), 3);  // p, x, log
  EXPECT_EQ(entry.root()->opcode(), ir::Opcode::kLog);
  EXPECT_EQ(entry.parameters().size(), 2u);
}

TEST(TracerTest, IdenticalCompositesShareOneDecomposition) {
  Tracer tracer("m");
  Shape s(DType::kF32, {1, 2, 4, 8});
  Tensor q = tracer.Input("q", s);
  Tensor k = tracer.Input("k", s);
  Tensor v = tracer.Input("v", s);
  Tensor a = Attention(q, k, v, true, 0.125);
  Tensor b = Attention(a, k, v, true, 0.125);
  Tensor c = Attention(b, k, v, false, 0.125);  // different attributes
  StatusOr<TracedModule> traced = tracer.Finish(c.Sum({0, 1, 2, 3}));
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  const ir::Module& m = *traced->module;
  ASSERT_EQ(m.computations().size(), 3u);
  EXPECT_EQ(m.computations().back().get(), m.entry());  // callees come first
  EXPECT_EQ(a.instruction()->called_computation(), b.instruction()->called_computation());
  EXPECT_NE(a.instruction()->called_computation(), c.instruction()->called_computation());
  EXPECT_EQ(a.instruction()->called_computation()->root()->metadata(), "attention");
}

TEST(TracerTest, FinishTwiceIsAnError) {
  Tracer tracer("m");
  Tensor x = tracer.Input("x", Shape(DType::kF32, {4}));
  ASSERT_TRUE(tracer.Finish(Exp(x)).ok());
  StatusOr<TracedModule> again = tracer.Finish(x);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().message(), "m: Finish called twice");
}

}  // namespace
}  // namespace gptc::frontend
