// Shared helpers of the evaluator tests: build a one-computation module with
// the Builder and evaluate it.
#ifndef GPTC_TESTS_COMPILER_EVAL_EVAL_TEST_UTIL_H_
#define GPTC_TESTS_COMPILER_EVAL_EVAL_TEST_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/builder.h"
#include "compiler/ir/module.h"

namespace gptc::eval::testing {

// The value of `s`; a test that builds an ill-typed graph is itself broken.
template <typename T>
T Must(StatusOr<T> s) {
  if (!s.ok()) {
    std::fprintf(stderr, "unexpected error: %s\n", s.status().message().c_str());
    std::abort();
  }
  return std::move(s).value();
}

inline Literal Lit(ir::Shape shape, std::vector<double> values) {
  return Literal{shape, values, {}};
}

// 0, 1, 2, ... in `shape`.
inline std::vector<double> Range(const ir::Shape& shape) {
  std::vector<double> v(shape.num_elements());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return v;
}

// A module with one entry computation `main` under construction.
struct Graph {
  ir::Module module{"test"};
  ir::Computation* main = module.AddComputation("main");
  ir::Builder b{main};
  Graph() { module.set_entry(main); }

  ir::Instruction* Param(int64_t n, ir::Shape shape, std::string_view name = {}) {
    return Must(b.Parameter(n, shape, name));
  }
  ir::Instruction* Const(ir::Shape shape, std::vector<double> values) {
    return Must(b.Constant(shape, values));
  }
  // Evaluates with `root` as the result.
  StatusOr<Literal> TryRun(ir::Instruction* root, std::vector<Literal> args = {},
                           EvalOptions options = {}) {
    main->set_root(root);
    return Evaluate(module, args, options);
  }
  Literal Run(ir::Instruction* root, std::vector<Literal> args = {}, EvalOptions options = {}) {
    return Must(TryRun(root, std::move(args), options));
  }
};

}  // namespace gptc::eval::testing

#endif  // GPTC_TESTS_COMPILER_EVAL_EVAL_TEST_UTIL_H_
