#include "passes/fusion.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "compiler/analysis/fusion_report.h"
#include "compiler/analysis/kernel_count.h"
#include "models/config.h"
#include "models/gpt2.h"
#include "passes/registry.h"
#include "passes/remat.h"
#include "tests/testing/pass_harness.h"
#include "tests/testing/small_models.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ::gptc::testing::RunPassAndCompare;

// The fusion instructions of the entry, by kind.
int64_t Count(const ir::Module& m, const std::string& kind) {
  auto counts = analysis::CountKernels(m);
  return counts.contains(kind) ? counts.at(kind) : 0;
}

// The fusion of the entry that computes (or returns) the value named `name`.
const ir::Instruction* FusionOf(const ir::Module& m, const std::string& name) {
  for (const auto& inst : m.entry()->instructions()) {
    if (inst->opcode() != ir::Opcode::kFusion) continue;
    if (inst->called_computation()->FindInstruction(name) != nullptr &&
        inst->called_computation()->FindInstruction(name)->opcode() != ir::Opcode::kParameter) {
      return inst.get();
    }
  }
  return nullptr;
}

TEST(FusionTest, ElementwiseChainIsOneLoopKernel) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %b = f32[8] parameter(1)
  %bb = f32[4,8] broadcast(%b), dimensions={1}
  %a = f32[4,8] add(%x, %bb)
  %e = f32[4,8] exp(%a)
  %t = f32[8,4] transpose(%e), dimensions={1,0}
  ROOT %n = f32[8,4] neg(%t)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after));
  EXPECT_EQ(Count(*after, "loop"), 1);
  EXPECT_EQ(analysis::CountKernels(*after).size(), 1u);
}

TEST(FusionTest, GemmAbsorbsBiasAndGeluButNotAResidualAfterIt) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[2,4,8] parameter(0)
  %w = f32[8,8] parameter(1)
  %b = f32[8] parameter(2)
  %d = f32[2,4,8] dot(%x, %w), lhs_contracting={2}, rhs_contracting={0}
  %bb = f32[2,4,8] broadcast(%b), dimensions={2}
  %v = f32[2,4,8] add(%d, %bb)
  %m = f32[2,4,8] mul(%v, %v)
  %m1 = f32[2,4,8] mul(%m, %v)
  %c0 = f32[] constant(0.044715)
  %b0 = f32[2,4,8] broadcast(%c0), dimensions={}
  %m2 = f32[2,4,8] mul(%b0, %m1)
  %a = f32[2,4,8] add(%v, %m2)
  %c1 = f32[] constant(0.7978846)
  %b1 = f32[2,4,8] broadcast(%c1), dimensions={}
  %m3 = f32[2,4,8] mul(%b1, %a)
  %t = f32[2,4,8] tanh(%m3)
  %c2 = f32[] constant(1)
  %b2 = f32[2,4,8] broadcast(%c2), dimensions={}
  %a1 = f32[2,4,8] add(%b2, %t)
  %c3 = f32[] constant(0.5)
  %b3 = f32[2,4,8] broadcast(%c3), dimensions={}
  %m4 = f32[2,4,8] mul(%b3, %v)
  %g = f32[2,4,8] mul(%m4, %a1)
  ROOT %r = f32[2,4,8] add(%x, %g)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "gemm"), 1);
  // cuBLASLt adds C before the activation: the residual is a loop kernel.
  EXPECT_EQ(Count(*after, "loop"), 1) << ir::PrintModule(*after);
  EXPECT_EQ(FusionOf(*after, "g"), FusionOf(*after, "d"));
  EXPECT_NE(FusionOf(*after, "r"), FusionOf(*after, "d"));
}

TEST(FusionTest, LayerNormIsOneMultiOutputReduction) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[4,8] parameter(0)
  %g = f32[8] parameter(1)
  %s = f32[4] reduce(%x), dimensions={1}, kind=sum
  %n = f32[] constant(8)
  %nb = f32[4] broadcast(%n), dimensions={}
  %mean = f32[4] div(%s, %nb)
  %mb = f32[4,8] broadcast(%mean), dimensions={0}
  %xc = f32[4,8] sub(%x, %mb)
  %sq = f32[4,8] mul(%xc, %xc)
  %vs = f32[4] reduce(%sq), dimensions={1}, kind=sum
  %var = f32[4] div(%vs, %nb)
  %r = f32[4] rsqrt(%var)
  %rb = f32[4,8] broadcast(%r), dimensions={0}
  %y = f32[4,8] mul(%xc, %rb)
  %gb = f32[4,8] broadcast(%g), dimensions={1}
  %out = f32[4,8] mul(%y, %gb)
  ROOT %t = (f32[4,8], f32[4]) tuple(%out, %r)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "reduction"), 1);
  EXPECT_EQ(analysis::CountKernels(*after).size(), 1u) << ir::PrintModule(*after);
  const ir::Instruction* f = FusionOf(*after, "vs");
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->shape().is_tuple());  // multi-output: %out and %r
}

