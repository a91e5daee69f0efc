// The Builder infers result shapes, names instructions uniquely, stamps the
// metadata scope, and refuses ill-typed instructions with a message naming
// the would-be instruction and the scope.
#include "compiler/ir/builder.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "compiler/ir/module.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"

namespace gptc::ir {
namespace {

// Unwraps a successful build, recording a failure (and returning nullptr) otherwise.
Instruction* Ok(StatusOr<Instruction*> built) {
  EXPECT_TRUE(built.ok()) << built.status().message();
  return built.ok() ? *built : nullptr;
}

// The message of a build that must fail.
std::string ErrorOf(StatusOr<Instruction*> built) {
  EXPECT_FALSE(built.ok()) << "built " << PrintInstruction(**built);
  return built.ok() ? "" : built.status().message();
}

class BuilderTest : public ::testing::Test {
 protected:
  BuilderTest() : module_("m"), main_(module_.AddComputation("main")), b_(main_) {
    module_.set_entry(main_);
  }

  Module module_;
  Computation* main_;
  Builder b_;
};

TEST_F(BuilderTest, InfersShapesOfStructuralOps) {
  Instruction* x = Ok(b_.Parameter(0, Shape(DType::kBF16, {2, 3}), "x"));
  EXPECT_EQ(Ok(b_.Transpose(x, {1, 0}))->shape(), Shape(DType::kBF16, {3, 2}));
  EXPECT_EQ(Ok(b_.Reshape(x, {6}))->shape(), Shape(DType::kBF16, {6}));
  EXPECT_EQ(Ok(b_.Broadcast(x, {4, 2, 3}, {1, 2}))->shape(), Shape(DType::kBF16, {4, 2, 3}));
  EXPECT_EQ(Ok(b_.Slice(x, {0, 1}, {2, 3}, {2, 1}))->shape(), Shape(DType::kBF16, {1, 2}));
  EXPECT_EQ(Ok(b_.Slice(x, {0, 0}, {2, 3}, {1, 2}))->shape(), Shape(DType::kBF16, {2, 2}));
  Instruction* zero = Ok(b_.ScalarConstant(DType::kBF16, 0));
  EXPECT_EQ(Ok(b_.Pad(x, zero, {1, 0}, {2, 3}))->shape(), Shape(DType::kBF16, {5, 6}));
  EXPECT_EQ(Ok(b_.Concatenate({x, x, x}, 1))->shape(), Shape(DType::kBF16, {2, 9}));
  EXPECT_EQ(Ok(b_.Convert(x, DType::kF32))->shape(), Shape(DType::kF32, {2, 3}));
  EXPECT_EQ(Ok(b_.Compare(x, x, CompareDirection::kGe))->shape(), Shape(DType::kPred, {2, 3}));
  EXPECT_EQ(Ok(b_.Iota(Shape(DType::kS32, {4, 5}), 1))->shape(), Shape(DType::kS32, {4, 5}));
  EXPECT_TRUE(VerifyModule(module_).message().find("has no root") != std::string::npos);
  main_->set_root(x);
  EXPECT_TRUE(VerifyModule(module_).ok()) << VerifyModule(module_).message();
}

TEST_F(BuilderTest, InfersShapesOfReductionsAndContractions) {
  Instruction* a = Ok(b_.Parameter(0, Shape(DType::kBF16, {8, 4, 16, 32}), "a"));
  Instruction* w = Ok(b_.Parameter(1, Shape(DType::kBF16, {8, 4, 32, 64}), "w"));
  // [batch..., lhs free..., rhs free...] with an f32 accumulator.
  Instruction* d = Ok(b_.Dot(a, w, {{0, 1}, {0, 1}, {3}, {2}}, DType::kF32));
  EXPECT_EQ(d->shape(), Shape(DType::kF32, {8, 4, 16, 64}));
  // Batch dims need not lead: the result still starts with them.
  Instruction* t = Ok(b_.Transpose(w, {2, 0, 1, 3}));  // (32, 8, 4, 64)
  EXPECT_EQ(Ok(b_.Dot(a, t, {{0, 1}, {1, 2}, {3}, {0}}, DType::kBF16))->shape(),
            Shape(DType::kBF16, {8, 4, 16, 64}));
  EXPECT_EQ(Ok(b_.Reduce(a, {1, 3}, ReduceKind::kSum, DType::kF32))->shape(),
            Shape(DType::kF32, {8, 16}));
  EXPECT_EQ(Ok(b_.Reduce(a, {0, 1, 2, 3}, ReduceKind::kMax, DType::kBF16))->shape(),
            Shape::Scalar(DType::kBF16));
  EXPECT_EQ(Ok(b_.AllReduce(a, ReduceKind::kSum))->shape(), a->shape());

  Instruction* table = Ok(b_.Parameter(2, Shape(DType::kF32, {50, 16}), "table"));
  Instruction* ids = Ok(b_.Parameter(3, Shape(DType::kS32, {4, 7}), "ids"));
  Instruction* g = Ok(b_.Gather(table, ids, 0));
  EXPECT_EQ(g->shape(), Shape(DType::kF32, {4, 7, 16}));
  EXPECT_EQ(Ok(b_.ScatterAdd(table, ids, g, 0))->shape(), table->shape());
  EXPECT_EQ(Ok(b_.Gather(table, ids, 1))->shape(), Shape(DType::kF32, {50, 4, 7}));

  Instruction* tuple = Ok(b_.Tuple({d, g, ids}));
  EXPECT_EQ(tuple->shape(), Shape::Tuple({d->shape(), g->shape(), ids->shape()}));
  EXPECT_EQ(Ok(b_.GetTupleElement(tuple, 1))->shape(), g->shape());
  main_->set_root(tuple);
  EXPECT_TRUE(VerifyModule(module_).ok()) << VerifyModule(module_).message();
}

TEST(BuilderCallTest, CallingOpsTakeTheShapeOfTheirCallee) {
  // Callees are added first: a computation is defined before its callers.
  Module module("m");
  Computation* fused = module.AddComputation("fused");
  Builder fb(fused);
  Instruction* p = Ok(fb.Parameter(0, Shape(DType::kF32, {2, 3}), "p"));
  fused->set_root(Ok(fb.Reduce(p, {1}, ReduceKind::kSum, DType::kF32)));

  Computation* sce = module.AddComputation("sce");
  Builder sb(sce);
  Instruction* l = Ok(sb.Parameter(0, Shape(DType::kF32, {3, 5, 11}), "l"));
  Ok(sb.Parameter(1, Shape(DType::kS32, {3, 5}), "t"));
  sce->set_root(Ok(sb.Reduce(l, {2}, ReduceKind::kMax, DType::kF32)));

  Computation* main = module.AddComputation("main");
  module.set_entry(main);
  Builder b(main);
  Instruction* x = Ok(b.Parameter(0, Shape(DType::kF32, {2, 3}), "x"));
  Instruction* f = Ok(b.Fusion({x}, fused, FusionKind::kReduction));
  EXPECT_EQ(f->shape(), Shape(DType::kF32, {2}));
  EXPECT_EQ(f->called_computation(), fused);
  EXPECT_EQ(f->attrs().fusion_kind, FusionKind::kReduction);
  Instruction* logits = Ok(b.Parameter(1, Shape(DType::kF32, {3, 5, 11}), "logits"));
  Instruction* targets = Ok(b.Parameter(2, Shape(DType::kS32, {3, 5}), "targets"));
  Instruction* loss = Ok(b.SoftmaxCrossEntropy(logits, targets, 10, sce));
  EXPECT_EQ(loss->shape(), Shape(DType::kF32, {3, 5}));
  EXPECT_EQ(loss->attrs().num_classes, 10);
  EXPECT_EQ(loss->called_computation(), sce);
  EXPECT_EQ(ErrorOf(b.SoftmaxCrossEntropy(logits, targets, 12, sce)),
            "%softmax-cross-entropy.1 (softmax-cross-entropy): num_classes 12 out of range for "
            "11 classes");
  main->set_root(Ok(b.Tuple({f, loss})));
  EXPECT_TRUE(VerifyModule(module).ok()) << VerifyModule(module).message();

  // The other order is caught by the verifier, naming the caller.
  Module wrong("w");
  Computation* entry = wrong.AddComputation("main");
  wrong.set_entry(entry);
  Computation* callee = wrong.AddComputation("callee");
  Builder cb(callee);
  callee->set_root(Ok(cb.Parameter(0, Shape(DType::kF32, {2}), "p")));
  Builder eb(entry);
  Instruction* y = Ok(eb.Parameter(0, Shape(DType::kF32, {2}), "y"));
  entry->set_root(Ok(eb.Fusion({y}, callee, FusionKind::kLoop)));
  EXPECT_EQ(VerifyModule(wrong).message(),
            "%fusion: calls %callee, which must be defined before %main");
}

TEST_F(BuilderTest, NamesAreUniqueAndMetadataIsStamped) {
  Instruction* x = Ok(b_.Parameter(0, Shape(DType::kF32, {4}), "x"));
  Instruction* x1 = Ok(b_.Parameter(1, Shape(DType::kF32, {4}), "x"));
  EXPECT_EQ(x1->name(), "x.1");
  b_.set_metadata("h.0.mlp");
  Instruction* a = Ok(b_.Binary(Opcode::kAdd, x, x1));
  Instruction* a1 = Ok(b_.Binary(Opcode::kAdd, a, x));
  b_.set_metadata("h.1.mlp");
  Instruction* a2 = Ok(b_.Binary(Opcode::kAdd, a1, x));
  EXPECT_EQ(a->name(), "add");
  EXPECT_EQ(a1->name(), "add.1");
  EXPECT_EQ(a2->name(), "add.2");
  EXPECT_EQ(x->metadata(), "");
  EXPECT_EQ(a->metadata(), "h.0.mlp");
  EXPECT_EQ(a1->metadata(), "h.0.mlp");
  EXPECT_EQ(a2->metadata(), "h.1.mlp");
  // Operands and users are wired both ways.
  EXPECT_EQ(a1->operands(), (std::vector<Instruction*>{a, x}));
  EXPECT_EQ(x->users(), (std::vector<Instruction*>{a, a1, a2}));

  // The insertion point puts new instructions before it, in order.
  b_.set_insertion_point(a1);
  Instruction* n = Ok(b_.Unary(Opcode::kNeg, a));
  Instruction* e = Ok(b_.Unary(Opcode::kExp, n));
  std::vector<std::string> order;
  for (const auto& inst : main_->instructions()) order.push_back(inst->name());
  EXPECT_EQ(order, (std::vector<std::string>{"x", "x.1", "add", "neg", "exp", "add.1", "add.2"}));
  EXPECT_EQ(e->metadata(), "h.1.mlp");
  main_->set_root(a2);
  EXPECT_TRUE(VerifyModule(module_).ok()) << VerifyModule(module_).message();
}

TEST_F(BuilderTest, RejectsIllTypedOpsNamingInstructionAndScope) {
  Instruction* x = Ok(b_.Parameter(0, Shape(DType::kF32, {2}), "x"));
  Instruction* y = Ok(b_.Parameter(1, Shape(DType::kF32, {3}), "y"));
  b_.set_metadata("h.3.mlp");
  EXPECT_EQ(ErrorOf(b_.Binary(Opcode::kAdd, x, y)),
            "h.3.mlp %add (add): add operands differ: f32[2] vs f32[3]");
  // Nothing was added, so the name is still free.
  EXPECT_EQ(main_->instruction_count(), 2);
  EXPECT_EQ(Ok(b_.Binary(Opcode::kAdd, x, x))->name(), "add");
  // The next failure gets the next unique name.
  EXPECT_EQ(ErrorOf(b_.Binary(Opcode::kMul, x, y)),
            "h.3.mlp %mul (mul): mul operands differ: f32[2] vs f32[3]");
  EXPECT_EQ(ErrorOf(b_.Binary(Opcode::kAdd, x, y)),
            "h.3.mlp %add.1 (add): add operands differ: f32[2] vs f32[3]");

  b_.set_metadata("h.3.attn.qkv");
  Instruction* m = Ok(b_.Parameter(2, Shape(DType::kBF16, {16, 768}), "m"));
  Instruction* w = Ok(b_.Parameter(3, Shape(DType::kBF16, {2304, 768}), "w"));
  EXPECT_EQ(ErrorOf(b_.Dot(m, w, {{}, {}, {1}, {0}}, DType::kF32)),
            "h.3.attn.qkv %dot (dot): dot contracting dim 1 has size 768, rhs dim 0 has size "
            "2304");

  b_.set_metadata("");
  EXPECT_EQ(ErrorOf(b_.Reshape(x, {3})),
            "%reshape (reshape): reshape of f32[2] to f32[3] changes the element count");
  EXPECT_EQ(ErrorOf(b_.Broadcast(y, {3, 2}, {1})),
            "%broadcast (broadcast): broadcast operand dim 0 (size 3) maps to result dim 1 of "
            "size 2");
  EXPECT_EQ(ErrorOf(b_.Transpose(m, {0, 2})),
            "%transpose (transpose): transpose dimension 2 out of range for rank 2");
  EXPECT_EQ(ErrorOf(b_.Unary(Opcode::kLog, Ok(b_.Iota(Shape(DType::kS32, {2}), 0)))),
            "%log (log): log needs a float operand, got s32[2]");
  EXPECT_EQ(ErrorOf(b_.Select(x, x, x)),
            "%select (select): select predicate must be pred, got f32[2]");
  EXPECT_EQ(ErrorOf(b_.GetTupleElement(x, 0)),
            "%get-tuple-element (get-tuple-element): get-tuple-element of non-tuple f32[2]");
  EXPECT_EQ(ErrorOf(b_.ScalarConstant(DType::kS32, 0.5, "half")),
            "%half (constant): constant value 0.5 at index 0 is not exact in s32");
  EXPECT_EQ(ErrorOf(b_.ScalarConstant(DType::kBF16, 0.1)),
            "%constant (constant): constant value 0.1 at index 0 is not exact in bf16");
  EXPECT_EQ(ErrorOf(b_.Constant(Shape(DType::kF32, {3}), {1, 2})),
            "%constant (constant): constant has 2 values but f32[3] holds 3");
  EXPECT_EQ(ErrorOf(b_.Slice(x, {0}, {3})),
            "%slice (slice): slice range [0:3] of dim 0 out of bounds for size 2");
  EXPECT_EQ(ErrorOf(b_.Concatenate({}, 0)),
            "%concatenate (concatenate): concatenate needs at least one operand");

  Computation* fused = module_.AddComputation("fused");
  Builder fb(fused);
  fused->set_root(Ok(fb.Parameter(0, Shape(DType::kF32, {3}), "p")));
  EXPECT_EQ(ErrorOf(b_.Fusion({x}, fused, FusionKind::kLoop)),
            "%fusion (fusion): operand 0 has shape f32[2] but %fused parameter 0 is f32[3]");
  EXPECT_EQ(ErrorOf(b_.Fusion({y}, nullptr, FusionKind::kLoop)),
            "%fusion (fusion): needs a called computation (calls=%name)");

  // Opcodes of the wrong kind for Unary/Binary are refused outright.
  EXPECT_EQ(ErrorOf(b_.Unary(Opcode::kAdd, x)), "add is not a unary op");
  EXPECT_EQ(ErrorOf(b_.Binary(Opcode::kExp, x, x)), "exp is not a binary op");
  // Only the successful builds were added: x, y, add, m, w, iota.
  EXPECT_EQ(main_->instruction_count(), 6);
}

TEST_F(BuilderTest, BuiltModuleRoundTripsThroughText) {
  Instruction* x = Ok(b_.Parameter(0, Shape(DType::kF32, {2, 2}), "x"));
  b_.set_metadata("scope \"q\"");
  Instruction* c = Ok(b_.Constant(Shape(DType::kF32, {2, 2}), {0.1f, -0.0, 1e-45f, 3}));
  main_->set_root(Ok(b_.Binary(Opcode::kPow, x, c)));
  EXPECT_EQ(PrintModule(module_), R"(module m

ENTRY %main {
  %x = f32[2,2] parameter(0)
  %constant = f32[2,2] constant({0.1, -0, 1e-45, 3}), meta="scope \"q\""
  ROOT %pow = f32[2,2] pow(%x, %constant), meta="scope \"q\""
}
)");
}

}  // namespace
}  // namespace gptc::ir
