#include "passes/mixed_precision.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "models/config.h"
#include "models/gpt2.h"
#include "passes/autodiff.h"
#include "passes/train_step.h"
#include "runtime/cpu_device.h"
#include "runtime/init.h"
#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;
using ir::DType;
using ir::Opcode;

constexpr char kMlp[] = R"(module mlp
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %w1 = f32[8,16] parameter(1)
  %w2 = f32[16,8] parameter(2)
  %h = f32[4,16] dot(%x, %w1), lhs_contracting={1}, rhs_contracting={0}, meta="fc1"
  %t = f32[4,16] tanh(%h), meta="act"
  %y = f32[4,8] dot(%t, %w2), lhs_contracting={1}, rhs_contracting={0}, meta="fc2"
  %z = f32[4,16] dot(%x, %w1), lhs_contracting={1}, rhs_contracting={0}, meta="fc3"
  %r = f32[4] reduce(%z), dimensions={1}, kind=sum
  %s = f32[4] reduce(%y), dimensions={1}, kind=sum
  %u = f32[4] add(%r, %s)
  ROOT %l = f32[] reduce(%u), dimensions={0}, kind=sum
}
)";

MixedPrecision Pass(PrecisionPolicy policy) { return MixedPrecision({.policy = policy}); }

TEST(MixedPrecisionTest, PolicyNamesRoundTrip) {
  for (PrecisionPolicy p : {PrecisionPolicy::kF32, PrecisionPolicy::kBF16}) {
    EXPECT_EQ(ParsePrecisionPolicy(PrecisionPolicyName(p)), p);
  }
  EXPECT_EQ(ParsePrecisionPolicy("fp8"), std::nullopt);
}

TEST(MixedPrecisionTest, Bf16ConvertsDotOperandsAndKeepsF32Accumulation) {
  auto module = ParseOrDie(kMlp);
  ASSERT_NE(module, nullptr);
  MixedPrecision pass = Pass(PrecisionPolicy::kBF16);
  std::unique_ptr<ir::Module> after;
  // bf16 operands (8 significant bits): a few parts in a thousand on the sums.
  EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/3, /*rel_tol=*/2e-2));
  const ir::Computation* entry = after->entry();
  for (const char* name : {"h", "y", "z"}) {
    const ir::Instruction* dot = entry->FindInstruction(name);
    ASSERT_NE(dot, nullptr) << name;
    EXPECT_EQ(dot->shape().dtype(), DType::kF32) << name;  // f32 accumulation
    for (const ir::Instruction* op : dot->operands()) {
      EXPECT_EQ(op->opcode(), Opcode::kConvert) << name;
      EXPECT_EQ(op->shape().dtype(), DType::kBF16) << name;
    }
  }
  // One shared copy per value: %x and %w1 feed two dots but convert once.
  EXPECT_EQ(entry->FindInstruction("h")->operand(0), entry->FindInstruction("z")->operand(0));
  int converts = 0;
  for (const auto& inst : entry->instructions()) converts += inst->opcode() == Opcode::kConvert;
  EXPECT_EQ(converts, 4);  // x, w1, t, w2
  // Parameters (master weights) and the non-dot math stay f32.
  EXPECT_EQ(entry->FindInstruction("w1")->shape().dtype(), DType::kF32);
  EXPECT_EQ(entry->FindInstruction("t")->shape().dtype(), DType::kF32);
  EXPECT_EQ(entry->FindInstruction("x.bf16")->metadata(), "fc1");
}

TEST(MixedPrecisionTest, F32PolicyLeavesModuleAlone) {
  auto module = ParseOrDie(kMlp);
  ASSERT_NE(module, nullptr);
  MixedPrecision pass = Pass(PrecisionPolicy::kF32);
  std::unique_ptr<ir::Module> after;
  EXPECT_FALSE(RunPassAndCompare(pass, *module, after));
  EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));
}

TEST(MixedPrecisionTest, Bf16LeavesModulesWithoutF32DotsAlone) {
  // Already bf16 (and a second run of the pass): nothing to convert.
  auto module = ParseOrDie(R"(module done
ENTRY %main {
  %x = bf16[4,8] parameter(0)
  %w = bf16[8,8] parameter(1)
  %d = f32[4,8] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}
  %e = f32[4,8] exp(%d)
  ROOT %l = f32[] reduce(%e), dimensions={0,1}, kind=sum
}
)");
  ASSERT_NE(module, nullptr);
  MixedPrecision pass = Pass(PrecisionPolicy::kBF16);
  std::unique_ptr<ir::Module> after;
  EXPECT_FALSE(RunPassAndCompare(pass, *module, after));
  EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));

  auto mlp = ParseOrDie(kMlp);
  ASSERT_NE(mlp, nullptr);
  ASSERT_TRUE(pass.Run(*mlp).value());
  EXPECT_FALSE(pass.Run(*mlp).value());  // idempotent
}