TEST(FusionTest, SiblingColumnSumsShareOneKernel) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %dy = f32[2,4,8] parameter(0)
  %xh = f32[2,4,8] parameter(1)
  %p = f32[2,4,8] mul(%dy, %xh)
  %dg = f32[8] reduce(%p), dimensions={0,1}, kind=sum
  %db = f32[8] reduce(%dy), dimensions={0,1}, kind=sum
  ROOT %t = (f32[8], f32[8]) tuple(%dg, %db)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "reduction"), 1);
  EXPECT_EQ(analysis::CountKernels(*after).size(), 1u);
}

TEST(FusionTest, BiasGradientJoinsTheWeightGradientGemm) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[2,4,8] parameter(0)
  %dy = f32[2,4,16] parameter(1)
  %dw = f32[8,16] dot(%x, %dy), lhs_contracting={0,1}, rhs_contracting={0,1}
  %db = f32[16] reduce(%dy), dimensions={0,1}, kind=sum
  ROOT %t = (f32[8,16], f32[16]) tuple(%dw, %db)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "gemm"), 1);
  EXPECT_EQ(analysis::CountKernels(*after).size(), 1u);
}

TEST(FusionTest, BiasGradientSeesThroughTheOperandConvert) {
  // Mixed precision: the gemm takes bf16 dy, the column sum reads f32 dy.
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = bf16[2,4,8] parameter(0)
  %dy = f32[2,4,16] parameter(1)
  %dy16 = bf16[2,4,16] convert(%dy)
  %dw = bf16[8,16] dot(%x, %dy16), lhs_contracting={0,1}, rhs_contracting={0,1}
  %dw32 = f32[8,16] convert(%dw)
  %db = f32[16] reduce(%dy), dimensions={0,1}, kind=sum
  ROOT %t = (f32[8,16], f32[16]) tuple(%dw32, %db)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "gemm"), 1);
  EXPECT_EQ(FusionOf(*after, "db"), FusionOf(*after, "dw"));
}

TEST(FusionTest, ParameterConvertsAreOneHorizontalKernel) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = bf16[4,8] parameter(0)
  %w1 = f32[8,8] parameter(1)
  %w2 = f32[8,8] parameter(2)
  %w1.bf16 = bf16[8,8] convert(%w1), phase=param_cast, layer=0, meta="h.0.fc1"
  %h = bf16[4,8] dot(%x, %w1.bf16), lhs_contracting={1}, rhs_contracting={0}, phase=forward, layer=0, meta="h.0.fc1"
  %w2.bf16 = bf16[8,8] convert(%w2), phase=param_cast, layer=0, meta="h.0.fc2"
  ROOT %y = bf16[4,8] dot(%h, %w2.bf16), lhs_contracting={1}, rhs_contracting={0}, phase=forward, layer=0, meta="h.0.fc2"
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "loop"), 1);
  EXPECT_EQ(Count(*after, "gemm"), 2);
  const ir::Instruction* f = FusionOf(*after, "w1.bf16");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f, FusionOf(*after, "w2.bf16"));
  EXPECT_EQ(f->metadata(), "parameters.bf16");
  EXPECT_EQ(f->role(), (ir::Role{ir::Phase::kParamCast}));  // counted for no layer
  EXPECT_EQ(analysis::KernelsPerLayer(*after).at(0), 2);
}

