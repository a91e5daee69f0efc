// The full default train-step pipeline (mixed precision, autodiff, optimizer,
// simplify, CSE, remat, fusion, schedule) on a narrowed gpt2-tiny: the kernel
// budget per layer holds for every remat policy, no f32 [B, T, V] logits
// buffer is stored in bf16 mode, and the optimized step evaluates like the
// unoptimized one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/analysis/buffer_assignment.h"
#include "compiler/analysis/kernel_count.h"
#include "compiler/eval/evaluator.h"
#include "compiler/ir/printer.h"
#include "models/config.h"
#include "models/gpt2.h"
#include "passes/fusion.h"
#include "passes/train_step.h"

namespace gptc::passes {
// ctest shows the policy's name, not its bytes.
void PrintTo(RematPolicy policy, std::ostream* os) { *os << RematPolicyName(policy); }
namespace {

// Kernels per layer: kBf16KernelsPerLayer (bf16) or kMaxKernelsPerLayer
// (f32) without remat; with remat the kernels its recomputations add, among
// them the separate dgamma column sums of the recomputed layer norms, for
// dots c_fc's bias and GELU and c_attn's bias and rounding after the kept
// dots (in the forward and again in the backward), and for block the
// recomputed forward. gpt2-124m has exactly 19 with bf16 and 23 without
// remat with f32, at batch 16, seq 1024.
int64_t KernelBudget(PrecisionPolicy precision, RematPolicy policy) {
  const bool bf16 = precision == PrecisionPolicy::kBF16;
  if (policy == RematPolicy::kNone) return bf16 ? kBf16KernelsPerLayer : kMaxKernelsPerLayer;
  return bf16 ? kBf16KernelsPerLayer + 8 : kMaxKernelsPerLayer + 5;
}

using ir::DType;

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 16;

models::GptConfig TinyConfig() {
  models::GptConfig config = models::FindGptConfig("gpt2-tiny").value();
  models::ConfigOverrides narrow;
  narrow.width = 32;
  return models::ApplyOverrides(config, narrow);
}

StatusOr<TrainProgram> Build(PrecisionPolicy precision, RematPolicy remat, bool optimize,
                             int64_t world = 1, int64_t zero = 0) {
  StatusOr<frontend::TracedModule> traced =
      models::TraceGpt2Forward(TinyConfig(), kBatch, kSeq);
  if (!traced.ok()) return traced.status();
  TrainStepOptions options;
  options.precision.policy = precision;
  options.optimize = optimize;
  options.remat.policy = remat;
  options.world_size = world;
  options.zero_stage = zero;
  return BuildTrainProgram(std::move(traced->module), traced->params, traced->inputs, options);
}

// Arguments for the train_step entry: weights and optimizer state normal(0,
// 0.02), scalars (step, learning rate) 1, token ids below 1000.
std::vector<eval::Literal> Args(const ir::Module& module) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 0.02);
  std::uniform_int_distribution<int> token(0, 999);
  std::vector<eval::Literal> args;
  for (const ir::Instruction* p : module.entry()->parameters()) {
    eval::Literal l = eval::Literal::Zeros(p->shape());
    for (double& v : l.values) {
      if (p->shape().dtype() == DType::kS32) {
        v = token(rng);
      } else {
        v = p->shape().rank() == 0 ? 1.0 : normal(rng);
      }
    }
    args.push_back(std::move(l));
  }
  return args;
}

// Compares two (tuple) results leaf by leaf: |a - b| <= atol + rtol * max|b|.
void ExpectClose(const eval::Literal& a, const eval::Literal& b, double rtol,
                 const std::string& where) {
  ASSERT_EQ(a.elements.size(), b.elements.size()) << where;
  for (size_t i = 0; i < a.elements.size(); ++i) {
    ExpectClose(a.elements[i], b.elements[i], rtol, where + "/" + std::to_string(i));
  }
  ASSERT_EQ(a.values.size(), b.values.size()) << where;
  double scale = 0;
  for (double v : b.values) scale = std::max(scale, std::abs(v));
  double worst = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    worst = std::max(worst, std::abs(a.values[i] - b.values[i]));
  }
  EXPECT_LE(worst, 1e-6 + rtol * scale) << where << " (max |b| " << scale << ")";
}

class TrainPipelineTest : public ::testing::TestWithParam<RematPolicy> {};

