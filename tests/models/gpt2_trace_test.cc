// The traced GPT-2 module: signature in Hugging Face order, init rules,
// metadata on every instruction, composite ops, and dumps that round-trip.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>

#include "compiler/ir/parser.h"
#include "compiler/ir/printer.h"
#include "models/gpt2.h"

namespace gptc::models {
namespace {

using program::InitRule;
using frontend::TracedModule;

TracedModule Trace(const GptConfig& c, int64_t batch, int64_t seq) {
  StatusOr<TracedModule> traced = TraceGpt2Forward(c, batch, seq);
  EXPECT_TRUE(traced.ok()) << traced.status().message();
  return std::move(traced).value();
}

TEST(Gpt2TraceTest, SignatureFollowsHuggingFaceOrder) {
  GptConfig c = *FindGptConfig("gpt2-tiny");
  TracedModule t = Trace(c, 2, 16);
  std::vector<std::string> want = {"wte.weight", "wpe.weight"};
  for (int l = 0; l < c.layers; ++l) {
    for (const char* p :
         {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      want.push_back(fmt::format("h.{}.{}", l, p));
    }
  }
  want.push_back("ln_f.weight");
  want.push_back("ln_f.bias");
  std::vector<std::string> got;
  for (const auto& p : t.params) got.push_back(p.name);
  EXPECT_EQ(got, want);

  const ir::Computation& entry = *t.module->entry();
  std::vector<ir::Instruction*> params = entry.parameters();
  ASSERT_EQ(params.size(), want.size() + 2);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(params[i]->name(), want[i]);
    EXPECT_EQ(params[i]->shape(), t.params[i].shape);
  }
  EXPECT_EQ(params[want.size()]->name(), "tokens");
  EXPECT_EQ(params[want.size() + 1]->name(), "targets");
  EXPECT_EQ(params[want.size()]->shape(), ir::Shape(ir::DType::kS32, {2, 16}));
  EXPECT_EQ(entry.root()->shape(), ir::Shape::Scalar(ir::DType::kF32));

  // Hugging Face layouts: Conv1D weights are [in, out]; the token table is padded.
  EXPECT_EQ(t.params[0].shape, ir::Shape(ir::DType::kF32, {50304, 64}));
  EXPECT_EQ(t.params[1].shape, ir::Shape(ir::DType::kF32, {64, 64}));
  EXPECT_EQ(t.params[4].shape, ir::Shape(ir::DType::kF32, {64, 192}));
  EXPECT_EQ(t.params[12].shape, ir::Shape(ir::DType::kF32, {256, 64}));
}

TEST(Gpt2TraceTest, InitRulesAsGpt2) {
  GptConfig c = *FindGptConfig("gpt2-124m");
  TracedModule t = Trace(c, 1, 4);
  const double residual = 0.02 / std::sqrt(24.0);
  for (const auto& p : t.params) {
    bool bias = p.name.ends_with(".bias");
    bool ln = p.name.find("ln_") != std::string::npos;
    bool proj = p.name.ends_with("c_proj.weight");
    InitRule want = bias   ? InitRule::Zeros()
                    : ln   ? InitRule::Ones()
                    : proj ? InitRule::Normal(residual)
                           : InitRule::Normal(0.02);
    EXPECT_EQ(p.init.kind, want.kind) << p.name;
    EXPECT_DOUBLE_EQ(p.init.std, want.std) << p.name;
  }
}

TEST(Gpt2TraceTest, EveryInstructionHasMetadataPointingIntoTheModel) {
  GptConfig c = *FindGptConfig("gpt2-tiny");
  TracedModule t = Trace(c, 2, 8);
  for (const auto& comp : t.module->computations()) {
    for (const auto& inst : comp->instructions()) {
      const std::string& meta = inst->metadata();
      EXPECT_FALSE(meta.empty()) << ir::PrintInstruction(*inst);
      if (comp.get() != t.module->entry()) continue;
      bool known = meta == "inputs" || meta == "wte" || meta == "wpe" || meta == "lm_head" ||
                   meta == "loss" || meta.starts_with("h.0") || meta.starts_with("h.1") ||
                   meta == "ln_f";
      EXPECT_TRUE(known) << ir::PrintInstruction(*inst);
    }
  }
  // The block structure shows in the metadata, as dumps and reports use it.
  int64_t qkv = 0, gelu = 0;
  for (const auto& inst : t.module->entry()->instructions()) {
    qkv += inst->opcode() == ir::Opcode::kDot && inst->metadata().ends_with("attn.c_attn");
    gelu += inst->opcode() == ir::Opcode::kTanh && inst->metadata().ends_with("mlp.gelu");
  }
  EXPECT_EQ(qkv, c.layers);
  EXPECT_EQ(gelu, c.layers);
}

TEST(Gpt2TraceTest, CompositesCarryPrimitiveDecompositions) {
  GptConfig c = *FindGptConfig("gpt2-tiny");
  TracedModule t = Trace(c, 2, 8);
  int64_t attention = 0, cross_entropy = 0;
  for (const auto& inst : t.module->entry()->instructions()) {
    if (inst->opcode() == ir::Opcode::kAttention) {
      ++attention;
      EXPECT_TRUE(inst->attrs().causal);
      EXPECT_EQ(inst->attrs().scale, 0.25);  // 1/sqrt(16)
    }
    if (inst->opcode() == ir::Opcode::kSoftmaxCrossEntropy) {
      ++cross_entropy;
      EXPECT_EQ(inst->attrs().num_classes, 50257);
      EXPECT_EQ(inst->operand(0)->shape(), ir::Shape(ir::DType::kF32, {2, 8, 50304}));
    }
  }
  EXPECT_EQ(attention, c.layers);
  EXPECT_EQ(cross_entropy, 1);
  // One shared decomposition per composite kind, made of primitives only.
  ASSERT_EQ(t.module->computations().size(), 3u);
  for (const auto& comp : t.module->computations()) {
    if (comp.get() == t.module->entry()) continue;
    for (const auto& inst : comp->instructions()) {
      EXPECT_FALSE(ir::CallsComputation(inst->opcode())) << ir::PrintInstruction(*inst);
    }
  }
}

TEST(Gpt2TraceTest, PrintedModuleParsesVerifiesAndPrintsBackIdentically) {
  for (const char* name : {"gpt2-tiny", "gpt2-124m"}) {
    TracedModule t = Trace(*FindGptConfig(name), 2, 32);
    std::string text = ir::PrintModule(*t.module);
    StatusOr<std::unique_ptr<ir::Module>> parsed = ir::ParseAndVerifyModule(text, "traced.ir");
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(ir::PrintModule(**parsed), text) << name;
  }
}

TEST(Gpt2TraceTest, Tracing124mIsFast) {
  // The issue asks for well under a second; the bound here is loose so that
  // sanitizer and debug builds pass too.
  auto start = std::chrono::steady_clock::now();
  TracedModule t = Trace(*FindGptConfig("gpt2-124m"), 16, 1024);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(t.params.size(), 148u);
}

}  // namespace
}  // namespace gptc::models
