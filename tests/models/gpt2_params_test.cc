// The GPT-2 parameter table (compiler/program/gpt2_params.h) against the
// traced model: the same names, shapes, init rules and order, and the
// table's matmul operands are the parameters the traced module multiplies.
#include "compiler/program/gpt2_params.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "models/gpt2.h"

namespace gptc::models {
namespace {

using program::Gpt2Param;

class Gpt2ParamsTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    StatusOr<GptConfig> config = FindGptConfig(GetParam());
    ASSERT_TRUE(config.ok()) << config.status().message();
    config_ = *config;
    StatusOr<frontend::TracedModule> traced = TraceGpt2Forward(config_, 1, 1);
    ASSERT_TRUE(traced.ok()) << traced.status().message();
    traced_ = std::move(*traced);
  }
  GptConfig config_;
  frontend::TracedModule traced_;
};

TEST_P(Gpt2ParamsTest, TableIsWhatTheTraceDeclares) {
  const std::vector<program::ParamSpec> table = program::Gpt2ParamSpecs(ModelConfigOf(config_));
  ASSERT_EQ(table.size(), traced_.params.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i].name, traced_.params[i].name) << i;
    EXPECT_EQ(table[i].shape, traced_.params[i].shape) << table[i].name;
    EXPECT_EQ(table[i].init, traced_.params[i].init) << table[i].name;
  }
  EXPECT_EQ(program::Gpt2ParamCount(ModelConfigOf(config_)),
            static_cast<int64_t>(traced_.params.size()));
}

// A parameter is a matmul operand when a dot reads it, directly or through
// layout changes and conversions (the logits read wte transposed).
std::set<std::string> MultipliedParams(const ir::Module& module) {
  std::set<std::string> out;
  for (const std::unique_ptr<ir::Instruction>& dot : module.entry()->instructions()) {
    if (dot->opcode() != ir::Opcode::kDot) continue;
    for (const ir::Instruction* operand : dot->operands()) {
      while (operand->opcode() == ir::Opcode::kTranspose ||
             operand->opcode() == ir::Opcode::kReshape ||
             operand->opcode() == ir::Opcode::kConvert) {
        operand = operand->operand(0);
      }
      if (operand->opcode() == ir::Opcode::kParameter) out.insert(operand->name());
    }
  }
  return out;
}

TEST_P(Gpt2ParamsTest, MatmulOperandsAreTheParametersTheTraceMultiplies) {
  std::set<std::string> table;
  for (const Gpt2Param& p : program::Gpt2Params(ModelConfigOf(config_))) {
    if (p.kind->matmul) table.insert(p.name);
  }
  EXPECT_EQ(table, MultipliedParams(*traced_.module));
  EXPECT_TRUE(table.contains("wte.weight"));
  EXPECT_FALSE(table.contains("wpe.weight"));
}

TEST_P(Gpt2ParamsTest, HuggingFaceNamesAndTheTokenTable) {
  const program::ModelConfig model = ModelConfigOf(config_);
  int padded = 0;
  for (const Gpt2Param& p : program::Gpt2Params(model)) {
    // GPT2Model names its parameters as we do, and stores each as we do.
    EXPECT_EQ(p.hf_name, p.name);
    EXPECT_FALSE(p.kind->hf_transposed) << p.name;
    EXPECT_EQ(p.layer >= 0, p.name.starts_with("h.")) << p.name;
    if (p.kind->padded_rows) {
      ++padded;
      EXPECT_EQ(p.name, "wte.weight");
      EXPECT_EQ(p.shape, (std::vector<int64_t>{config_.padded_vocab, config_.width}));
    }
  }
  EXPECT_EQ(padded, 1);
  EXPECT_EQ(program::Gpt2TokenTable().name, "wte.weight");
}

INSTANTIATE_TEST_SUITE_P(Configs, Gpt2ParamsTest, ::testing::Values("gpt2-tiny", "gpt2-124m"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::erase(name, '-');
                           return name;
                         });

}  // namespace
}  // namespace gptc::models
