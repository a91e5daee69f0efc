// Tracer: records a model written as ordinary C++ into an IR module.
//
//   Tracer tracer("gpt2-tiny");
//   Tensor tokens = tracer.Input("tokens", Shape(DType::kS32, {B, T}), SlotRole::kTokens);
//   {
//     auto scope = tracer.Scope("wte");
//     Tensor wte = tracer.Parameter("weight", {V, C}, InitRule::Normal(0.02));
//     ...
//   }
//   StatusOr<TracedModule> traced = tracer.Finish(loss);
//
// Every Tensor operation appends instructions through an ir::Builder, tagged
// with the dotted scope path ("h.3.attn") as metadata. There are no
// exceptions: the first error (a shape mismatch, say) is recorded with its
// scope and op, every later op returns an invalid Tensor without building
// anything, and Finish() returns that first error. So model code reads
// straight through and checks once at the end.
//
// Note [entry signature]: the entry's parameters are the model parameters in
// declaration order (0..P-1), then the data inputs in declaration order
// (P..). Parameters may be declared lazily, at first use, as nn modules do;
// their instructions are still placed first in the computation so the printed
// order matches the numbering.
#ifndef GPTC_FRONTEND_TRACER_H_
#define GPTC_FRONTEND_TRACER_H_

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/ir/module.h"
#include "compiler/program/program.h"
#include "compiler/support/status.h"
#include "frontend/tensor.h"

namespace gptc::frontend {

// The parameter and input specs of a traced module are the program
// contract's (compiler/program/).
using program::InitRule;
using program::InputSpec;
using program::ParamSpec;

// The result of tracing: a verified module whose entry takes
// `params` then `inputs` (Note [entry signature]).
struct TracedModule {
  std::unique_ptr<ir::Module> module;
  std::vector<ParamSpec> params;
  std::vector<InputSpec> inputs;

  int64_t ParameterValues() const;  // total elements over `params`
};

class Tracer {
 public:
  explicit Tracer(std::string module_name, std::string entry_name = "forward");
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Pops its scope when it goes out of scope.
  class [[nodiscard]] ScopeGuard {
   public:
    ScopeGuard(ScopeGuard&& other) noexcept : tracer_(other.tracer_) { other.tracer_ = nullptr; }
    ScopeGuard(const ScopeGuard&) = delete;
    ScopeGuard& operator=(const ScopeGuard&) = delete;
    ScopeGuard& operator=(ScopeGuard&&) = delete;
    ~ScopeGuard();

   private:
    friend class Tracer;
    explicit ScopeGuard(Tracer* tracer) : tracer_(tracer) {}
    Tracer* tracer_;
  };

  // Enters a named scope; instructions built inside carry "outer.name" as metadata
  // and parameters declared inside are named "outer.name.PARAM".
  ScopeGuard Scope(std::string_view name);
  // A scope holding transformer block `layer`: its instructions carry the
  // layer in their role (compiler/ir/role.h), which remat and the reports
  // read; the name is for people only.
  ScopeGuard LayerScope(std::string_view name, int64_t layer);
  // The dotted path of the current scopes ("h.3.attn"; "" at top level).
  const std::string& scope_path() const;

  // Declares a model parameter named `<scope path>.<name>` (e.g. "h.0.ln_1.weight").
  Tensor Parameter(std::string_view name, std::vector<int64_t> dims, InitRule init,
                   ir::DType dtype = ir::DType::kF32);
  // Declares a data input (numbered after all parameters, see Note [entry
  // signature]) holding `role` (tokens, targets or other data): the train
  // step's signature takes the role from here, never from the name.
  Tensor Input(std::string_view name, const ir::Shape& shape,
               program::SlotRole role = program::SlotRole::kData);

  // Makes `root` the result and returns the verified module, or the first
  // error. Values the root does not depend on are dropped (parameters stay:
  // they are the signature). The tracer is spent afterwards: its Tensors
  // point into the returned module and must not be used to build more.
  StatusOr<TracedModule> Finish(const Tensor& root);
  // The same with a tuple of `roots` as the result (an entry of several outputs).
  StatusOr<TracedModule> FinishTuple(const std::vector<Tensor>& roots);

  // ---- For op implementations (tensor.cc, nn.cc) -------------------------

  bool failed() const { return !error_.ok(); }
  const Status& error() const { return error_; }
  // Records `status` as "SCOPE: message" unless an error is already recorded.
  void Fail(const Status& status);
  // Returns a Tensor for a successfully built instruction, else records the
  // builder's error after `what()` (e.g. "matmul of f32[4,8] and f32[9,2]").
  template <typename Describe>
  Tensor Adopt(StatusOr<ir::Instruction*> built, Describe&& what) {
    if (!built.ok()) {
      FailBuild(built.status(), what());
      return Tensor(this, nullptr);
    }
    return Register(*built);
  }
  // The builder of the computation being traced now (the entry, or a decomposition).
  ir::Builder& builder();
  ir::Computation* computation() const;

  // The decomposition of a composite op: a computation taking `params` and
  // returning what `body` builds from them with ordinary Tensor ops.
  // Identical requests (same name, parameter shapes and `attrs_key`) share
  // one computation, so 48 attention layers add one decomposition, not 48.
  // Returns nullptr after recording an error.
  using Body = std::function<Tensor(std::span<const Tensor> params)>;
  ir::Computation* Decomposition(std::string_view name, const std::vector<ir::Shape>& params,
                                 std::string_view attrs_key, const Body& body);

 private:
  struct Frame;

  void PushScope(std::string_view name, int32_t layer);
  void PopScope();
  void FailBuild(const Status& status, std::string_view what);
  Tensor Register(ir::Instruction* inst);
  std::string ErrorScope() const;
  Tensor DeclareParameter(std::string_view name, const ir::Shape& shape, int64_t number,
                          ir::Instruction* before);

  std::string module_name_;  // for errors once module_ has been handed out
  std::unique_ptr<ir::Module> module_;
  std::unique_ptr<ir::Computation> entry_;      // moved into module_ by Finish
  std::vector<std::unique_ptr<Frame>> frames_;  // frames_[0] traces the entry
  std::vector<ParamSpec> params_;
  std::vector<InputSpec> inputs_;
  std::vector<ir::Instruction*> input_instructions_;
  std::map<std::string, ir::Computation*> decompositions_;
  Status error_;
  bool finished_ = false;
};

}  // namespace gptc::frontend

#endif  // GPTC_FRONTEND_TRACER_H_
