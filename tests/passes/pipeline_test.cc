#include "compiler/pass/pipeline.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/ir/builder.h"
#include "passes/dce.h"
#include "passes/registry.h"
#include "tests/testing/command.h"
#include "tests/testing/pass_harness.h"

namespace gptc::pass {
namespace {

using testing::ReadAll;

using ::gptc::testing::ParseOrDie;

constexpr char kDeadModule[] = R"(module m
ENTRY %main {
  %x = f32[2] parameter(0)
  %dead = f32[2] exp(%x)
  ROOT %r = f32[2] neg(%x)
}
)";

// Appends an instruction on every run, so it never reaches a fixed point.
class GrowForever : public Pass {
 public:
  std::string_view Name() const override { return "grow-forever"; }
  StatusOr<bool> Run(ir::Module& module) override {
    ir::Builder b(module.entry());
    ASSIGN_OR_RETURN(ir::Instruction* c, b.ScalarConstant(ir::DType::kF32, 1.0));
    (void)c;
    return true;
  }
};

// Breaks the module: gives an instruction a wrong stated shape.
class Corrupt : public Pass {
 public:
  std::string_view Name() const override { return "corrupt"; }
  StatusOr<bool> Run(ir::Module& module) override {
    ir::Computation* entry = module.entry();
    auto bad = std::make_unique<ir::Instruction>("bad", ir::Opcode::kNeg,
                                                 ir::Shape(ir::DType::kF32, {7}),
                                                 std::vector<ir::Instruction*>{entry->parameters()[0]});
    entry->AddInstruction(std::move(bad));
    return true;
  }
};

TEST(PipelineTest, RunsPassesAndDumpsNumberedFiles) {
  auto dir = std::filesystem::temp_directory_path() / "gptc_pipeline_test";
  std::filesystem::remove_all(dir);
  auto module = ParseOrDie(kDeadModule);
  PipelineOptions options;
  options.dump_dir = dir.string();
  Pipeline pipeline("test", options);
  pipeline.AddPass<passes::Dce>();
  pipeline.AddPass<passes::Dce>();
  StatusOr<bool> changed = pipeline.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  EXPECT_TRUE(std::filesystem::exists(dir / "0000.after-dce.ir"));
  EXPECT_TRUE(std::filesystem::exists(dir / "0001.after-dce.ir"));
  // Every dump parses back and verifies, and prints identically.
  std::string dump = ReadAll(dir / "0001.after-dce.ir");
  auto reparsed = ParseOrDie(dump);
  ASSERT_NE(reparsed, nullptr);
  EXPECT_EQ(ir::PrintModule(*reparsed), dump);
  EXPECT_EQ(dump.find("%dead"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(PipelineTest, DisabledPassIsSkipped) {
  auto module = ParseOrDie(kDeadModule);
  PipelineOptions options;
  options.disabled.insert("dce");
  Pipeline pipeline("test", options);
  pipeline.AddPass<passes::Dce>();
  StatusOr<bool> changed = pipeline.Run(*module);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_NE(module->entry()->FindInstruction("dead"), nullptr);
}

TEST(PipelineTest, VerifierRunsAfterEachPassAndNamesIt) {
  auto module = ParseOrDie(kDeadModule);
  Pipeline pipeline("test");
  pipeline.AddPass<Corrupt>();
  StatusOr<bool> changed = pipeline.Run(*module);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("after pass corrupt"), std::string::npos)
      << changed.status().message();
  EXPECT_NE(changed.status().message().find("%bad"), std::string::npos);
}

// The verifier runs only after passes that report a change: a pass that
// changed nothing cannot have broken the module (a pass that lies about it
// is caught after the next one that changes something).
TEST(PipelineTest, VerifierSkipsPassesThatChangedNothing) {
  class Silent : public Corrupt {
   public:
    std::string_view Name() const override { return "silent"; }
    StatusOr<bool> Run(ir::Module& module) override {
      RETURN_IF_ERROR(Corrupt::Run(module).status());
      return false;
    }
  };
  auto module = ParseOrDie(kDeadModule);
  PipelineOptions options;
  options.timings = std::make_shared<std::vector<std::pair<std::string, double>>>();
  Pipeline pipeline("test", options);
  pipeline.AddPass<Silent>();
  StatusOr<bool> changed = pipeline.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_FALSE(*changed);
  for (const auto& [what, seconds] : *options.timings) EXPECT_NE(what, "verify");
  pipeline.AddPass<Corrupt>();
  changed = pipeline.Run(*module);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("after pass corrupt"), std::string::npos)
      << changed.status().message();
}

TEST(PipelineTest, FixedPointIsCapped) {
  auto module = ParseOrDie(kDeadModule);
  auto inner = std::make_unique<Pipeline>("inner");
  inner->AddPass<GrowForever>();
  FixedPoint fixed("grow", std::move(inner));
  StatusOr<bool> changed = fixed.Run(*module);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.status().message().find("25 iterations"), std::string::npos);
}

TEST(PipelineTest, FixedPointStopsWhenNothingChanges) {
  auto module = ParseOrDie(kDeadModule);
  auto inner = std::make_unique<Pipeline>("inner");
  inner->AddPass<passes::Dce>();
  FixedPoint fixed("dce-fix", std::move(inner));
  StatusOr<bool> changed = fixed.Run(*module);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  changed = fixed.Run(*module);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(PassRegistryTest, CreatesByNameAndRejectsUnknown) {
  const PassRegistry& registry = passes::AllPasses();
  StatusOr<std::unique_ptr<Pass>> dce = registry.Create("dce");
  ASSERT_TRUE(dce.ok());
  EXPECT_EQ((*dce)->Name(), "dce");
  StatusOr<std::unique_ptr<Pass>> unknown = registry.Create("nope");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("unknown pass 'nope'"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("dce"), std::string::npos);
}

}  // namespace
}  // namespace gptc::pass
