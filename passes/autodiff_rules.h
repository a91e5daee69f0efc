// Internal to the autodiff pass: the gradient builder and the per-opcode VJP rule table.
//
// A VJP rule gets the forward instruction y = f(x0, x1, ...), the adjoint dy
// (same shape as y) and which operands want a gradient, and returns one
// adjoint per operand (nullptr: none). Rules build IR through GradBuilder,
// which names every instruction `grad.<forward name>` and keeps the first
// error, so a rule reads like the math and is checked once at the end.
#ifndef GPTC_PASSES_AUTODIFF_RULES_H_
#define GPTC_PASSES_AUTODIFF_RULES_H_

#include <functional>
#include <string>
#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/support/status.h"

namespace gptc::passes::autodiff {

using ir::Instruction;

// Builds gradient IR at the end of a computation. After the first failed
// build every method returns nullptr (and nullptr operands propagate), and
// status() holds that first error.
class GradBuilder {
 public:
  explicit GradBuilder(ir::Computation* computation) : builder_(computation) {}

  // Names and metadata of what is built next come from `forward`:
  // `grad.<name>` and `grad.<metadata>` (empty metadata stays empty).
  void SetScope(const Instruction& forward);
  const Status& status() const { return status_; }
  void Fail(Status status);
  ir::Computation* computation() const { return builder_.computation(); }

  Instruction* Build(ir::Opcode opcode, std::vector<Instruction*> operands, ir::Attrs attrs,
                     const ir::Shape& declared = ir::Shape(), ir::Computation* called = nullptr);

  // A constant `value` of `shape`, built as an f32 scalar (converted when the
  // dtype differs, so values need not be exact in bf16) and broadcast.
  Instruction* Full(const ir::Shape& shape, double value);
  Instruction* Zeros(const ir::Shape& shape) { return Full(shape, 0.0); }
  Instruction* Iota(const ir::Shape& shape, int64_t dimension);

  Instruction* Unary(ir::Opcode opcode, Instruction* x);
  Instruction* Binary(ir::Opcode opcode, Instruction* a, Instruction* b);
  Instruction* Add(Instruction* a, Instruction* b) { return Binary(ir::Opcode::kAdd, a, b); }
  Instruction* Sub(Instruction* a, Instruction* b) { return Binary(ir::Opcode::kSub, a, b); }
  Instruction* Mul(Instruction* a, Instruction* b) { return Binary(ir::Opcode::kMul, a, b); }
  Instruction* Div(Instruction* a, Instruction* b) { return Binary(ir::Opcode::kDiv, a, b); }
  Instruction* Neg(Instruction* x) { return Unary(ir::Opcode::kNeg, x); }
  // x * c for a scalar c, in x's dtype.
  Instruction* Scale(Instruction* x, double c);
  Instruction* Convert(Instruction* x, ir::DType dtype);  // no-op when dtype matches
  Instruction* Compare(Instruction* a, Instruction* b, ir::CompareDirection direction);
  Instruction* Select(Instruction* pred, Instruction* on_true, Instruction* on_false);
  Instruction* Broadcast(Instruction* x, const std::vector<int64_t>& result_dims,
                         std::vector<int64_t> dimensions);
  Instruction* Reshape(Instruction* x, const std::vector<int64_t>& dims);
  Instruction* Transpose(Instruction* x, std::vector<int64_t> permutation);
  Instruction* Slice(Instruction* x, std::vector<int64_t> starts, std::vector<int64_t> limits);
  Instruction* Pad(Instruction* x, Instruction* value, std::vector<int64_t> low,
                   std::vector<int64_t> high);
  Instruction* Reduce(Instruction* x, std::vector<int64_t> dimensions, ir::ReduceKind kind,
                      ir::DType result_dtype);
  Instruction* ReduceAll(Instruction* x, ir::DType result_dtype);  // sum to a scalar
  Instruction* Dot(Instruction* lhs, Instruction* rhs, ir::DotDimensions dims,
                   ir::DType result_dtype);
  Instruction* Gather(Instruction* table, Instruction* indices, int64_t axis);
  Instruction* ScatterAdd(Instruction* operand, Instruction* indices, Instruction* updates,
                          int64_t axis);

 private:
  ir::Builder builder_;
  std::string name_ = "grad";
  Status status_;
};

// Differentiates through a called computation (fusion body, composite
// decomposition): `forward` calls it on its operands; returns one adjoint per
// operand (nullptr where not wanted or no gradient flows). Supplied by the driver.
using ThroughCalledFn = std::function<StatusOr<std::vector<Instruction*>>(
    const Instruction& forward, Instruction* dy, const std::vector<bool>& wants)>;

struct RuleContext {
  GradBuilder& g;
  ThroughCalledFn through_called;
};

// Returns one adjoint per operand of `y` (nullptr where wants[i] is false or
// nothing flows). Errors may be returned directly or left in ctx.g.
using VjpRule = StatusOr<std::vector<Instruction*>> (*)(RuleContext& ctx, const Instruction& y,
                                                        Instruction* dy,
                                                        const std::vector<bool>& wants);

// The rule for `opcode`, or nullptr if autodiff does not support it.
VjpRule FindRule(ir::Opcode opcode);

}  // namespace gptc::passes::autodiff

#endif  // GPTC_PASSES_AUTODIFF_RULES_H_
