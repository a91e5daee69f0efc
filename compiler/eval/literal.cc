#include "compiler/eval/literal.h"

#include <fmt/format.h>

#include <cmath>

#include "compiler/support/float_bits.h"

namespace gptc::eval {

Literal Literal::Zeros(const ir::Shape& shape) {
  Literal literal;
  literal.shape = shape;
  if (shape.is_tuple()) {
    for (const ir::Shape& element : shape.tuple_elements()) {
      literal.elements.push_back(Zeros(element));
    }
  } else {
    literal.values.assign(shape.num_elements(), 0.0);
  }
  return literal;
}

Literal Literal::Random(const ir::Shape& shape, std::mt19937_64& rng) {
  Literal literal;
  literal.shape = shape;
  if (shape.is_tuple()) {
    for (const ir::Shape& element : shape.tuple_elements()) {
      literal.elements.push_back(Random(element, rng));
    }
    return literal;
  }
  const int64_t n = shape.num_elements();
  literal.values.resize(n);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> small_int(0, 15);
  for (double& v : literal.values) {
    switch (shape.dtype()) {
      case ir::DType::kF32:
        v = static_cast<float>(normal(rng));
        break;
      case ir::DType::kBF16:
        v = RoundToBF16(static_cast<float>(normal(rng)));
        break;
      case ir::DType::kF16:
        v = RoundToF16(static_cast<float>(normal(rng)));
        break;
      case ir::DType::kS32:
      case ir::DType::kU16:
        v = small_int(rng);
        break;
      case ir::DType::kPred:
        v = static_cast<double>(rng() & 1);
        break;
    }
  }
  return literal;
}

std::string Literal::Summary() const {
  if (shape.is_tuple()) {
    std::string out;
    for (size_t i = 0; i < elements.size(); ++i) {
      if (i > 0) out += "; ";
      out += elements[i].Summary();
    }
    return out;
  }
  double sum = 0, abs = 0;
  for (double v : values) {
    sum += v;
    abs += std::abs(v);
  }
  return fmt::format("{} sum={:.6g} abs={:.6g}", shape.ToString(), sum, abs);
}

}  // namespace gptc::eval