// c_fc, its bias and the frontend's GELU at width N, then c_proj; `extra`
// adds a use of the pre-activation %pre besides the GELU's.
std::string GeluMlp(int n, bool extra = false) {
  std::string t = R"(module gelu_mlp
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %w1 = f32[8,$W] parameter(1)
  %b = f32[$W] parameter(2)
  %w2 = f32[$W,8] parameter(3)
  %h = f32[4,$W] dot(%x, %w1), lhs_contracting={1}, rhs_contracting={0}, meta="c_fc"
  %bb = f32[4,$W] broadcast(%b), dimensions={1}, meta="c_fc"
  %pre = f32[4,$W] add(%h, %bb), meta="c_fc"
  %m = f32[4,$W] mul(%pre, %pre), meta="gelu"
  %m1 = f32[4,$W] mul(%m, %pre), meta="gelu"
  %c0 = f32[] constant(0.044715)
  %b0 = f32[4,$W] broadcast(%c0), dimensions={}
  %m2 = f32[4,$W] mul(%b0, %m1), meta="gelu"
  %a = f32[4,$W] add(%pre, %m2), meta="gelu"
  %c1 = f32[] constant(0.7978846)
  %b1 = f32[4,$W] broadcast(%c1), dimensions={}
  %m3 = f32[4,$W] mul(%b1, %a), meta="gelu"
  %t = f32[4,$W] tanh(%m3), meta="gelu"
  %c2 = f32[] constant(1)
  %b2 = f32[4,$W] broadcast(%c2), dimensions={}
  %a1 = f32[4,$W] add(%b2, %t), meta="gelu"
  %c3 = f32[] constant(0.5)
  %b3 = f32[4,$W] broadcast(%c3), dimensions={}
  %m4 = f32[4,$W] mul(%b3, %pre), meta="gelu"
  %g = f32[4,$W] mul(%m4, %a1), meta="gelu"
  %y = f32[4,8] dot(%g, %w2), lhs_contracting={1}, rhs_contracting={0}, meta="c_proj"
  %l = f32[] reduce(%y), dimensions={0,1}, kind=sum
  ROOT %r = (f32[], f32[4,$W]) tuple(%l, %EXTRA)
}
)";
  for (size_t at; (at = t.find("$W")) != std::string::npos;) t.replace(at, 2, std::to_string(n));
  t.replace(t.find("%EXTRA"), 6, extra ? "%pre" : "%h");
  if (!extra) {
    t.replace(t.find("  ROOT %r = (f32[], f32[4,"), std::string::npos,
              "  ROOT %r = f32[] add(%l, %l)\n}\n");
  }
  return t;
}

// Note [bf16 GELU epilogue]: the GELU reads a widened bf16 copy of its
// input, and the bias is rounded through a bf16 copy too.
TEST(MixedPrecisionTest, GeluInputAndBiasGetBf16Copies) {
  auto module = ParseOrDie(GeluMlp(16));
  ASSERT_NE(module, nullptr);
  MixedPrecision pass = Pass(PrecisionPolicy::kBF16);
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/3, /*rel_tol=*/2e-2));
  const ir::Computation* entry = after->entry();
  const ir::Instruction* pre = entry->FindInstruction("pre");
  const ir::Instruction* pre_bf16 = entry->FindInstruction("pre.bf16");
  const ir::Instruction* pre_f32 = entry->FindInstruction("pre.f32");
  ASSERT_NE(pre_bf16, nullptr) << ir::PrintModule(*after);
  ASSERT_NE(pre_f32, nullptr);
  EXPECT_EQ(pre_bf16->shape().dtype(), DType::kBF16);
  EXPECT_EQ(pre_bf16->operand(0), pre);
  EXPECT_EQ(pre_f32->operand(0), pre_bf16);
  EXPECT_EQ(pre->users(), std::vector<ir::Instruction*>{const_cast<ir::Instruction*>(pre_bf16)});
  for (const char* name : {"m", "m1", "a", "m4"}) {
    const ir::Instruction* op = entry->FindInstruction(name);
    for (const ir::Instruction* o : op->operands()) EXPECT_NE(o, pre) << name;
  }
  // %pre = add(%h, broadcast(convert<f32>(convert<bf16>(%b)))).
  const ir::Instruction* bias = pre->operand(1)->operand(0);
  EXPECT_EQ(bias->name(), "b.f32");
  EXPECT_EQ(bias->operand(0)->name(), "b.bf16");
  EXPECT_EQ(bias->operand(0)->shape().dtype(), DType::kBF16);
  EXPECT_EQ(bias->operand(0)->operand(0), entry->FindInstruction("b"));
  EXPECT_EQ(entry->FindInstruction("bb"), nullptr);  // the old broadcast is gone
  EXPECT_EQ(pre_bf16->metadata(), "c_fc");
  // The activation is a dot operand as ever.
  EXPECT_EQ(entry->FindInstruction("y")->operand(0)->name(), "g.bf16");
  EXPECT_FALSE(pass.Run(*after).value());
}