TEST_P(TrainPipelineTest, Bf16StepFitsKernelBudgetAndEvaluatesLikeUnoptimized) {
  StatusOr<TrainProgram> optimized = Build(PrecisionPolicy::kBF16, GetParam(), true);
  ASSERT_TRUE(optimized.ok()) << optimized.status().message();
  StatusOr<TrainProgram> plain = Build(PrecisionPolicy::kBF16, GetParam(), false);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  const ir::Module& fused = *optimized->Find(program::EntryRole::kTrainStep)->module;
  const ir::Module& unfused = *plain->Find(program::EntryRole::kTrainStep)->module;

  std::map<int64_t, int64_t> per_layer = analysis::KernelsPerLayer(fused);
  ASSERT_EQ(static_cast<int64_t>(per_layer.size()), TinyConfig().layers);
  for (auto [layer, kernels] : per_layer) {
    EXPECT_LE(kernels, KernelBudget(PrecisionPolicy::kBF16, GetParam())) << "layer " << layer;
  }

  // No f32 logits or dlogits: [B, T, V] or [B*T, V] buffers are bf16.
  int64_t vocab = models::PadVocab(models::kGpt2Vocab);
  StatusOr<analysis::BufferAssignment> buffers = analysis::AssignBuffers(fused);
  ASSERT_TRUE(buffers.ok()) << buffers.status().message();
  int logits_buffers = 0;
  for (const analysis::BufferAssignment::Buffer& b : buffers->buffers()) {
    const std::vector<int64_t>& dims = b.shape.dims();
    bool logits = dims == std::vector<int64_t>{kBatch, kSeq, vocab} ||
                  dims == std::vector<int64_t>{kBatch * kSeq, vocab};
    if (!logits) continue;
    ++logits_buffers;
    EXPECT_NE(b.shape.dtype(), DType::kF32) << b.defining->name();
  }
  EXPECT_GE(logits_buffers, 1);

  std::vector<eval::Literal> args = Args(unfused);
  StatusOr<eval::Literal> want = eval::Evaluate(unfused, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  StatusOr<eval::Literal> got = eval::Evaluate(fused, args);
  ASSERT_TRUE(got.ok()) << got.status().message();
  // bf16 rounding points may move (a bias gradient summed before or after
  // the narrowing convert): bf16 tolerance.
  ExpectClose(*got, *want, 2e-2, "train_step");
}

TEST_P(TrainPipelineTest, F32StepFitsKernelBudget) {
  StatusOr<TrainProgram> optimized = Build(PrecisionPolicy::kF32, GetParam(), true);
  ASSERT_TRUE(optimized.ok()) << optimized.status().message();
  for (auto [layer, kernels] :
       analysis::KernelsPerLayer(*optimized->Find(program::EntryRole::kTrainStep)->module)) {
    EXPECT_LE(kernels, KernelBudget(PrecisionPolicy::kF32, GetParam())) << "layer " << layer;
  }
}

// Note [roles]: the passes decide by the typed role, so a forward whose
// metadata is all blanked compiles to the same step (metadata aside): what
// is recomputed and what is fused do not depend on the scopes' names.
TEST_P(TrainPipelineTest, MetadataIsForPeopleOnly) {
  auto compile = [&](bool blank) -> StatusOr<std::string> {
    StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(TinyConfig(), kBatch, kSeq);
    if (!traced.ok()) return traced.status();
    if (blank) {
      for (const auto& c : traced->module->computations()) {
        for (const auto& inst : c->instructions()) inst->set_metadata("");
      }
    }
    TrainStepOptions options;
    options.optimize = true;
    options.remat.policy = GetParam();
    ASSIGN_OR_RETURN(
        TrainProgram program,
        BuildTrainProgram(std::move(traced->module), traced->params, traced->inputs, options));
    std::string text = ir::PrintModule(*program.entries[0].module);
    std::string out;
    for (size_t at = 0; at < text.size();) {  // every `, meta="..."` dropped
      size_t meta = text.find(", meta=\"", at);
      if (meta == std::string::npos) meta = text.size();
      out.append(text, at, meta - at);
      at = meta < text.size() ? text.find('"', meta + 8) + 1 : meta;
    }
    return out;
  };
  StatusOr<std::string> named = compile(false), blank = compile(true);
  ASSERT_TRUE(named.ok()) << named.status().message();
  ASSERT_TRUE(blank.ok()) << blank.status().message();
  EXPECT_NE(named->find("fusion("), std::string::npos);
  EXPECT_TRUE(*named == *blank) << "the blank-metadata step differs";
}

// ZeRO-1 (passes/zero_shard.h) adds collectives, not kernels: each layer's
// kernels are plain data parallelism's (the gemm writes the f32 gradient
// the reduce-scatter reads, as it does for the all-reduce).
TEST_P(TrainPipelineTest, ZeroOneAddsNoKernelPerLayer) {
  StatusOr<TrainProgram> plain = Build(PrecisionPolicy::kBF16, GetParam(), true, 2, 0);
  StatusOr<TrainProgram> zero = Build(PrecisionPolicy::kBF16, GetParam(), true, 2, 1);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  const ir::Module& z = *zero->Find(program::EntryRole::kTrainStep)->module;
  EXPECT_EQ(analysis::KernelsPerLayer(z),
            analysis::KernelsPerLayer(*plain->Find(program::EntryRole::kTrainStep)->module));
  int64_t scatters = 0;
  for (const auto& inst : z.entry()->instructions()) {
    scatters += inst->opcode() == ir::Opcode::kReduceScatter;
  }
  EXPECT_EQ(scatters, static_cast<int64_t>(zero->params.size()));
}

INSTANTIATE_TEST_SUITE_P(Remat, TrainPipelineTest,
                         ::testing::Values(RematPolicy::kNone, RematPolicy::kDots,
                                           RematPolicy::kBlock),
                         [](const auto& info) {
                           switch (info.param) {
                             case RematPolicy::kNone:
                               return std::string("None");
                             case RematPolicy::kDots:
                               return std::string("Dots");
                             default:
                               return std::string("Block");
                           }
                         });

}  // namespace
}  // namespace gptc::passes
