// Whole entries on the GPU (and on the emulated device, runtime/emu/, in
// every CI run) against the CPU reference device (rt::CpuTrainer
// running the artifact's optimized IR), from the same counter-based initial
// weights:
//   - the sampling entry `logits` (a full forward pass) and the validation
//     entry `eval`;
//   - one train step: loss, grad norm and the updated parameters;
//   - graph replay against eager execution, and a state export/import;
//   - grad-accum 2 (accumulate twice, apply once) against the CPU, and its
//     loss against grad-accum 1 on the same rows.
// The train-step tests need a complete artifact and skip (saying which
// instructions lack a kernel) otherwise.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "runtime/cpu_device.h"
#include "runtime/gpu/gpu_trainer.h"
#include "runtime/gpu/host_values.h"
#include "runtime/init.h"
#include "tests/runtime/gpu/gpu_test_util.h"

namespace gptc::rt::gpu::testing {
namespace {

constexpr uint64_t kSeed = 0;

// Each test runs on the GPU (skipped without one) and on the emulated device.
class GpuEntryTest : public ::testing::TestWithParam<TestBackend> {};
class GpuTrainStepTest : public ::testing::TestWithParam<TestBackend> {};

const Tiny* TinyOrFail() {
  std::string why;
  const Tiny* tiny = LoadTiny(&why);
  EXPECT_NE(tiny, nullptr) << why;
  return tiny;
}

std::string Incomplete(const Tiny& tiny) {
  std::vector<std::string> what;
  for (const EntryPlan& p : tiny.plans) {
    for (const Thunk& t : p.thunks) {
      if (t.kind() == ThunkKind::kUnsupported) what.push_back(t.Describe());
    }
  }
  return fmt::format("{}", fmt::join(what, ", "));
}

#define GPTC_SKIP_IF_INCOMPLETE(tiny)                                                       \
  if (std::string missing = Incomplete(tiny); !missing.empty()) {                           \
    GTEST_SKIP() << (tiny).path << " is incomplete (no kernel yet for: " << missing << ")"; \
  }

StatusOr<std::unique_ptr<GpuTrainer>> MakeGpuTrainer(const TestDevice& device, const Tiny& tiny,
                                                     bool graph) {
  GpuOptions options;
  options.backend = &device.cuda_backend();
  options.use_graph = graph;
  return GpuTrainer::Create(tiny.artifact, tiny.path, &tiny.loaded.program, kSeed, options);
}

TEST_P(GpuEntryTest, LogitsMatchCpu) {
  const Tiny* tiny = TinyOrFail();
  ASSERT_NE(tiny, nullptr);
  GPTC_OPEN_TEST_DEVICE(device, {tiny});
  const program::TrainProgram& program = tiny->loaded.program;
  const program::TrainEntry* logits = program.Find(program::EntryRole::kLogits);
  if (logits == nullptr) GTEST_SKIP() << tiny->path << " has no logits entry";
  size_t e = 0;
  while (tiny->plans[e].role != program::EntryRole::kLogits) ++e;
  for (const Thunk& t : tiny->plans[e].thunks) {
    ASSERT_NE(t.kind(), ThunkKind::kUnsupported) << t.Describe();
  }
  StatusOr<std::unique_ptr<GpuHarness>> gpu = GpuHarness::Create(*device, *tiny);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  const EntryPlan& plan = tiny->plans[e];
  // The initial parameters, as the trainers make them.
  for (const PlanSlot& slot : plan.inputs) {
    if (slot.role != program::SlotRole::kParam) continue;
    std::vector<float> init = InitParameter(program.params[slot.index], kSeed, slot.index);
    std::vector<double> values(init.begin(), init.end());
    ASSERT_TRUE((*gpu)->Upload(e, slot.slice, EncodeValues(ir::DType::kF32, values)).ok());
  }
  const PlanSlot* tokens = plan.FindInput(program::SlotRole::kTokens);
  ASSERT_NE(tokens, nullptr);
  const int64_t seq = tokens->shape.dims()[1];
  MicroBatch batch = PatternBatch(1, seq, tiny->loaded.model.vocab, 3);
  std::vector<double> ids(batch.tokens.begin(), batch.tokens.end());
  ASSERT_TRUE((*gpu)->Upload(e, tokens->slice, EncodeValues(ir::DType::kS32, ids)).ok());
  std::vector<size_t> all;
  for (size_t i = 0; i < plan.thunks.size(); ++i) all.push_back(i);
  Status run = (*gpu)->Run(e, all);
  ASSERT_TRUE(run.ok()) << run.message();
  const PlanSlot* out = plan.FindOutput(program::SlotRole::kLogits);
  ASSERT_NE(out, nullptr);
  StatusOr<std::string> bytes = (*gpu)->Download(e, out->slice);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  bytes->resize(out->shape.num_elements() * ir::DTypeBytes(out->shape.dtype()));
  std::vector<double> got = DecodeValues(out->shape.dtype(), *bytes);

  CpuTrainer cpu(&program, kSeed);
  StatusOr<std::vector<eval::Literal>> want = cpu.Evaluate(*logits, batch);
  ASSERT_TRUE(want.ok()) << want.status().message();
  Comparison c = Compare(got, (*want)[0].values, DefaultRtol(ir::DType::kBF16));
  std::printf("logits %s: worst %.2e (gpu %.6g cpu %.6g at %ld), %ld of %zu beyond %.0e\n",
              out->shape.ToString().c_str(), c.worst, c.gpu, c.ref,
              static_cast<long>(c.worst_index), static_cast<long>(c.failures), got.size(),
              DefaultRtol(ir::DType::kBF16));
  EXPECT_TRUE(c.ok()) << "worst " << c.worst << " at " << c.worst_index;

  // The sampler's read: one row, copied alone, equal to the same row of the whole.
  StatusOr<std::unique_ptr<GpuTrainer>> trainer = MakeGpuTrainer(*device, *tiny, /*graph=*/false);
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  StatusOr<std::vector<eval::Literal>> whole = (*trainer)->Evaluate(*logits, batch);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  const int64_t v = out->shape.dims()[2];
  StatusOr<std::vector<double>> row = (*trainer)->EvaluateSlice(*logits, batch, 0, 3 * v, v);
  ASSERT_TRUE(row.ok()) << row.status().message();
  EXPECT_EQ(*row, std::vector<double>((*whole)[0].values.begin() + 3 * v,
                                      (*whole)[0].values.begin() + 4 * v));
}

MicroBatch Batch(const Tiny& tiny, int64_t index) {
  return PatternBatch(tiny.loaded.flags.batch, tiny.loaded.flags.seq, tiny.loaded.model.vocab,
                      index);
}

// Loss within 1% and grad norm within 5% (bf16 against the f32 reference).
void ExpectStepClose(const StepResult& gpu, const StepResult& ref) {
  EXPECT_NEAR(gpu.loss, ref.loss, 1e-2 * std::abs(ref.loss));
  EXPECT_NEAR(gpu.grad_norm, ref.grad_norm, 5e-2 * std::abs(ref.grad_norm));
}

// Parameters of two trainers after the same Adam steps, with lr as the unit:
// Adam moves each weight by about lr * sign(grad) a step, and a gradient
// element whose sign bf16 noise flips moves 2 lr the other way. So at most
// `max_far_fraction` of a tensor may be more than lr apart, and none more
// than `max_lrs` lr.
void ExpectParamsClose(const TrainerState& gpu, const TrainerState& cpu,
                       const std::vector<program::ParamSpec>& params, double lr, double max_lrs,
                       double max_far_fraction) {
  ASSERT_EQ(gpu.values.size(), params.size());
  ASSERT_EQ(cpu.values.size(), params.size());
  for (size_t p = 0; p < params.size(); ++p) {
    const std::vector<float>& a = gpu.values[p];
    const std::vector<float>& b = cpu.values[p];
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    int64_t far = 0;
    // The key bias (c_attn.bias[C:2C]) has a zero gradient (the softmax does
    // not change when a constant is added to every score of a row): its
    // rounding noise has either sign, and Adam moves it by lr either way.
    const bool key_bias = params[p].name.ends_with("attn.c_attn.bias");
    const size_t key_begin = a.size() / 3, key_end = 2 * a.size() / 3;
    for (size_t i = 0; i < a.size(); ++i) {
      if (key_bias && i >= key_begin && i < key_end) continue;
      const double d = std::abs(static_cast<double>(a[i]) - b[i]);
      worst = std::max(worst, d);
      if (d > lr) ++far;
    }
    std::printf("  %-28s worst |gpu-cpu| %.2e (%.2f lr), %ld of %zu more than lr apart\n",
                params[p].name.c_str(), worst, worst / lr, static_cast<long>(far), a.size());
    EXPECT_LT(worst, max_lrs * lr) << params[p].name;
    EXPECT_LE(far, static_cast<int64_t>(static_cast<double>(a.size()) * max_far_fraction) + 1)
        << params[p].name;
  }
}

TEST_P(GpuTrainStepTest, OneStepMatchesCpu) {
  const Tiny* tiny = TinyOrFail();
  ASSERT_NE(tiny, nullptr);
  GPTC_SKIP_IF_INCOMPLETE(*tiny);
  GPTC_OPEN_TEST_DEVICE(device, {tiny});
  StatusOr<std::unique_ptr<GpuTrainer>> gpu = MakeGpuTrainer(*device, *tiny, /*graph=*/false);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  CpuTrainer cpu(&tiny->loaded.program, kSeed);
  // Same weights before the step.
  StatusOr<TrainerState> before_gpu = (*gpu)->ExportState();
  StatusOr<TrainerState> before_cpu = cpu.ExportState();
  ASSERT_TRUE(before_gpu.ok() && before_cpu.ok());
  EXPECT_EQ(before_gpu->values, before_cpu->values);

  constexpr double kLr = 1e-3;
  std::vector<MicroBatch> micro = {Batch(*tiny, 0)};
  StatusOr<StepResult> g = (*gpu)->Step(micro, kLr);
  ASSERT_TRUE(g.ok()) << g.status().message();
  StatusOr<StepResult> c = cpu.Step(micro, kLr);
  ASSERT_TRUE(c.ok()) << c.status().message();
  std::printf("step 1: loss gpu %.6f cpu %.6f | grad norm gpu %.6f cpu %.6f\n", g->loss, c->loss,
              g->grad_norm, c->grad_norm);
  ExpectStepClose(*g, *c);

  StatusOr<TrainerState> after_gpu = (*gpu)->ExportState();
  StatusOr<TrainerState> after_cpu = cpu.ExportState();
  ASSERT_TRUE(after_gpu.ok() && after_cpu.ok());
  EXPECT_EQ(after_gpu->steps_done, 1);
  ExpectParamsClose(*after_gpu, *after_cpu, tiny->loaded.program.params, kLr, /*max_lrs=*/3,
                    /*max_far_fraction=*/0.01);
}

// The validation entry through GpuTrainer::Evaluate (tokens and targets fed,
// one scalar back), against the CPU, before and after a step. It runs in the
// train step's arena (Note [arena guests]): the steps after it must be
// unharmed too.
TEST_P(GpuEntryTest, EvalLossMatchesCpu) {
  const Tiny* tiny = TinyOrFail();
  ASSERT_NE(tiny, nullptr);
  GPTC_SKIP_IF_INCOMPLETE(*tiny);
  GPTC_OPEN_TEST_DEVICE(device, {tiny});
  const program::TrainEntry* eval = tiny->loaded.program.Find(program::EntryRole::kEval);
  if (eval == nullptr) GTEST_SKIP() << tiny->path << " has no eval entry";
  StatusOr<std::unique_ptr<GpuTrainer>> gpu = MakeGpuTrainer(*device, *tiny, /*graph=*/true);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  CpuTrainer cpu(&tiny->loaded.program, kSeed);
  for (int64_t s = 0; s < 2; ++s) {
    MicroBatch batch = Batch(*tiny, s);
    StatusOr<std::vector<eval::Literal>> g = (*gpu)->Evaluate(*eval, batch);
    ASSERT_TRUE(g.ok()) << g.status().message();
    StatusOr<std::vector<eval::Literal>> c = cpu.Evaluate(*eval, batch);
    ASSERT_TRUE(c.ok()) << c.status().message();
    const double gl = g->at(0).values[0], cl = c->at(0).values[0];
    std::printf("eval loss %s: gpu %.6f cpu %.6f\n", s == 0 ? "at init" : "after a step", gl, cl);
    EXPECT_NEAR(gl, cl, 1e-2 * std::abs(cl));
    std::vector<MicroBatch> micro = {batch};
    StatusOr<StepResult> gs = (*gpu)->Step(micro, 1e-3);
    ASSERT_TRUE(gs.ok()) << gs.status().message();
    StatusOr<StepResult> cs = cpu.Step(micro, 1e-3);
    ASSERT_TRUE(cs.ok()) << cs.status().message();
    ExpectStepClose(*gs, *cs);
  }
}

TEST_P(GpuTrainStepTest, GraphReplayMatchesEager) {
  const Tiny* tiny = TinyOrFail();
  ASSERT_NE(tiny, nullptr);
  GPTC_SKIP_IF_INCOMPLETE(*tiny);
  GPTC_OPEN_TEST_DEVICE(device, {tiny});
  StatusOr<std::unique_ptr<GpuTrainer>> graph = MakeGpuTrainer(*device, *tiny, true);
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  StatusOr<std::unique_ptr<GpuTrainer>> eager = MakeGpuTrainer(*device, *tiny, false);
  ASSERT_TRUE(eager.ok()) << eager.status().message();
  for (int64_t s = 0; s < 3; ++s) {  // step 1 eager in both; steps 2, 3 replay the graph
    std::vector<MicroBatch> micro = {Batch(*tiny, s)};
    const double lr = 1e-3 * (s + 1);  // the graph must read the new lr each step
    StatusOr<StepResult> a = (*graph)->Step(micro, lr);
    StatusOr<StepResult> b = (*eager)->Step(micro, lr);
    ASSERT_TRUE(a.ok()) << a.status().message();
    ASSERT_TRUE(b.ok()) << b.status().message();
    std::printf("step %ld: loss graph %.7f eager %.7f | norm graph %.7f eager %.7f\n",
                static_cast<long>(s + 1), a->loss, b->loss, a->grad_norm, b->grad_norm);
    // Identical work; only float atomics (the embedding gradient) may reorder sums.
    EXPECT_NEAR(a->loss, b->loss, 1e-5 * std::abs(b->loss));
    EXPECT_NEAR(a->grad_norm, b->grad_norm, 1e-4 * std::abs(b->grad_norm));
  }
  StatusOr<TrainerState> a = (*graph)->ExportState();
  StatusOr<TrainerState> b = (*eager)->ExportState();
  ASSERT_TRUE(a.ok() && b.ok());
  // The embedding gradient's atomics add in whatever order the blocks run
  // (on a GPU, and on the emulated device with several host cores: the first
  // GPU run, 16 cores, differed by 0.027 in the key bias). Adam turns that
  // noise into lr-sized moves of weights whose gradient is near zero, so the
  // parameters are compared in lr units (at most 2 lr a step either way; a
  // graph that replayed a stale lr would put most weights over 1e-3 apart).
  ExpectParamsClose(*a, *b, tiny->loaded.program.params, 1e-3, /*max_lrs=*/12,
                    /*max_far_fraction=*/0.01);
}

TEST_P(GpuTrainStepTest, StateExportImportContinuesIdentically) {
  const Tiny* tiny = TinyOrFail();
  ASSERT_NE(tiny, nullptr);
  GPTC_SKIP_IF_INCOMPLETE(*tiny);
  GPTC_OPEN_TEST_DEVICE(device, {tiny});
  StatusOr<std::unique_ptr<GpuTrainer>> a = MakeGpuTrainer(*device, *tiny, true);
  ASSERT_TRUE(a.ok()) << a.status().message();
  std::vector<MicroBatch> first = {Batch(*tiny, 0)}, second = {Batch(*tiny, 1)};
  ASSERT_TRUE((*a)->Step(first, 1e-3).ok());
  StatusOr<TrainerState> state = (*a)->ExportState();
  ASSERT_TRUE(state.ok()) << state.status().message();
  StatusOr<std::unique_ptr<GpuTrainer>> b = MakeGpuTrainer(*device, *tiny, true);
  ASSERT_TRUE(b.ok()) << b.status().message();
  Status imported = (*b)->ImportState(*state);
  ASSERT_TRUE(imported.ok()) << imported.message();
  EXPECT_EQ((*b)->steps_done(), 1);
  StatusOr<StepResult> ra = (*a)->Step(second, 1e-3);
  StatusOr<StepResult> rb = (*b)->Step(second, 1e-3);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_NEAR(ra->loss, rb->loss, 1e-5 * std::abs(ra->loss));
}

// Rows [first, first + count) of a batch.
MicroBatch Rows(const MicroBatch& batch, int64_t seq, int64_t first, int64_t count) {
  MicroBatch out;
  const auto begin = static_cast<std::ptrdiff_t>(first * seq);
  const auto end = static_cast<std::ptrdiff_t>((first + count) * seq);
  out.tokens.assign(batch.tokens.begin() + begin, batch.tokens.begin() + end);
  out.targets.assign(batch.targets.begin() + begin, batch.targets.begin() + end);
  return out;
}

TEST_P(GpuTrainStepTest, GradAccumTwoMatchesCpuAndOneBigBatch) {
  std::string why;
  const Tiny* plain = LoadTiny(&why);
  ASSERT_NE(plain, nullptr) << why;
  const Tiny* accumulating = LoadTiny(&why, TinyVariant::kGradAccum);
  ASSERT_NE(accumulating, nullptr) << why;
  GPTC_SKIP_IF_INCOMPLETE(*accumulating);
  GPTC_OPEN_TEST_DEVICE(device, {accumulating, plain});
  ASSERT_EQ(accumulating->loaded.program.grad_accum, 2);
  const int64_t seq = plain->loaded.flags.seq;
  ASSERT_EQ(accumulating->loaded.flags.seq, seq);
  ASSERT_EQ(plain->loaded.flags.batch, 2 * accumulating->loaded.flags.batch);
  StatusOr<std::unique_ptr<GpuTrainer>> gpu =
      MakeGpuTrainer(*device, *accumulating, /*graph=*/true);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  StatusOr<std::unique_ptr<GpuTrainer>> big = MakeGpuTrainer(*device, *plain, /*graph=*/true);
  ASSERT_TRUE(big.ok()) << big.status().message();
  CpuTrainer cpu(&accumulating->loaded.program, kSeed);
  const program::TrainEntry* eval = accumulating->loaded.program.Find(program::EntryRole::kEval);
  ASSERT_NE(eval, nullptr);
  constexpr double kLr = 1e-3;
  for (int64_t s = 0; s < 2; ++s) {  // step 2 replays both entries' graphs
    // The big batch's two rows, as two micro-batches of one row.
    std::vector<MicroBatch> whole = {Batch(*plain, s)};
    std::vector<MicroBatch> halves = {Rows(whole[0], seq, 0, 1), Rows(whole[0], seq, 1, 1)};
    StatusOr<StepResult> g = (*gpu)->Step(halves, kLr);
    ASSERT_TRUE(g.ok()) << g.status().message();
    StatusOr<StepResult> c = cpu.Step(halves, kLr);
    ASSERT_TRUE(c.ok()) << c.status().message();
    StatusOr<StepResult> b = (*big)->Step(whole, kLr);
    ASSERT_TRUE(b.ok()) << b.status().message();
    std::printf(
        "step %ld: loss gpu ga2 %.6f cpu ga2 %.6f gpu b2 %.6f | norm gpu ga2 %.6f cpu ga2 %.6f "
        "gpu b2 %.6f\n",
        static_cast<long>(s + 1), g->loss, c->loss, b->loss, g->grad_norm, c->grad_norm,
        b->grad_norm);
    ExpectStepClose(*g, *c);
    ExpectStepClose(*g, *b);
    // The eval entry runs in accumulate's arena, whose copy of the
    // parameters predates the step (Note [arena guests]).
    StatusOr<std::vector<eval::Literal>> ge = (*gpu)->Evaluate(*eval, halves[0]);
    ASSERT_TRUE(ge.ok()) << ge.status().message();
    StatusOr<std::vector<eval::Literal>> ce = cpu.Evaluate(*eval, halves[0]);
    ASSERT_TRUE(ce.ok()) << ce.status().message();
    const double gl = ge->at(0).values[0], cl = ce->at(0).values[0];
    std::printf("eval loss after step %ld: gpu ga2 %.6f cpu ga2 %.6f\n", static_cast<long>(s + 1),
                gl, cl);
    EXPECT_NEAR(gl, cl, 1e-2 * std::abs(cl));
  }
  StatusOr<TrainerState> a = (*gpu)->ExportState();
  StatusOr<TrainerState> r = cpu.ExportState();
  ASSERT_TRUE(a.ok() && r.ok());
  EXPECT_EQ(a->steps_done, 2);
  ExpectParamsClose(*a, *r, accumulating->loaded.program.params, kLr, /*max_lrs=*/5,
                    /*max_far_fraction=*/0.02);
}

INSTANTIATE_TEST_SUITE_P(Devices, GpuEntryTest,
                         ::testing::Values(TestBackend::kEmu, TestBackend::kGpu),
                         [](const auto& info) { return TestBackendName(info.param); });
INSTANTIATE_TEST_SUITE_P(Devices, GpuTrainStepTest,
                         ::testing::Values(TestBackend::kEmu, TestBackend::kGpu),
                         [](const auto& info) { return TestBackendName(info.param); });

}  // namespace
}  // namespace gptc::rt::gpu::testing