TEST(MixedPrecisionTest, GeluInputStaysF32WhenTheEpilogueCannotTakeIt) {
  MixedPrecision pass = Pass(PrecisionPolicy::kBF16);
  // Something besides the GELU reads %pre; and a width cuBLASLt's aux
  // leading dimension cannot have (not a multiple of 8).
  for (const std::string& text : {GeluMlp(16, /*extra=*/true), GeluMlp(12)}) {
    auto module = ParseOrDie(text);
    ASSERT_NE(module, nullptr);
    std::unique_ptr<ir::Module> after;
    EXPECT_TRUE(RunPassAndCompare(pass, *module, after, /*trials=*/1, /*rel_tol=*/2e-2));
    EXPECT_EQ(after->entry()->FindInstruction("pre.bf16"), nullptr) << text;
    EXPECT_EQ(after->entry()->FindInstruction("b.bf16"), nullptr) << text;
  }
}

// gpt2-tiny narrowed to width 32, batch 2, seq 16: small enough for the evaluator.
frontend::TracedModule TraceTiny() {
  models::GptConfig config = models::FindGptConfig("gpt2-tiny").value();
  models::ConfigOverrides narrow;
  narrow.width = 32;
  config = models::ApplyOverrides(config, narrow);
  StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(config, 2, 16);
  EXPECT_TRUE(traced.ok()) << traced.status().message();
  return std::move(traced).value();
}

// The initial parameters (as the trainer makes them) and one pattern batch.
std::vector<eval::Literal> TinyArgs(const frontend::TracedModule& traced) {
  std::vector<eval::Literal> args;
  for (size_t i = 0; i < traced.params.size(); ++i) {
    eval::Literal p = eval::Literal::Zeros(traced.params[i].shape);
    std::vector<float> init = rt::InitParameter(traced.params[i], /*seed=*/7, i);
    p.values.assign(init.begin(), init.end());
    args.push_back(std::move(p));
  }
  rt::MicroBatch batch = rt::PatternBatch(2, 16, models::kGpt2Vocab, 0);
  for (const std::vector<int32_t>* ids : {&batch.tokens, &batch.targets}) {
    eval::Literal l = eval::Literal::Zeros(ir::Shape(DType::kS32, {2, 16}));
    l.values.assign(ids->begin(), ids->end());
    args.push_back(std::move(l));
  }
  return args;
}