// A layer norm's backward from %dy, %xh (f32[2,4,8]) and %g (f32[8]): dx rows
// (a row sum of dy * g) and the dgamma / dbeta channel sums of the same
// [B, T, C] values; the entry's tail, after its parameters.
constexpr char kLayerNormBackward[] = R"(
  %gb = f32[2,4,8] broadcast(%g), dimensions={2}
  %dyg = f32[2,4,8] mul(%dy, %gb)
  %rs = f32[2,4] reduce(%dyg), dimensions={2}, kind=sum
  %rsb = f32[2,4,8] broadcast(%rs), dimensions={0,1}
  %dx = f32[2,4,8] sub(%dyg, %rsb)
  %dyx = f32[2,4,8] mul(%dy, %xh)
  %dgamma = f32[8] reduce(%dyx), dimensions={0,1}, kind=sum
  %dbeta = f32[8] reduce(%dy), dimensions={0,1}, kind=sum
  ROOT %t = (f32[2,4,8], f32[8], f32[8]) tuple(%dx, %dgamma, %dbeta)
}
)";

TEST(FusionTest, LayerNormBackwardChannelSumsJoinTheRowKernel) {
  // One kernel, like llm.c's layernorm_backward.
  auto module = ParseOrDie(std::string(R"(module m
ENTRY %main {
  %dy = f32[2,4,8] parameter(0)
  %xh = f32[2,4,8] parameter(1)
  %g = f32[8] parameter(2))") +
                           kLayerNormBackward);
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "reduction"), 1);
  EXPECT_EQ(analysis::CountKernels(*after).size(), 1u);
}

// Note [narrow gemm results]: the f32 widening of a bf16 dx gemm joins the
// layer-norm backward that reads it, so cuBLASLt writes bf16 (half the bytes)
// and the kernel reads that; dbeta's channel sum of the widened dy still
// joins the rows (they read what it computed).
TEST(FusionTest, NarrowGemmResultIsWidenedByItsReader) {
  auto module = ParseOrDie(std::string(R"(module m
ENTRY %main {
  %a = bf16[2,4,16] parameter(0)
  %w = bf16[16,8] parameter(1)
  %xh = f32[2,4,8] parameter(2)
  %g = f32[8] parameter(3)
  %d = bf16[2,4,8] dot(%a, %w), lhs_contracting={2}, rhs_contracting={0}
  %dy = f32[2,4,8] convert(%d))") +
                           kLayerNormBackward);
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "gemm"), 1);
  EXPECT_EQ(Count(*after, "reduction"), 1);
  EXPECT_EQ(analysis::CountKernels(*after).size(), 2u);
  const ir::Instruction* gemm = FusionOf(*after, "d");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->shape().dtype(), ir::DType::kBF16);
  const ir::Instruction* rows = FusionOf(*after, "dy");
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->attrs().fusion_kind, ir::FusionKind::kReduction);
}

// A remat clone (x-hat, recomputed for the backward) joins the backward's row
// kernel, not the forward's, which would otherwise store it for the backward.
TEST(FusionTest, ForwardRowKernelLeavesRematClonesToTheBackward) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[2,4,8] parameter(0)
  %w = f32[8,8] parameter(1)
  %s = f32[2,4] reduce(%x), dimensions={2}, kind=sum, meta="ln"
  %sb = f32[2,4,8] broadcast(%s), dimensions={0,1}, meta="ln"
  %d = f32[2,4,8] sub(%x, %sb), meta="ln"
  %y = f32[2,4,8] mul(%d, %d), meta="ln"
  %dy = f32[2,4,8] dot(%y, %w), lhs_contracting={2}, rhs_contracting={0}, meta="fc"
  %r = f32[2,4,8] mul(%d, %sb), phase=remat, meta="remat.ln"
  %p = f32[2,4,8] mul(%r, %dy), phase=gradient, meta="grad.ln"
  %g = f32[2,4] reduce(%p), dimensions={2}, kind=sum, phase=gradient, meta="grad.ln"
  ROOT %t = (f32[2,4,8], f32[2,4]) tuple(%y, %g)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  const ir::Instruction* clone = FusionOf(*after, "r");
  ASSERT_NE(clone, nullptr);
  EXPECT_EQ(clone, FusionOf(*after, "g"));
  EXPECT_NE(clone, FusionOf(*after, "y"));
}

