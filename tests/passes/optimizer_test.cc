#include "passes/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "models/gpt2.h"
#include "passes/autodiff.h"
#include "passes/dce.h"
#include "passes/train_step.h"
#include "tests/testing/pass_harness.h"
#include "tests/testing/small_models.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::Differentiated;
using ::gptc::testing::ParseOrDie;

// loss = sum(w * broadcast(x)) + sum(b * b) (tests/testing/small_models.h).
constexpr std::string_view kModel = ::gptc::testing::kLinearLossModule;

// An independent AdamW (as PyTorch's torch.optim.AdamW and llm.c), in double.
struct ReferenceAdamW {
  AdamWOptions o;
  // Updates p, m, v in place; grads are scaled by `clip_scale` first.
  void Update(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
              const std::vector<double>& g, double clip_scale, bool decay, double step,
              double lr) const {
    for (size_t i = 0; i < p.size(); ++i) {
      double gi = g[i] * clip_scale;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
      double m_hat = m[i] / (1 - std::pow(o.beta1, step));
      double v_hat = v[i] / (1 - std::pow(o.beta2, step));
      p[i] -= lr * (m_hat / (std::sqrt(v_hat) + o.eps) + (decay ? o.weight_decay * p[i] : 0.0));
    }
  }
};

void ExpectNear(const std::vector<double>& got, const std::vector<double>& want, double tol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " " << i;
  }
}

void CheckOneStep(double clip_norm, double step) {
  SCOPED_TRACE(fmt::format("clip_norm {} step {}", clip_norm, step));
  std::unique_ptr<ir::Module> module = Differentiated(kModel);
  OptimizerOptions options;
  options.adamw.clip_norm = clip_norm;
  options.adamw.weight_decay = 0.1;
  StatusOr<bool> changed = Optimizer(options).Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  Status verified = ir::VerifyModule(*module);
  ASSERT_TRUE(verified.ok()) << verified.message() << "\n" << ir::PrintModule(*module);

  std::mt19937_64 rng(42);
  auto random = [&](const ir::Shape& s, double scale, bool positive) {
    eval::Literal l = eval::Literal::Random(s, rng);
    for (double& x : l.values) {
      x = static_cast<float>(positive ? std::abs(x) * scale : x * scale);
    }
    return l;
  };
  const ir::Shape w_shape(ir::DType::kF32, {3, 4}), b_shape(ir::DType::kF32, {4});
  std::vector<eval::Literal> args = {
      random(w_shape, 1.0, false), random(b_shape, 1.0, false),      // w, b
      random(w_shape, 0.1, false), random(b_shape, 0.1, false),      // m
      random(w_shape, 0.1, true),  random(b_shape, 0.1, true),       // v
      eval::Literal::Random(ir::Shape(ir::DType::kS32, {4}), rng),  // x
      eval::Literal::Zeros(ir::Shape::Scalar(ir::DType::kF32)),      // step
      eval::Literal::Zeros(ir::Shape::Scalar(ir::DType::kF32))};     // lr
  args[7].values[0] = step;
  args[8].values[0] = static_cast<float>(3e-3);
  const double lr = args[8].values[0];
  StatusOr<eval::Literal> result = eval::Evaluate(*module, args);
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(result->elements.size(), 8u);  // loss, norm, w, b, m_w, m_b, v_w, v_b

  // The reference, from the same inputs.
  std::vector<double> w = args[0].values, b = args[1].values;
  std::vector<double> mw = args[2].values, mb = args[3].values;
  std::vector<double> vw = args[4].values, vb = args[5].values;
  const std::vector<double>& x = args[6].values;
  std::vector<double> gw(12), gb(4);
  double loss = 0, sumsq = 0;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      loss += w[i * 4 + j] * x[j];
      gw[i * 4 + j] = x[j];
    }
  }
  for (int j = 0; j < 4; ++j) {
    loss += b[j] * b[j];
    gb[j] = 2 * b[j];
  }
  for (double g : gw) sumsq += g * g;
  for (double g : gb) sumsq += g * g;
  const double norm = std::sqrt(sumsq);
  const double scale = clip_norm > 0 ? std::min(1.0, clip_norm / (norm + 1e-6)) : 1.0;
  ReferenceAdamW ref{options.adamw};
  ref.Update(w, mw, vw, gw, scale, /*decay=*/true, step, lr);
  ref.Update(b, mb, vb, gb, scale, /*decay=*/false, step, lr);

  constexpr double kTol = 2e-6;
  ExpectNear(result->elements[0].values, {loss}, kTol, "loss");
  ExpectNear(result->elements[1].values, {norm}, kTol, "grad_norm (pre-clip)");
  ExpectNear(result->elements[2].values, w, kTol, "new w");
  ExpectNear(result->elements[3].values, b, kTol, "new b");
  ExpectNear(result->elements[4].values, mw, kTol, "m w");
  ExpectNear(result->elements[5].values, mb, kTol, "m b");
  ExpectNear(result->elements[6].values, vw, kTol, "v w");
  ExpectNear(result->elements[7].values, vb, kTol, "v b");
}

