// Note [compile inputs] (tools/gptc/compile_options.h): every field of the
// compile options that shapes the output changes the compile cache's key,
// and the fields that shape nothing leave it alone. Each struct's list of
// flips must name all its fields: a field added without a flip (or a reason
// it shapes nothing) fails to compile here.
#include "tools/gptc/compile_options.h"

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include "tools/gptc/compile_cache.h"

namespace gptc::tools {
namespace {

// Converts to any member type: T{AnyField{}, ...} compiles for as many
// initializers as the aggregate T has fields, and no more.
struct AnyField {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor): unevaluated only
};

template <class T, class... Fields>
constexpr size_t CountFields() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; }) {
    return CountFields<T, Fields..., AnyField>();
  } else {
    return sizeof...(Fields);
  }
}

struct Flip {
  const char* field;
  void (*apply)(CompileOptions&);
};

// The fields of models::GptConfig.
constexpr std::array<Flip, 7> kConfigFlips = {{
    {"config.name", [](CompileOptions& o) { o.config.name = "gpt2-other"; }},
    {"config.layers", [](CompileOptions& o) { ++o.config.layers; }},
    {"config.heads", [](CompileOptions& o) { ++o.config.heads; }},
    {"config.width", [](CompileOptions& o) { o.config.width *= 2; }},
    {"config.positions", [](CompileOptions& o) { ++o.config.positions; }},
    {"config.vocab", [](CompileOptions& o) { ++o.config.vocab; }},
    {"config.padded_vocab", [](CompileOptions& o) { o.config.padded_vocab += 128; }},
}};
static_assert(kConfigFlips.size() == CountFields<models::GptConfig>(),
              "models::GptConfig has a field kConfigFlips does not flip: write it in "
              "CompileInputs and flip it here");

// The fields of program::AdamWOptions.
constexpr std::array<Flip, 5> kAdamWFlips = {{
    {"train.adamw.beta1", [](CompileOptions& o) { o.train.adamw.beta1 = 0.8; }},
    {"train.adamw.beta2", [](CompileOptions& o) { o.train.adamw.beta2 = 0.99; }},
    {"train.adamw.eps", [](CompileOptions& o) { o.train.adamw.eps = 1e-6; }},
    {"train.adamw.weight_decay", [](CompileOptions& o) { o.train.adamw.weight_decay = 0; }},
    {"train.adamw.clip_norm", [](CompileOptions& o) { o.train.adamw.clip_norm = 0.5; }},
}};
static_assert(kAdamWFlips.size() == CountFields<program::AdamWOptions>(),
              "program::AdamWOptions has a field kAdamWFlips does not flip");

// The fields of passes::RematOptions and passes::MixedPrecisionOptions.
constexpr std::array<Flip, 2> kRematFlips = {{
    {"train.remat.policy",
     [](CompileOptions& o) { o.train.remat.policy = passes::RematPolicy::kBlock; }},
    {"train.remat.layers",
     [](CompileOptions& o) {
       o.train.remat.layers = {passes::RematPolicy::kDots, passes::RematPolicy::kNone};
     }},
}};
static_assert(kRematFlips.size() == CountFields<passes::RematOptions>(),
              "passes::RematOptions has a field kRematFlips does not flip");
constexpr std::array<Flip, 1> kPrecisionFlips = {{
    {"train.precision.policy",
     [](CompileOptions& o) { o.train.precision.policy = passes::PrecisionPolicy::kF32; }},
}};
static_assert(kPrecisionFlips.size() == CountFields<passes::MixedPrecisionOptions>(),
              "passes::MixedPrecisionOptions has a field kPrecisionFlips does not flip");

// The fields of passes::TrainStepOptions: three, above, by their own lists.
constexpr std::array<Flip, 7> kTrainFlips = {{
    {"train.grad_accum", [](CompileOptions& o) { o.train.grad_accum = 2; }},
    {"train.world_size", [](CompileOptions& o) { o.train.world_size = 2; }},
    {"train.zero_stage", [](CompileOptions& o) { o.train.zero_stage = 1; }},
    {"train.grad_comm", [](CompileOptions& o) { o.train.grad_comm = ir::DType::kBF16; }},
    {"train.all_reduce_bucket_bytes",
     [](CompileOptions& o) { o.train.all_reduce_bucket_bytes = int64_t{1} << 20; }},
    {"train.first_bucket_bytes",
     [](CompileOptions& o) { o.train.first_bucket_bytes = int64_t{1} << 20; }},
    {"train.optimize", [](CompileOptions& o) { o.train.optimize = false; }},
}};
// They shape no byte: verification, timings, dumps.
constexpr std::array<Flip, 2> kTrainIgnored = {{
    {"train.pipeline", [](CompileOptions& o) { o.train.pipeline.verify_each = false; }},
    {"train.dumps",
     [](CompileOptions& o) { o.train.dumps = std::make_shared<pass::DumpWriter>("/tmp/dumps"); }},
}};
static_assert(kTrainFlips.size() + kTrainIgnored.size() + 3 ==
                  CountFields<passes::TrainStepOptions>(),
              "passes::TrainStepOptions has a field neither flipped nor ignored here");