// A reshape that no loop kernel takes is a view of its operand (buffer
// assignment aliases it): it stays unfused and launches nothing, where a
// kernel of its own would copy the gemm's result.
TEST(FusionTest, AReshapeAloneIsAViewNotAKernel) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %a = f32[2,4,16] parameter(0)
  %w = f32[16,8] parameter(1)
  %d = f32[2,4,8] dot(%a, %w), lhs_contracting={2}, rhs_contracting={0}
  %r = f32[2,4,2,4] reshape(%d)
  ROOT %s = f32[2,4,2] reduce(%r), dimensions={3}, kind=sum
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after));
  EXPECT_EQ(Count(*after, "loop"), 0);
  EXPECT_EQ(analysis::CountKernels(*after).size(), 2u);  // the gemm and the reduction
  const ir::Instruction* r = after->entry()->FindInstruction("r");
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(analysis::IsKernel(*r));
}

TEST(FusionTest, GradientSquareSumsAreOneHorizontalReduction) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %g1 = f32[4,8] parameter(0)
  %g2 = f32[8] parameter(1)
  %sq1 = f32[4,8] mul(%g1, %g1), phase=update, meta="optimizer.a"
  %s1 = f32[] reduce(%sq1), dimensions={0,1}, kind=sum, phase=update, meta="optimizer.a"
  %sq2 = f32[8] mul(%g2, %g2), phase=update, meta="optimizer.b"
  %s2 = f32[] reduce(%sq2), dimensions={0}, kind=sum, phase=update, meta="optimizer.b"
  %n = f32[] add(%s1, %s2), phase=optimizer, meta="grad_norm"
  %r = f32[] sqrt(%n), phase=update, meta="optimizer.b"
  %rb = f32[8] broadcast(%r), dimensions={}
  ROOT %u = f32[8] mul(%g2, %rb), phase=update, meta="optimizer.b"
}
)");
  // The optimizer fusion cannot hold the square sums (a value of other
  // metadata lies between them and the updates): they share one kernel.
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "reduction"), 1);
  EXPECT_EQ(Count(*after, "optimizer"), 1);
  const ir::Instruction* f = FusionOf(*after, "s1");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f, FusionOf(*after, "s2"));
  EXPECT_EQ(f, FusionOf(*after, "n"));
  EXPECT_EQ(f->metadata(), "optimizer.grad_norm");
}

TEST(FusionTest, AttentionOutputConvertAndQkvBiasJoinTheAttentionKernel) {
  StatusOr<models::GptConfig> config = models::FindGptConfig("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  config->width = 32;
  config->layers = 1;
  auto traced = models::TraceGpt2Forward(*config, 1, 8);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  std::unique_ptr<ir::Module> module = std::move(traced->module);
  auto mp = AllPasses().Create("mixed-precision");
  ASSERT_TRUE(mp.ok()) << mp.status().message();
  ASSERT_TRUE((*mp)->Run(*module).ok());
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 1, 2e-2));
  // The attention kernel adds the qkv bias and writes the bf16 [B, T, C]
  // operand of the projection; c_fc's gemm adds its bias (a bf16 copy) and
  // applies the GELU (Note [bf16 GELU epilogue] in mixed_precision.h): no
  // loop kernel is left in the layer.
  std::vector<std::string> loops;
  for (const auto& inst : after->entry()->instructions()) {
    if (inst->opcode() != ir::Opcode::kFusion || !inst->metadata().starts_with("h.0")) continue;
    if (inst->attrs().fusion_kind == ir::FusionKind::kLoop) loops.push_back(inst->metadata());
  }
  EXPECT_EQ(loops, std::vector<std::string>{});
  // ln, gemm, attention, gemm, ln, gemm + bias + GELU, gemm
  EXPECT_EQ(analysis::KernelsPerLayer(*after).at(0), 7);
}

// The bf16 train step of a one-layer gpt2-tiny of width 32 (batch 1, seq 8)
// as the pipeline hands it to remat and fusion; null (and a failure) when a
// pass fails.
std::unique_ptr<ir::Module> TinyTrainStep() {
  return ::gptc::testing::TinyGpt2Step(
      {"mixed-precision", "autodiff", "dce", "simplify", "cse", "dce"});
}