TEST(OptimizerTest, OneStepMatchesReferenceWithClipping) { CheckOneStep(1.0, 1); }
TEST(OptimizerTest, OneStepMatchesReferenceWithoutClipping) { CheckOneStep(0.0, 1); }
TEST(OptimizerTest, LaterStepBiasCorrection) { CheckOneStep(1e6, 7); }

TEST(OptimizerTest, SignatureAndNames) {
  std::unique_ptr<ir::Module> module = Differentiated(kModel);
  Optimizer optimizer;
  ASSERT_TRUE(optimizer.Run(*module).ok());
  const EntrySignature& sig = optimizer.signature();
  Status fits = CheckSignature(*module, sig);
  EXPECT_TRUE(fits.ok()) << fits.message();
  EXPECT_EQ(DescribeSignature(sig),
            "in 0 param[0] %w f32[3,4]\n"
            "in 1 param[1] %b f32[4]\n"
            "in 2 adam_m[0] %adam_m.w f32[3,4]\n"
            "in 3 adam_m[1] %adam_m.b f32[4]\n"
            "in 4 adam_v[0] %adam_v.w f32[3,4]\n"
            "in 5 adam_v[1] %adam_v.b f32[4]\n"
            "in 6 data %x s32[4]\n"
            "in 7 step %step f32[]\n"
            "in 8 lr %lr f32[]\n"
            "out 0 loss %loss f32[]\n"
            "out 1 grad_norm %grad_norm f32[]\n"
            "out 2 param[0] %new.w f32[3,4] donates in 0\n"
            "out 3 param[1] %new.b f32[4] donates in 1\n"
            "out 4 adam_m[0] %new.adam_m.w f32[3,4] donates in 2\n"
            "out 5 adam_m[1] %new.adam_m.b f32[4] donates in 3\n"
            "out 6 adam_v[0] %new.adam_v.w f32[3,4] donates in 4\n"
            "out 7 adam_v[1] %new.adam_v.b f32[4] donates in 5\n");
  // CheckSignature names the first difference from the module.
  EntrySignature wrong = sig;
  wrong.inputs[1].shape = ir::Shape(ir::DType::kF32, {5});
  EXPECT_EQ(CheckSignature(*module, wrong).message(),
            "%main: parameter 1 is %b f32[4], the signature's input 1 is %b f32[5]");
  wrong = sig;
  wrong.outputs.pop_back();
  EXPECT_EQ(CheckSignature(*module, wrong).message(),
            "%main: root is (f32[], f32[], f32[3,4], f32[4], f32[3,4], f32[4], f32[3,4], f32[4]), "
            "expected a tuple of 7 outputs");
  const ir::Instruction* p_new = module->entry()->root()->operand(2);
  EXPECT_EQ(p_new->name(), "adamw.w.new");
  EXPECT_EQ(p_new->metadata(), "optimizer.w");
  // Only the matrix decays.
  EXPECT_NE(module->entry()->FindInstruction("adamw.w.decayed"), nullptr);
  EXPECT_EQ(module->entry()->FindInstruction("adamw.b.decayed"), nullptr);
}

TEST(OptimizerTest, FailsOnModuleThatIsNotAnAutodiffOutput) {
  std::unique_ptr<ir::Module> module = ParseOrDie(kModel);
  StatusOr<bool> r = Optimizer().Run(*module);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "optimizer: entry %main is not an autodiff output (loss, gradients...): root %loss "
            "is f32[], not a tuple (run autodiff first, once)");
  // Twice fails too: the root then has 2 + 3P elements.
  std::unique_ptr<ir::Module> twice = Differentiated(kModel);
  ASSERT_TRUE(Optimizer().Run(*twice).ok());
  StatusOr<bool> again = Optimizer().Run(*twice);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("not an autodiff output"), std::string::npos);
}

// Gradient accumulation: accumulate over K micro-batches + apply equals one
// step on the concatenated batch.
models::GptConfig SmallConfig() {
  models::GptConfig c{.name = "gpt2-small-test", .layers = 1, .heads = 2, .width = 16,
                      .positions = 8, .vocab = 64};
  c.padded_vocab = models::PadVocab(c.vocab);
  return c;
}

StatusOr<TrainProgram> Program(int64_t batch, int64_t seq, int64_t accum) {
  ASSIGN_OR_RETURN(frontend::TracedModule traced,
                   models::TraceGpt2Forward(SmallConfig(), batch, seq));
  TrainStepOptions options;
  options.grad_accum = accum;
  // Some gradients are exactly 0 in exact arithmetic and rounding noise in
  // f32 (the attention key bias: softmax ignores a constant shift); with a
  // tiny eps Adam blows that noise up to +-lr, differently for the two
  // summation orders. A larger eps keeps the update a smooth function of g.
  options.adamw.eps = 1e-3;
  return BuildTrainProgram(std::move(traced.module), std::move(traced.params), traced.inputs,
                           options);
}