TEST(MixedPrecisionTest, Gpt2TinyLossMatchesF32AndGradientsStayF32) {
  frontend::TracedModule traced = TraceTiny();
  std::unique_ptr<ir::Module> bf16 = traced.module->Clone();
  MixedPrecision pass = Pass(PrecisionPolicy::kBF16);
  ASSERT_TRUE(pass.Run(*bf16).value());
  ASSERT_TRUE(ir::VerifyModule(*bf16).ok());

  // Every dot of the entry takes bf16 operands and accumulates in f32, and
  // so do those of the attention's decomposition (Note [bf16 attention]);
  // the frontend's f32 decomposition it replaced is left unused.
  std::set<const ir::Computation*> rounded;
  for (const auto& inst : bf16->entry()->instructions()) {
    if (inst->opcode() != Opcode::kAttention) continue;
    EXPECT_EQ(inst->attrs().grad_dtype, DType::kBF16);
    rounded.insert(inst->called_computation());
  }
  EXPECT_EQ(rounded.size(), 1u);
  int dots = 0;
  for (const auto& computation : bf16->computations()) {
    for (const auto& inst : computation->instructions()) {
      if (inst->opcode() != Opcode::kDot) continue;
      // The lm_head logits are stored in bf16 (Note [bf16 logits]).
      bool logits = inst->metadata() == "lm_head";
      EXPECT_EQ(inst->shape().dtype(), logits ? DType::kBF16 : DType::kF32) << inst->name();
      DType want = computation.get() == bf16->entry() || rounded.count(computation.get())
                       ? DType::kBF16
                       : DType::kF32;
      EXPECT_EQ(inst->operand(0)->shape().dtype(), want) << inst->name();
      dots += computation.get() == bf16->entry();
    }
  }
  EXPECT_EQ(dots, 2 * 4 + 1);  // 4 linears a block, 2 blocks, the lm_head
  // The cross-entropy still computes in f32 on the widened bf16 logits.
  for (const auto& inst : bf16->entry()->instructions()) {
    if (inst->opcode() != Opcode::kSoftmaxCrossEntropy) continue;
    const ir::Instruction* widen = inst->operand(0);
    EXPECT_EQ(widen->opcode(), Opcode::kConvert);
    EXPECT_EQ(widen->shape().dtype(), DType::kF32);
    EXPECT_EQ(widen->operand(0)->opcode(), Opcode::kDot);
    EXPECT_EQ(widen->operand(0)->shape().dtype(), DType::kBF16);
    EXPECT_EQ(widen->operand(0)->name(), "lm_head.dot.bf16");
  }
  {
    std::unique_ptr<ir::Module> again = bf16->Clone();
    EXPECT_FALSE(pass.Run(*again).value());  // idempotent with bf16 logits too
  }
  for (const ir::Instruction* p : bf16->entry()->parameters()) {
    EXPECT_NE(p->shape().dtype(), DType::kBF16) << p->name();  // f32 master weights
  }

  std::vector<eval::Literal> args = TinyArgs(traced);
  StatusOr<eval::Literal> f32_loss = eval::Evaluate(*traced.module, args);
  StatusOr<eval::Literal> bf16_loss = eval::Evaluate(*bf16, args);
  ASSERT_TRUE(f32_loss.ok()) << f32_loss.status().message();
  ASSERT_TRUE(bf16_loss.ok()) << bf16_loss.status().message();
  EXPECT_NEAR(bf16_loss->values[0], f32_loss->values[0], 2e-2 * f32_loss->values[0]);
  EXPECT_NE(bf16_loss->values[0], f32_loss->values[0]);  // bf16 really is used

  // Autodiff differentiates through the converts: gradients come out f32.
  Autodiff autodiff;
  ASSERT_TRUE(autodiff.Run(*bf16).value());
  const ir::Shape& root = bf16->entry()->root()->shape();
  ASSERT_TRUE(root.is_tuple());
  for (const ir::Shape& element : root.tuple_elements()) {
    EXPECT_EQ(element.dtype(), DType::kF32) << element.ToString();
  }
}

// Note [bf16 attention projection]: each layer's qkv projection is rounded
// to bf16 where its gemm writes it (bias rounded too), and q, k, v are
// slices of that bf16 value, widened only where the attention takes them.
TEST(MixedPrecisionTest, AttentionProjectionIsStoredInBf16) {
  frontend::TracedModule traced = TraceTiny();
  MixedPrecision pass = Pass(PrecisionPolicy::kBF16);
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(pass, *traced.module, after, /*trials=*/1, /*rel_tol=*/2e-2));
  const ir::Computation* entry = after->entry();
  for (int layer = 0; layer < 2; ++layer) {
    SCOPED_TRACE(layer);
    const std::string prefix = fmt::format("h.{}.attn.c_attn.", layer);
    const ir::Instruction* y = entry->FindInstruction(prefix + "add");
    const ir::Instruction* y_bf16 = entry->FindInstruction(prefix + "add.bf16");
    ASSERT_NE(y, nullptr);
    ASSERT_NE(y_bf16, nullptr) << ir::PrintModule(*after);
    EXPECT_EQ(y_bf16->shape().dtype(), DType::kBF16);
    EXPECT_EQ(y_bf16->operand(0), y);
    EXPECT_EQ(y->users(), std::vector<ir::Instruction*>{const_cast<ir::Instruction*>(y_bf16)});
    // %y = add(%dot, broadcast(convert<f32>(convert<bf16>(%bias)))).
    const ir::Instruction* bias = y->operand(1)->operand(0);
    EXPECT_EQ(bias->name(), prefix + "bias.f32");
    EXPECT_EQ(bias->operand(0)->shape().dtype(), DType::kBF16);
    // Every slice of the projection is bf16, and the attention reads each
    // of q, k, v as the widening of a bf16 transpose.
    for (const ir::Instruction* u : y_bf16->users()) {
      EXPECT_EQ(u->opcode(), Opcode::kSlice);
      EXPECT_EQ(u->shape().dtype(), DType::kBF16);
    }
  }
  int attentions = 0;
  for (const auto& inst : entry->instructions()) {
    if (inst->opcode() != Opcode::kAttention) continue;
    ++attentions;
    for (const ir::Instruction* op : inst->operands()) {
      EXPECT_EQ(op->opcode(), Opcode::kConvert) << op->name();
      EXPECT_EQ(op->shape().dtype(), DType::kF32);
      EXPECT_EQ(op->operand(0)->opcode(), Opcode::kTranspose);
      EXPECT_EQ(op->operand(0)->shape().dtype(), DType::kBF16);
    }
  }
  EXPECT_EQ(attentions, 2);
  EXPECT_FALSE(pass.Run(*after).value());  // idempotent
}