// Note [GELU epilogues]: in the bf16 train step the GELU runs in c_fc's
// gemm (writing the bf16 pre-activation as aux) and its backward in the gemm
// of c_proj's input gradient (reading that aux); c_fc's bias gradient is
// summed by its weight-gradient gemm from the bf16 gradient DGELU writes.
TEST(FusionTest, GeluAndItsBackwardJoinTheGemmsAroundThem) {
  std::unique_ptr<ir::Module> module = TinyTrainStep();
  ASSERT_NE(module, nullptr);
  Remat remat({.policy = RematPolicy::kNone});  // Note [cheap recomputation]
  ASSERT_TRUE(remat.Run(*module).ok());
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 1, 1e-5));
  // The fusions computing a tanh: the two gemms, nothing else.
  std::vector<std::string> with_tanh;
  for (const auto& inst : after->entry()->instructions()) {
    if (inst->opcode() != ir::Opcode::kFusion) continue;
    for (const auto& x : inst->called_computation()->instructions()) {
      if (x->opcode() != ir::Opcode::kTanh) continue;
      with_tanh.push_back(std::string(ir::FusionKindName(inst->attrs().fusion_kind)) + " " +
                          inst->metadata());
      break;
    }
  }
  EXPECT_EQ(with_tanh, (std::vector<std::string>{"gemm h.0.mlp.c_fc", "gemm grad.h.0.mlp.c_proj"}));
  const ir::Instruction* fc = FusionOf(*after, "h.0.mlp.c_fc.dot");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->shape().ToString(), "(bf16[1,8,128], bf16[1,8,128])");  // aux, activation
  // The bias gradient: in the gemm of c_fc's weight gradient.
  const ir::Instruction* dw = nullptr;
  for (const auto& inst : after->entry()->instructions()) {
    if (inst->opcode() == ir::Opcode::kFusion && inst->metadata() == "grad.h.0.mlp.c_fc" &&
        inst->shape().is_tuple()) {
      dw = inst.get();
    }
  }
  ASSERT_NE(dw, nullptr);
  EXPECT_EQ(dw->attrs().fusion_kind, ir::FusionKind::kGemm);
  EXPECT_EQ(dw->shape().ToString(), "(f32[128], f32[32,128])") << ir::PrintModule(*after);
  EXPECT_EQ(analysis::KernelsPerLayer(*after).at(0), kBf16KernelsPerLayer);
  EXPECT_FALSE(fusion.Run(*after).value());
}

// Note [bf16 attention projection] (mixed_precision.h): in the train step
// the qkv projection's gemm writes [B, T, 3C] in bf16 with its bias, and the
// forward attention and both backward kernels read q, k, v out of it through
// their own slices, reshapes and transposes: no copy kernel, no bias add.
TEST(FusionTest, AttentionKernelsReadTheBf16Projection) {
  std::unique_ptr<ir::Module> module = TinyTrainStep();
  ASSERT_NE(module, nullptr);
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 1, 1e-5));
  const ir::Instruction* forward = FusionOf(*after, "h.0.attn.attention");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->attrs().fusion_kind, ir::FusionKind::kAttention);
  ASSERT_EQ(forward->operand_count(), 1);
  const ir::Instruction* projection = forward->operand(0);
  ASSERT_EQ(projection->opcode(), ir::Opcode::kFusion);
  EXPECT_EQ(projection->attrs().fusion_kind, ir::FusionKind::kGemm);
  EXPECT_EQ(projection->shape().ToString(), "bf16[1,8,96]") << ir::PrintModule(*after);
  int64_t slices = 0;
  for (const auto& x : forward->called_computation()->instructions()) {
    slices += x->opcode() == ir::Opcode::kSlice;
    EXPECT_NE(x->opcode(), ir::Opcode::kAdd) << x->name();
  }
  EXPECT_EQ(slices, 3);
  // The dk + dv and dq kernels read the same projection.
  for (const char* name : {"grad.h.0.attn.attention.14", "grad.h.0.attn.attention.13"}) {
    const ir::Instruction* backward = FusionOf(*after, name);
    ASSERT_NE(backward, nullptr) << name;
    EXPECT_EQ(std::count(backward->operands().begin(), backward->operands().end(), projection), 1)
        << name;
  }
  // Nothing else does: no loop kernel copies q, k or v.
  for (const ir::Instruction* u : projection->users()) {
    EXPECT_EQ(u->attrs().fusion_kind, ir::FusionKind::kAttention) << u->name();
  }
  EXPECT_FALSE(fusion.Run(*after).value());
}

