// Literal: a host tensor value used by the reference evaluator, tests and tools.
#ifndef GPTC_COMPILER_EVAL_LITERAL_H_
#define GPTC_COMPILER_EVAL_LITERAL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/shape.h"

namespace gptc::eval {

// An array value (row-major; every dtype's values are exact in a double:
// pred as 0/1) or a tuple of literals.
struct Literal {
  ir::Shape shape;
  std::vector<double> values;     // arrays only
  std::vector<Literal> elements;  // tuples only

  static Literal Zeros(const ir::Shape& shape);
  // Deterministic random values suited to `shape`'s dtype: floats normal(0,1)
  // rounded to the dtype, s32/u16 uniform in [0, 16), pred fair coin. Tuples
  // are filled element by element.
  static Literal Random(const ir::Shape& shape, std::mt19937_64& rng);

  // "f32[2,3] sum=1.25 abs=3.5" style summary used by `gptc eval`.
  std::string Summary() const;
};

}  // namespace gptc::eval

#endif  // GPTC_COMPILER_EVAL_LITERAL_H_