// Something besides the attention reads the projection: it stays f32.
TEST(MixedPrecisionTest, AttentionProjectionStaysF32WhenSomethingElseReadsIt) {
  frontend::TracedModule traced = TraceTiny();
  ir::Computation* entry = traced.module->entry();
  ir::Instruction* y = entry->FindInstruction("h.0.attn.c_attn.add");
  ASSERT_NE(y, nullptr);
  ir::Builder b(entry);
  ir::Attrs sum;
  sum.dimensions = {0, 1, 2};
  sum.reduce_kind = ir::ReduceKind::kSum;
  StatusOr<ir::Instruction*> extra = b.Build(Opcode::kReduce, {y}, sum, {});
  ASSERT_TRUE(extra.ok()) << extra.status().message();
  StatusOr<ir::Instruction*> root = b.Build(Opcode::kAdd, {entry->root(), *extra}, {}, {});
  ASSERT_TRUE(root.ok()) << root.status().message();
  entry->set_root(*root);
  MixedPrecision pass = Pass(PrecisionPolicy::kBF16);
  ASSERT_TRUE(pass.Run(*traced.module).value());
  EXPECT_EQ(traced.module->entry()->FindInstruction("h.0.attn.c_attn.add.bf16"), nullptr);
  EXPECT_NE(traced.module->entry()->FindInstruction("h.1.attn.c_attn.add.bf16"), nullptr);
}

// Trains gpt2-tiny (narrowed) for 20 AdamW steps in both precisions on the CPU
// device, from the same initialization and data: the loss curves agree.
TEST(MixedPrecisionTest, Gpt2TinyTrainingCurvesAgree) {
  constexpr int kSteps = 20;
  std::vector<std::vector<double>> curves;
  for (PrecisionPolicy policy : {PrecisionPolicy::kF32, PrecisionPolicy::kBF16}) {
    frontend::TracedModule traced = TraceTiny();
    MixedPrecision pass = Pass(policy);
    ASSERT_TRUE(pass.Run(*traced.module).ok());
    StatusOr<TrainProgram> program = BuildTrainProgram(std::move(traced.module), traced.params,
                                                       traced.inputs, TrainStepOptions{});
    ASSERT_TRUE(program.ok()) << program.status().message();
    rt::CpuTrainer trainer(&*program, /*seed=*/1);
    std::vector<double> losses;
    for (int step = 1; step <= kSteps; ++step) {
      rt::MicroBatch batch = rt::PatternBatch(2, 16, models::kGpt2Vocab, step);
      StatusOr<rt::StepResult> r = trainer.Step({&batch, 1}, /*lr=*/3e-3);
      ASSERT_TRUE(r.ok()) << r.status().message();
      losses.push_back(r->loss);
    }
    curves.push_back(losses);
  }
  const std::vector<double>& f32 = curves[0];
  const std::vector<double>& bf16 = curves[1];
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_NEAR(bf16[i], f32[i], 0.05 * f32[i]) << "step " << i + 1;
  }
  EXPECT_LT(f32.back(), 0.8 * f32.front());
  EXPECT_LT(bf16.back(), 0.8 * bf16.front());
  std::string table;
  for (int i = 0; i < kSteps; ++i) table += fmt::format("{:.4f}/{:.4f} ", f32[i], bf16[i]);
  RecordProperty("losses_f32_bf16", table);
  std::printf("loss f32/bf16: %s\n", table.c_str());
}

}  // namespace
}  // namespace gptc::passes