// Note [packed attention gradient]: dq, dk and dv are one fusion (two
// kernels) whose result is the packed [B, T, 3C] gradient of the qkv
// projection, which both of its backward gemms read; no loop kernel packs it.
TEST(FusionTest, AttentionBackwardWritesThePackedGradient) {
  std::unique_ptr<ir::Module> module = TinyTrainStep();
  ASSERT_NE(module, nullptr);
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 1, 1e-5));
  const ir::Instruction* backward = FusionOf(*after, "grad.h.0.attn.attention.13");
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ(backward, FusionOf(*after, "grad.h.0.attn.attention.14"));
  EXPECT_EQ(backward, FusionOf(*after, "grad.h.0.attn.attention.15"));
  EXPECT_EQ(backward->attrs().fusion_kind, ir::FusionKind::kAttention);
  EXPECT_EQ(backward->shape().ToString(), "bf16[1,8,96]") << ir::PrintModule(*after);
  int64_t pads = 0;
  for (const auto& x : backward->called_computation()->instructions()) {
    pads += x->opcode() == ir::Opcode::kPad;
  }
  EXPECT_EQ(pads, 3);
  ASSERT_FALSE(backward->users().empty());
  for (const ir::Instruction* u : backward->users()) {
    EXPECT_EQ(u->attrs().fusion_kind, ir::FusionKind::kGemm) << u->name();
  }
  EXPECT_FALSE(fusion.Run(*after).value());
}

TEST(FusionTest, CausalMaskIsRecomputedInEachKernel) {
  // compare(iota, iota) is as free as the iotas: each user computes it.
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[4,4] parameter(0)
  %y = f32[4,4] parameter(1)
  %i = s32[4,4] iota(), iota_dimension=0
  %j = s32[4,4] iota(), iota_dimension=1
  %mask = pred[4,4] compare(%j, %i), direction=LE
  %z = f32[4,4] dot(%x, %y), lhs_contracting={1}, rhs_contracting={0}
  %a = f32[4,4] select(%mask, %x, %y)
  %b = f32[4,4] select(%mask, %z, %x)
  ROOT %t = (f32[4,4], f32[4,4]) tuple(%a, %b)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "loop"), 2);  // %a, %b: no kernel for the mask
  EXPECT_EQ(Count(*after, "gemm"), 1);
}

TEST(FusionTest, KernelsPerLayerCountsRematClones) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  %a = f32[4] exp(%x), phase=forward, layer=0, meta="h.0.a"
  %b = f32[4] exp(%x), phase=remat, layer=0, meta="remat.h.0.a"
  %c = f32[4] exp(%x), phase=gradient, layer=1, meta="grad.h.1.a"
  ROOT %t = (f32[4], f32[4], f32[4]) tuple(%a, %b, %c)
}
)");
  // Unfused exps are not kernels; fused, each is one.
  Fusion fusion;
  ASSERT_TRUE(fusion.Run(*module).value());
  std::map<int64_t, int64_t> per_layer = analysis::KernelsPerLayer(*module);
  EXPECT_EQ(per_layer.at(0), 2);
  EXPECT_EQ(per_layer.at(1), 1);
}

TEST(FusionTest, DoesNotFuseAroundADot) {
  // %a -> dot -> %t -> %c and %a -> %c: %a and %c in one loop kernel would
  // need the dot both before and after it.
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %p = f32[4,4] parameter(0)
  %w = f32[4,4] parameter(1)
  %a = f32[4,4] exp(%p)
  %d = f32[4,4] dot(%a, %w), lhs_contracting={1}, rhs_contracting={0}
  %t = f32[4,4] tanh(%d)
  ROOT %c = f32[4,4] add(%a, %t)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  const ir::Instruction* fa = FusionOf(*after, "a");
  const ir::Instruction* fc = FusionOf(*after, "c");
  ASSERT_NE(fa, nullptr);
  ASSERT_NE(fc, nullptr);
  EXPECT_NE(fa, fc);
  EXPECT_EQ(Count(*after, "loop"), 2);
  EXPECT_EQ(Count(*after, "gemm"), 1);
}