TEST(OptimizerTest, GradAccumulationMatchesOneBigBatch) {
  constexpr int64_t kB = 4, kT = 4, kK = 2;
  StatusOr<TrainProgram> full = Program(kB, kT, 1);
  StatusOr<TrainProgram> acc = Program(kB / kK, kT, kK);
  ASSERT_TRUE(full.ok()) << full.status().message();
  ASSERT_TRUE(acc.ok()) << acc.status().message();
  ASSERT_EQ(acc->entries.size(), 2u);
  const TrainEntry& step = full->entries[0];
  const TrainEntry* accumulate = acc->Find(program::EntryRole::kAccumulate);
  const TrainEntry* apply = acc->Find(program::EntryRole::kApply);
  ASSERT_NE(accumulate, nullptr);
  ASSERT_NE(apply, nullptr);
  EXPECT_EQ(accumulate->module->name(), "gpt2-small-test.accumulate");
  for (const TrainEntry* e : {&step, accumulate, apply}) {
    Status s = ir::VerifyModule(*e->module);
    EXPECT_TRUE(s.ok()) << e->name() << ": " << s.message();
  }

  const int64_t n = static_cast<int64_t>(full->params.size());
  std::mt19937_64 rng(5);
  std::vector<eval::Literal> params, m, v;
  for (const program::ParamSpec& spec : full->params) {
    eval::Literal p = eval::Literal::Random(spec.shape, rng);
    for (double& x : p.values) x = static_cast<float>(0.2 * x);
    params.push_back(p);
    m.push_back(eval::Literal::Zeros(spec.shape));
    v.push_back(eval::Literal::Zeros(spec.shape));
  }
  eval::Literal tokens = eval::Literal::Random(ir::Shape(ir::DType::kS32, {kB, kT}), rng);
  eval::Literal targets = eval::Literal::Random(ir::Shape(ir::DType::kS32, {kB, kT}), rng);
  eval::Literal step_no = eval::Literal::Zeros(ir::Shape::Scalar(ir::DType::kF32));
  step_no.values[0] = 1;
  eval::Literal lr = eval::Literal::Zeros(ir::Shape::Scalar(ir::DType::kF32));
  lr.values[0] = static_cast<float>(1e-2);

  std::vector<eval::Literal> args;
  for (auto* list : {&params, &m, &v}) args.insert(args.end(), list->begin(), list->end());
  args.insert(args.end(), {tokens, targets, step_no, lr});
  StatusOr<eval::Literal> want = eval::Evaluate(*step.module, args);
  ASSERT_TRUE(want.ok()) << want.status().message();

  std::vector<eval::Literal> grad_acc;
  for (const program::ParamSpec& spec : full->params) {
    grad_acc.push_back(eval::Literal::Zeros(spec.shape));
  }
  double loss = 0;
  const int64_t micro = kB / kK * kT;
  for (int64_t k = 0; k < kK; ++k) {
    std::vector<eval::Literal> a = params;
    a.insert(a.end(), grad_acc.begin(), grad_acc.end());
    eval::Literal tk = eval::Literal::Zeros(ir::Shape(ir::DType::kS32, {kB / kK, kT}));
    eval::Literal tg = tk;
    tk.values.assign(tokens.values.begin() + k * micro, tokens.values.begin() + (k + 1) * micro);
    tg.values.assign(targets.values.begin() + k * micro,
                     targets.values.begin() + (k + 1) * micro);
    a.insert(a.end(), {tk, tg});
    StatusOr<eval::Literal> r = eval::Evaluate(*accumulate->module, a);
    ASSERT_TRUE(r.ok()) << r.status().message();
    loss += r->elements[0].values[0] / kK;
    for (int64_t i = 0; i < n; ++i) grad_acc[i] = r->elements[1 + i];
  }
  std::vector<eval::Literal> a;
  for (auto* list : {&params, &m, &v, &grad_acc}) a.insert(a.end(), list->begin(), list->end());
  a.insert(a.end(), {step_no, lr});
  StatusOr<eval::Literal> got = eval::Evaluate(*apply->module, a);
  ASSERT_TRUE(got.ok()) << got.status().message();

  EXPECT_NEAR(loss, want->elements[0].values[0], 1e-5);
  EXPECT_NEAR(got->elements[0].values[0], want->elements[1].values[0],
              1e-5 * want->elements[1].values[0]);
  ASSERT_EQ(got->elements.size(), want->elements.size() - 1);
  for (size_t i = 1; i < got->elements.size(); ++i) {
    SCOPED_TRACE(fmt::format("output {}", i));
    ExpectNear(got->elements[i].values, want->elements[i + 1].values, 2e-5, "state");
  }
}

}  // namespace
}  // namespace gptc::passes
