// Every kernel of the fused gpt2-tiny (and gpt2-124m) train step compiles,
// for the GPU and for the emulated device (Note [host kernels]: a kernel the
// emulator cannot run fails here, in CI); only gemm fusions (cuBLASLt thunks,
// not generated) are skipped. The
// layer-norm backward fusions, horizontal row + column reductions (dx over
// rows, gain/bias gradients over columns), compile to two kernels each (Note
// [mixed row and column reductions]), three over many rows (Note [split
// column reductions]).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>

#include "compiler/codegen/codegen.h"
#include "models/config.h"
#include "models/gpt2.h"
#include "passes/train_step.h"
#include "tests/compiler/codegen/codegen_test_util.h"

namespace gptc::codegen {
namespace {

// Compiles the fused train step of `model` and checks the expectation above.
void CheckTrainStep(const std::string& model, int64_t batch, int64_t seq,
                    passes::RematPolicy remat = passes::RematPolicy::kNone) {
  StatusOr<models::GptConfig> config = models::FindGptConfig(model);
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto traced = models::TraceGpt2Forward(*config, batch, seq);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  passes::TrainStepOptions options;
  options.optimize = true;
  options.precision.policy = passes::PrecisionPolicy::kBF16;
  options.remat.policy = remat;
  auto program = passes::BuildTrainProgram(std::move(traced->module), std::move(traced->params),
                                           traced->inputs, options);
  ASSERT_TRUE(program.ok()) << program.status().message();
  const program::TrainEntry* step = program->Find(program::EntryRole::kTrainStep);
  ASSERT_NE(step, nullptr);

  auto start = std::chrono::steady_clock::now();
  CodegenOptions codegen;
  codegen.emit_host = true;
  CompiledKernels kernels = CompileAll(*step->module, codegen);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s train step: %zu kernels, %zu skipped, codegen %.2f s\n", model.c_str(),
              kernels.kernels.size(), kernels.skipped.size(), seconds);

  // The expectation: only gemm fusions are left.
  std::map<ir::FusionKind, int> skipped_by_kind;
  for (const SkippedFusion& s : kernels.skipped) {
    std::printf("skipped %s (%s): %s\n", s.fusion.c_str(),
                std::string(ir::FusionKindName(s.kind)).c_str(), s.reason.c_str());
    ++skipped_by_kind[s.kind];
    EXPECT_EQ(s.kind, ir::FusionKind::kGemm) << s.fusion << ": " << s.reason;
  }
  EXPECT_GT(skipped_by_kind[ir::FusionKind::kGemm], 0);