TEST(FusionTest, AllParameterUpdatesAreOneHorizontalKernel) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %w1 = f32[4,4] parameter(0)
  %g1 = f32[4,4] parameter(1)
  %w2 = f32[8] parameter(2)
  %g2 = f32[8] parameter(3)
  %lr = f32[] parameter(4)
  %sq = f32[4,4] mul(%g1, %g1), phase=optimizer, meta="optimizer"
  %n = f32[] reduce(%sq), dimensions={0,1}, kind=sum, phase=optimizer, meta="optimizer"
  %s = f32[] sqrt(%n), phase=optimizer, meta="optimizer"
  %lr1 = f32[4,4] broadcast(%lr), dimensions={}, phase=update, meta="optimizer.w1"
  %u1 = f32[4,4] mul(%g1, %lr1), phase=update, meta="optimizer.w1"
  %sb = f32[4,4] broadcast(%s), dimensions={}, phase=update, meta="optimizer.w1"
  %u1s = f32[4,4] div(%u1, %sb), phase=update, meta="optimizer.w1"
  %nw1 = f32[4,4] sub(%w1, %u1s), phase=update, meta="optimizer.w1"
  %lr2 = f32[8] broadcast(%lr), dimensions={}, phase=update, meta="optimizer.w2"
  %u2 = f32[8] mul(%g2, %lr2), phase=update, meta="optimizer.w2"
  %nw2 = f32[8] sub(%w2, %u2), phase=update, meta="optimizer.w2"
  ROOT %t = (f32[4,4], f32[8]) tuple(%nw1, %nw2)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 3, 1e-5));
  EXPECT_EQ(Count(*after, "optimizer"), 1);
  const ir::Instruction* f = FusionOf(*after, "nw1");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f, FusionOf(*after, "nw2"));
  EXPECT_TRUE(f->shape().is_tuple());
  EXPECT_EQ(Count(*after, "reduction"), 1);  // the global norm
}

TEST(FusionTest, LeavesModuleWithNothingToFuseAlone) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %t = f32[50,4] parameter(0)
  %i = s32[3] parameter(1)
  %g = f32[3,4] gather(%t, %i), axis=0
  ROOT %r = (f32[3,4], f32[50,4]) tuple(%g, %t)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_FALSE(RunPassAndCompare(fusion, *module, after));
  EXPECT_EQ(ir::PrintModule(*after), ir::PrintModule(*module));
}

TEST(FusionTest, SecondRunFindsNothing) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[4] parameter(0)
  ROOT %e = f32[4] exp(%x)
}
)");
  Fusion fusion;
  std::unique_ptr<ir::Module> once, twice;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, once));
  EXPECT_FALSE(RunPassAndCompare(fusion, *once, twice));
}

// The gpt2-tiny train step (narrowed for the evaluator) fused: same values,
// attention forward and cross-entropy as dedicated kernels, the attention
// backward as one fusion of two flash kernels (Note [attention backward]), at most
// kMaxKernelsPerLayer kernels per layer.
TEST(FusionTest, Gpt2TinyTrainStep) {
  StatusOr<models::GptConfig> config = models::FindGptConfig("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  config->width = 32;
  config->heads = 4;
  auto traced = models::TraceGpt2Forward(*config, 1, 8);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  std::unique_ptr<ir::Module> module = std::move(traced->module);
  for (const char* name : {"autodiff", "dce", "optimizer", "dce"}) {
    auto pass = AllPasses().Create(name);
    ASSERT_TRUE(pass.ok()) << pass.status().message();
    StatusOr<bool> changed = (*pass)->Run(*module);
    ASSERT_TRUE(changed.ok()) << name << ": " << changed.status().message();
  }
  Fusion fusion;
  std::unique_ptr<ir::Module> after;
  EXPECT_TRUE(RunPassAndCompare(fusion, *module, after, 1, 1e-4));
  // The forward, and the flash backward's dk + dv and dq kernels, one
  // fusion writing the packed gradient (Note [packed attention gradient]).
  EXPECT_EQ(Count(*after, "attention"), 2 * config->layers);
  EXPECT_EQ(Count(*after, "cross_entropy"), 1);
  EXPECT_EQ(Count(*after, "optimizer"), 1);
  auto per_layer = analysis::KernelsPerLayer(*after);
  ASSERT_EQ(static_cast<int64_t>(per_layer.size()), config->layers);
  for (auto [layer, kernels] : per_layer) {
    EXPECT_LE(kernels, kMaxKernelsPerLayer) << "layer " << layer;
    ::testing::Test::RecordProperty("kernels_h" + std::to_string(layer), kernels);
  }
  std::string report = analysis::RenderFusionReport(*after, program::GpuSpec::H100());
  EXPECT_NE(report.find("kernels per layer"), std::string::npos);
}

}  // namespace
}  // namespace gptc::passes