// The fields of CompileOptions: two (config, train), above, by their own lists.
constexpr std::array<Flip, 14> kOptionFlips = {{
    {"batch", [](CompileOptions& o) { o.batch = 8; }},
    {"seq", [](CompileOptions& o) { o.seq = 32; }},
    {"score_seq", [](CompileOptions& o) { o.score_seq = 16; }},
    {"batch_auto", [](CompileOptions& o) { o.batch_auto = true; }},
    {"tokens_per_step", [](CompileOptions& o) { o.tokens_per_step = 4096; }},
    {"memory_budget", [](CompileOptions& o) { o.memory_budget = int64_t{1} << 30; }},
    {"artifact", [](CompileOptions& o) { o.artifact = false; }},
    {"target", [](CompileOptions& o) { o.target = codegen::Target::kSm80; }},
    {"attention_mma", [](CompileOptions& o) { o.attention_mma = codegen::AttentionMma::kWgmma; }},
    {"emu", [](CompileOptions& o) { o.emu = true; }},
    {"codegen", [](CompileOptions& o) { o.codegen = false; }},
    {"forward_entries", [](CompileOptions& o) { o.forward_entries = false; }},
    {"forward_only", [](CompileOptions& o) { o.forward_only = true; }},
    {"roofline_gpu", [](CompileOptions& o) { o.roofline_gpu = program::GpuSpec::A100(); }},
}};
// They shape no byte: CompileProgram's own record of --batch auto, and the
// reports beside the output.
constexpr std::array<Flip, 4> kOptionIgnored = {{
    {"batch_note", [](CompileOptions& o) { o.batch_note = "; batch auto: 8"; }},
    {"dump_dir", [](CompileOptions& o) { o.dump_dir = "/tmp/dumps"; }},
    {"print_fusion_report", [](CompileOptions& o) { o.print_fusion_report = true; }},
    {"print_memory_report", [](CompileOptions& o) { o.print_memory_report = true; }},
}};
static_assert(kOptionFlips.size() + kOptionIgnored.size() + 2 == CountFields<CompileOptions>(),
              "CompileOptions has a field neither flipped nor ignored here: write it in "
              "CompileInputs (Note [compile inputs]) and flip it, or ignore it saying why");

// Values a field takes that the text of the key must tell apart too.
constexpr std::array<Flip, 2> kOtherValues = {{
    {"train.remat.policy auto",
     [](CompileOptions& o) { o.train.remat.policy = passes::RematPolicy::kAuto; }},
    {"train.remat.layers none:0-1 (a plan, not the policy none)",
     [](CompileOptions& o) { o.train.remat.layers.assign(2, passes::RematPolicy::kNone); }},
}};

// An artifact of gpt2-tiny as gptc compile's defaults make it.
CompileOptions Base() {
  CompileOptions o;
  o.config = {.name = "gpt2-tiny",
              .layers = 2,
              .heads = 4,
              .width = 64,
              .positions = 64,
              .vocab = 50257,
              .padded_vocab = 50304};
  o.batch = 4;
  o.seq = 64;
  o.train.precision.policy = passes::PrecisionPolicy::kBF16;
  o.train.optimize = true;
  o.artifact = true;
  return o;
}

std::string KeyOf(const CompileOptions& o) { return CompileCache::Key(CompileInputs(o)); }

TEST(CompileInputsTest, EveryFieldThatShapesTheOutputChangesTheKey) {
  const std::string base = KeyOf(Base());
  auto expect_changed = [&](const auto& flips) {
    for (const Flip& flip : flips) {
      CompileOptions o = Base();
      flip.apply(o);
      EXPECT_NE(KeyOf(o), base) << flip.field << " is not in the key";
    }
  };
  expect_changed(kConfigFlips);
  expect_changed(kAdamWFlips);
  expect_changed(kRematFlips);
  expect_changed(kPrecisionFlips);
  expect_changed(kTrainFlips);
  expect_changed(kOptionFlips);
  expect_changed(kOtherValues);
}

TEST(CompileInputsTest, FieldsThatShapeNothingLeaveTheKey) {
  const std::string base = KeyOf(Base());
  auto expect_same = [&](const auto& flips) {
    for (const Flip& flip : flips) {
      CompileOptions o = Base();
      flip.apply(o);
      EXPECT_EQ(KeyOf(o), base) << flip.field << " shapes no byte but is in the key";
    }
  };
  expect_same(kTrainIgnored);
  expect_same(kOptionIgnored);
}

TEST(CompileInputsTest, EqualOptionsHaveEqualKeys) {
  EXPECT_EQ(KeyOf(Base()), KeyOf(Base()));
  EXPECT_EQ(KeyOf(Base()).size(), 32u);
}

TEST(RematTextTest, PrintsWhatTheManifestRecords) {
  passes::RematOptions remat;
  EXPECT_EQ(RematText(remat), "none");
  remat.policy = passes::RematPolicy::kBlock;
  EXPECT_EQ(RematText(remat), "block");
  remat.policy = passes::RematPolicy::kNone;
  remat.layers = {passes::RematPolicy::kBlock, passes::RematPolicy::kBlock,
                  passes::RematPolicy::kNone};
  EXPECT_EQ(RematText(remat), "block:0-1,none:2");
  remat.policy = passes::RematPolicy::kAuto;
  EXPECT_EQ(RematText(remat), "auto: block:0-1,none:2");
  remat.layers.clear();
  EXPECT_EQ(RematText(remat), "auto");
}

}  // namespace
}  // namespace gptc::tools
