// The tanh GELU and its derivative as cuBLASLt's GELU epilogues compute them,
// checked on sample points, and the one GELU matcher: the gemm fusion rule
// runs it on its planner's view of the entry (passes/gemm_fusion_epilogues.cc,
// which also holds the backward's matcher), mixed precision on plain IR.
//
// Note [GELU epilogues]
// cuBLASLt computes GPT-2's MLP activation and its gradient inside the gemms
// around it, with bias and aux of D's type (cublasLt.h):
//   forward   aux = A B + bias; D = GELU(aux)      CUBLASLT_EPILOGUE_GELU_AUX_BIAS
//   backward  D = (A B) * GELU'(aux)               CUBLASLT_EPILOGUE_DGELU
// where the forward's A B is c_fc (aux: the pre-activation) and the
// backward's A B the gradient of c_proj's input. The IR gets there in steps:
//  - mixed precision (before autodiff) gives c_fc's bias and pre-activation
//    bf16 copies, and the GELU reads the widened bf16 pre-activation (Note
//    [bf16 GELU epilogue] in mixed_precision.h), so that autodiff's GELU
//    backward is a function of that bf16 value and the incoming gradient;
//  - remat recomputes the GELU's intermediates from the bf16 pre-activation
//    (Note [cheap recomputation] in remat.cc): the one tensor the backward
//    keeps, where it used to keep the f32 one and recompute the GELU in a
//    kernel of its own;
//  - fusion puts the bias, the bf16 pre-activation (an extra output: aux)
//    and the GELU into the c_fc gemm, and the GELU backward (the recomputed
//    intermediates and their products with the gradient) into the gemm that
//    produces the gradient (passes/fusion.h rule 4);
//  - the gemm rule writes both into the gemms' epilogue records as it takes
//    them (Note [gemm epilogue records] in gemm_epilogue.h), and the gemm
//    plan reads or writes aux in D's layout.
// The bias gradient stays in the weight-gradient gemm of c_fc (BGRADA): it
// sums the bf16 gradient DGELU writes, which that gemm reads anyway; DGELU_BGRAD
// would save nothing and has no fallback kernel (Note [epilogue fallback]
// in compiler/program/plan.h).
// Structure does not prove that a region computes GELU: the matchers take
// any elementwise region of the right form and then evaluate it on sample
// points against GeluTanh / GeluTanhGrad (ComputesOnSamples), so that a
// region computing something else (the erf GELU, another activation) is
// never handed to cuBLASLt.
#ifndef GPTC_COMPILER_ANALYSIS_GELU_EPILOGUE_H_
#define GPTC_COMPILER_ANALYSIS_GELU_EPILOGUE_H_

#include <functional>
#include <optional>
#include <span>
#include <unordered_set>
#include <vector>

#include "compiler/ir/instruction.h"

namespace gptc::analysis {

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and its derivative.
double GeluTanh(double x);
double GeluTanhGrad(double x);

// Whether `value`, an elementwise function of `leaves` (its cone reaches
// nothing else but constants and broadcast scalars), equals `f` at every
// point of `points` (one value per leaf each, exact in the leaf's dtype),
// evaluated by the reference evaluator in f32 to within 1e-5 relative.
// Narrowing converts at the top of the cone are looked through: their
// rounding is the store's, not the function's.
bool ComputesOnSamples(const ir::Instruction* value,
                       const std::vector<const ir::Instruction*>& leaves,
                       const std::vector<std::vector<double>>& points,
                       const std::function<double(std::span<const double>)>& f);

// value == GELU(x) and value == dy * GELU'(x) on sample points (x in [-6, 6]).
bool ComputesGelu(const ir::Instruction* value, const ir::Instruction* x);
bool ComputesGeluGrad(const ir::Instruction* value, const ir::Instruction* dy,
                      const ir::Instruction* x);

// How the GELU matcher walks a graph: plain IR (MatchGelu), or the fusion
// planner's view of the entry, which looks through the ops it recomputes in
// every kernel and passes over grouped instructions
// (passes/gemm_fusion_epilogues.cc).
class GeluGraph {
 public:
  virtual ~GeluGraph() = default;
  // Appends the instructions reading `x`.
  virtual void Users(const ir::Instruction* x, std::vector<const ir::Instruction*>& out) const = 0;
  // Appends what operand `op` brings into a region: nothing for a constant
  // (or an op of constants); else the values it is.
  virtual void Sources(const ir::Instruction* op,
                       std::vector<const ir::Instruction*>& out) const = 0;
  // Whether `u` may join a region.
  virtual bool Available(const ir::Instruction* u) const = 0;
  // Whether every use of `x` is by a member of `s` (the root is used outside).
  virtual bool UsedOnlyBy(const ir::Instruction* x,
                          const std::unordered_set<const ir::Instruction*>& s) const = 0;
  // Sorts `v` into computation order.
  virtual void Sort(std::vector<const ir::Instruction*>& v) const = 0;
};

// The tanh GELU of `x` seen through `graph`: the available elementwise users
// of `x`, of x's dims, closed over x, themselves and constants, 5 to 16 of
// them, one a tanh (or erf), with one value used elsewhere, computed last,
// which must pass ComputesGelu (the erf form does not). In computation
// order, that value last; empty when there is none.
std::vector<const ir::Instruction*> MatchGeluRegion(const GeluGraph& graph,
                                                    const ir::Instruction* x);

// A GELU region of plain IR: its ops in computation order, and the one value
// used outside them (the activation, after any converts), the last.
struct GeluRegion {
  std::vector<const ir::Instruction*> ops;
  const ir::Instruction* sink = nullptr;
};

// MatchGeluRegion in plain IR, where a constant is a constant or a broadcast
// or convert of one: the frontend's GELU that mixed precision finds.
std::optional<GeluRegion> MatchGelu(const ir::Instruction* x);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_GELU_EPILOGUE_H_