  // Every other fusion, gather and scatter-add has its kernel(s).
  std::set<std::string> compiled;
  int attention_forward = 0, attention_backward = 0, distinct = 0, mixed_rows = 0,
      mixed_split = 0, fallbacks = 0, epilogues = 0;
  for (size_t i = 0; i < kernels.kernels.size(); ++i) {
    const KernelSpec& spec = kernels.kernels[i].spec;
    // Note [epilogue fallback]: a gemm's bias gradient, for a GPU
    // whose cuBLASLt refuses the epilogue; the gemm itself stays skipped.
    // (Its code may be another column sum's: Note [kernel deduplication].)
    if (spec.gemm_fallback == KernelSpec::GemmFallback::kBiasGradient) {
      ++fallbacks;
      EXPECT_EQ(spec.kind, ir::FusionKind::kReduction) << spec.name;
    } else if (spec.gemm_fallback == KernelSpec::GemmFallback::kEpilogue) {
      ++epilogues;  // the bias (and residual) after a forward gemm, from scratch
      EXPECT_EQ(spec.kind, ir::FusionKind::kLoop) << spec.name;
      int scratch = 0;
      for (const KernelParam& p : spec.params) scratch += p.role == KernelParam::Role::kScratch;
      EXPECT_EQ(scratch, 1) << spec.name;
    } else {
      compiled.insert(spec.fusion);
    }
    const bool backward = spec.fusion.starts_with("grad.");
    attention_forward += spec.kind == ir::FusionKind::kAttention && !backward;
    attention_backward += spec.kind == ir::FusionKind::kAttention && backward;
    distinct += kernels.kernels[i].code_of < 0;
    if (kernels.kernels[i].code_of < 0) {  // its host code for the emulator
      EXPECT_TRUE(kernels.kernels[i].host.has_value() && !kernels.kernels[i].host->object.empty())
          << spec.name;
    }
    // Note [mixed row and column reductions]: NAME_rows, then NAME, of one
    // fusion; with many rows NAME_rows, NAME_partials, NAME (Note [split
    // column reductions]), the partials filling an H100 (132 SMs) twice over.
    if (spec.name.ends_with("_rows")) {
      ++mixed_rows;
      ASSERT_LT(i + 1, kernels.kernels.size());
      const std::string name = spec.name.substr(0, spec.name.size() - 5);
      size_t columns = i + 1;
      if (kernels.kernels[columns].spec.name == name + "_partials") {
        ++mixed_split;
        EXPECT_GE(kernels.kernels[columns].spec.grid.x, 2 * 132) << name;
        ++columns;
      }
      ASSERT_LT(columns, kernels.kernels.size());
      EXPECT_EQ(kernels.kernels[columns].spec.fusion, spec.fusion);
      EXPECT_EQ(kernels.kernels[columns].spec.name, name);
    }
  }
  // ln_1, ln_2 of every layer and ln_f; split when there are many rows.
  EXPECT_EQ(mixed_rows, 2 * config->layers + 1);
  EXPECT_EQ(mixed_split, batch * seq >= 4096 ? mixed_rows : 0);
  // Note [attention forward]: one per layer (two when block remat recomputes
  // it for the backward), all sharing one kernel.
  const int per_layer = remat == passes::RematPolicy::kBlock ? 2 : 1;
  EXPECT_EQ(attention_forward, per_layer * config->layers);
  // Note [flash attention backward]: a dk + dv kernel and a dq kernel per layer.
  EXPECT_EQ(attention_backward, 2 * config->layers);
  // The bias gradients of c_attn, attn.c_proj, c_fc and mlp.c_proj.
  EXPECT_EQ(fallbacks, 4 * config->layers);
  // The forward gemms with a bias epilogue (attn.c_proj, mlp.c_proj...).
  EXPECT_GT(epilogues, 0);
  // Note [member partials]: the grad norm reads every gradient with a grid
  // that fills an H100 (132 SMs), then sums the partials in one block.
  std::vector<const KernelSpec*> norm;
  for (const CompiledKernel& k : kernels.kernels) {
    if (k.spec.fusion == "optimizer.grad_norm.fusion") norm.push_back(&k.spec);
  }
  ASSERT_EQ(norm.size(), 2u);
  EXPECT_TRUE(norm[0]->name.ends_with("_partials")) << norm[0]->name;
  EXPECT_GE(norm[0]->grid.x, 132) << norm[0]->name;
  EXPECT_EQ(norm[1]->grid.x, 1);
  EXPECT_EQ(norm[0]->params.back().role, KernelParam::Role::kScratch);
  EXPECT_EQ(norm[1]->params.back().role, KernelParam::Role::kScratch);
  std::printf("%d distinct kernels\n", distinct);
  std::set<std::string> skipped;
  for (const SkippedFusion& s : kernels.skipped) skipped.insert(s.fusion);
  int gathers = 0, scatters = 0;
  for (const auto& inst : step->module->entry()->instructions()) {
    ir::Opcode op = inst->opcode();
    gathers += op == ir::Opcode::kGather;
    scatters += op == ir::Opcode::kScatterAdd;
    if (op != ir::Opcode::kFusion && op != ir::Opcode::kGather && op != ir::Opcode::kScatterAdd)
      continue;
    EXPECT_TRUE(compiled.count(inst->name()) + skipped.count(inst->name()) == 1) << inst->name();
  }
  EXPECT_EQ(gathers, 1);
  EXPECT_EQ(scatters, 1);
}

TEST(Gpt2TrainStepTest, Gpt2TinyEveryKernelCompiles) { CheckTrainStep("gpt2-tiny", 2, 16); }

// Remat recomputes layer norms next to their backward: their dgamma column
// sums read recomputed row statistics, so they must stay separate kernels.
TEST(Gpt2TrainStepTest, Gpt2TinyRematDotsEveryKernelCompiles) {
  CheckTrainStep("gpt2-tiny", 2, 16, passes::RematPolicy::kDots);
}
TEST(Gpt2TrainStepTest, Gpt2TinyRematBlockEveryKernelCompiles) {
  CheckTrainStep("gpt2-tiny", 2, 16, passes::RematPolicy::kBlock);
}

// gpt2-124m at batch 4 x 1024: every kernel compiles and assembles at scale
// (about 15 s of codegen on 2 cores).
TEST(Gpt2TrainStepTest, Gpt2124mEveryKernelCompiles) { CheckTrainStep("gpt2-124m", 4, 1024); }

}  // namespace
}  // namespace gptc::codegen
