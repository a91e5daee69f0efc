// Autodiff on the whole GPT-2 loss (a gpt2-tiny-like config, small enough for
// finite differences): the gradient of random parameter elements against
// central differences, in f64.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "models/gpt2.h"
#include "passes/autodiff.h"
#include "passes/dce.h"
#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

const eval::EvalOptions kExact{.precision = eval::Precision::kF64, .round_16bit = false};

TEST(AutodiffGpt2Test, WholeLossMatchesFiniteDifferences) {
  models::GptConfig config{.name = "gpt2-fd", .layers = 2, .heads = 2, .width = 8,
                           .positions = 8, .vocab = 16};
  config.padded_vocab = models::PadVocab(config.vocab);
  StatusOr<frontend::TracedModule> traced = models::TraceGpt2Forward(config, 2, 4);
  ASSERT_TRUE(traced.ok()) << traced.status().message();
  const ir::Module& forward = *traced->module;
  std::unique_ptr<ir::Module> grads = forward.Clone();
  ASSERT_TRUE(Autodiff().Run(*grads).ok());
  ASSERT_TRUE(Dce().Run(*grads).ok());
  ASSERT_TRUE(ir::VerifyModule(*grads).ok());

  std::mt19937_64 rng(11);
  std::vector<eval::Literal> args;
  for (const ir::Instruction* p : forward.entry()->parameters()) {
    eval::Literal l = eval::Literal::Random(p->shape(), rng);  // tokens in [0, 16)
    if (ir::IsFloat(p->shape().dtype())) {
      for (double& x : l.values) x *= 0.3;
      // Layer-norm gains around 1, as trained models have them.
      if (p->shape().rank() == 1 && p->name().ends_with(".weight")) {
        for (double& x : l.values) x += 1.0;
      }
    }
    args.push_back(std::move(l));
  }
  StatusOr<eval::Literal> result = eval::Evaluate(*grads, args, kExact);
  ASSERT_TRUE(result.ok()) << result.status().message();

  constexpr double kEps = 1e-5;
  constexpr int kSamplesPerParam = 3;
  double worst = 0;
  int checked = 0;
  for (size_t p = 0; p < traced->params.size(); ++p) {
    const eval::Literal& grad = result->elements[1 + p];
    double scale = 0;
    for (double g : grad.values) scale = std::max(scale, std::abs(g));
    // Sample among the rows the loss can reach (the padded table rows have zero gradient).
    const int64_t reachable =
        traced->params[p].name == "wte.weight" ? config.vocab * config.width
                                               : static_cast<int64_t>(grad.values.size());
    std::uniform_int_distribution<int64_t> pick(0, reachable - 1);
    for (int s = 0; s < kSamplesPerParam; ++s) {
      const int64_t j = pick(rng);
      std::vector<eval::Literal> plus = args, minus = args;
      plus[p].values[j] += kEps;
      minus[p].values[j] -= kEps;
      StatusOr<eval::Literal> fp = eval::Evaluate(forward, plus, kExact);
      StatusOr<eval::Literal> fm = eval::Evaluate(forward, minus, kExact);
      ASSERT_TRUE(fp.ok() && fm.ok());
      const double fd = (fp->values[0] - fm->values[0]) / (2 * kEps);
      const double ad = grad.values[j];
      // Relative to the element, floored at 1e-3 of the tensor's largest gradient.
      const double denom = std::max({std::abs(fd), std::abs(ad), 1e-3 * scale, 1e-12});
      const double rel = std::abs(fd - ad) / denom;
      worst = std::max(worst, rel);
      ++checked;
      EXPECT_LT(rel, 1e-6) << traced->params[p].name << " element " << j << ": autodiff " << ad
                           << ", finite differences " << fd;
    }
  }
  EXPECT_EQ(checked, kSamplesPerParam * static_cast<int>(traced->params.size()));
  RecordProperty("worst_relative_error", std::to_string(worst));
}

}  // namespace
}  // namespace gptc::passes
