// Test helpers for passes: run a pass on IR text and check that the
// reference evaluator gives the same results before and after on random inputs.
#ifndef GPTC_TESTS_TESTING_PASS_HARNESS_H_
#define GPTC_TESTS_TESTING_PASS_HARNESS_H_

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "compiler/pass/pass.h"

namespace gptc::testing {

inline std::unique_ptr<ir::Module> ParseOrDie(std::string_view text) {
  auto module = ir::ParseAndVerifyModule(text, "<test>");
  EXPECT_TRUE(module.ok()) << module.status().message();
  return module.ok() ? std::move(module).value() : nullptr;
}

// Flattens tuples so results can be compared element by element.
inline void Flatten(const eval::Literal& l, std::vector<const eval::Literal*>& out) {
  if (l.shape.is_tuple()) {
    for (const eval::Literal& e : l.elements) Flatten(e, out);
  } else {
    out.push_back(&l);
  }
}

// Expects equal shapes and values within `rel_tol` (relative to max(1, |a|)).
inline void ExpectLiteralsNear(const eval::Literal& a, const eval::Literal& b, double rel_tol) {
  std::vector<const eval::Literal*> fa, fb;
  Flatten(a, fa);
  Flatten(b, fb);
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) {
    ASSERT_EQ(fa[i]->shape, fb[i]->shape) << "output " << i;
    for (size_t j = 0; j < fa[i]->values.size(); ++j) {
      double x = fa[i]->values[j], y = fb[i]->values[j];
      if (std::isnan(x) && std::isnan(y)) continue;
      ASSERT_NEAR(x, y, rel_tol * std::max(1.0, std::abs(x)))
          << "output " << i << " element " << j;
    }
  }
}

// Runs `pass` on a copy of `module`, verifies the result, and compares the
// evaluator's outputs before and after on `trials` random inputs. Returns
// whether the pass reported a change, and leaves the transformed module in `after`.
inline bool RunPassAndCompare(pass::Pass& pass, const ir::Module& module,
                              std::unique_ptr<ir::Module>& after, int trials = 3,
                              double rel_tol = 0.0) {
  after = module.Clone();
  StatusOr<bool> changed = pass.Run(*after);
  EXPECT_TRUE(changed.ok()) << changed.status().message();
  if (!changed.ok()) return false;
  Status verified = ir::VerifyModule(*after);
  EXPECT_TRUE(verified.ok()) << verified.message() << "\n" << ir::PrintModule(*after);
  std::mt19937_64 rng(1234);
  for (int t = 0; t < trials; ++t) {
    std::vector<eval::Literal> args;
    for (const ir::Instruction* p : module.entry()->parameters()) {
      args.push_back(eval::Literal::Random(p->shape(), rng));
    }
    StatusOr<eval::Literal> before_result = eval::Evaluate(module, args);
    StatusOr<eval::Literal> after_result = eval::Evaluate(*after, args);
    EXPECT_TRUE(before_result.ok()) << before_result.status().message();
    EXPECT_TRUE(after_result.ok()) << after_result.status().message();
    if (!before_result.ok() || !after_result.ok()) return *changed;
    ExpectLiteralsNear(*before_result, *after_result, rel_tol);
  }
  return *changed;
}

// The one gemm fusion of `m`'s entry (a failure if there are two), or null.
inline const ir::Instruction* OnlyGemm(const ir::Module& m) {
  const ir::Instruction* gemm = nullptr;
  for (const auto& inst : m.entry()->instructions()) {
    if (inst->opcode() == ir::Opcode::kFusion &&
        inst->attrs().fusion_kind == ir::FusionKind::kGemm) {
      EXPECT_EQ(gemm, nullptr) << "two gemm fusions";
      gemm = inst.get();
    }
  }
  return gemm;
}

}  // namespace gptc::testing

#endif  // GPTC_TESTS_TESTING_PASS_HARNESS_H_
