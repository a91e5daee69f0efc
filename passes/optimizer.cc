#include "passes/optimizer.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/ir/module.h"
#include "passes/zero_shard.h"

namespace gptc::passes {

namespace {

using ir::DType;
using ir::Instruction;
using ir::Opcode;
using ir::Shape;

// What the autodiff output holds: the trainable parameters with their
// gradients, the data parameters, and the loss.
struct AutodiffOutput {
  std::vector<Instruction*> params;  // float parameters, in parameter order
  std::vector<Instruction*> grads;   // grads[i] is d loss / d params[i]
  std::vector<Instruction*> data;    // the other parameters, in parameter order
  Instruction* loss = nullptr;
  Instruction* root = nullptr;
};

StatusOr<AutodiffOutput> Inspect(const ir::Module& module) {
  const ir::Computation* entry = module.entry();
  if (entry == nullptr || entry->root() == nullptr) return Error("optimizer: module has no entry");
  auto fail = [&](std::string_view why) {
    return Error(
        "optimizer: entry %{} is not an autodiff output (loss, gradients...): {} (run autodiff "
        "first, once)",
        entry->name(), why);
  };
  AutodiffOutput out;
  for (Instruction* p : entry->parameters()) {
    if (p == nullptr) return fail("its parameter numbers have gaps");
    (ir::IsFloat(p->shape().dtype()) ? out.params : out.data).push_back(p);
  }
  Instruction* root = entry->root();
  if (root->opcode() != Opcode::kTuple) {
    return fail(fmt::format("root %{} is {}, not a tuple", root->name(), root->shape().ToString()));
  }
  if (root->operand_count() != static_cast<int64_t>(out.params.size()) + 1) {
    return fail(fmt::format("root %{} has {} elements, expected 1 + {} float parameters",
                            root->name(), root->operand_count(), out.params.size()));
  }
  out.root = root;
  out.loss = root->operand(0);
  if (out.loss->shape() != Shape::Scalar(DType::kF32)) {
    return fail(fmt::format("loss %{} is {}, not f32[]", out.loss->name(),
                            out.loss->shape().ToString()));
  }
  for (size_t i = 0; i < out.params.size(); ++i) {
    Instruction* g = root->operand(static_cast<int64_t>(i) + 1);
    if (out.params[i]->shape().dtype() != DType::kF32) {
      return fail(fmt::format("parameter %{} is {}; the optimizer keeps f32 master weights",
                              out.params[i]->name(), out.params[i]->shape().ToString()));
    }
    if (g->shape() != out.params[i]->shape()) {
      return fail(fmt::format("element {} (%{}, {}) does not match parameter %{} ({})", i + 1,
                              g->name(), g->shape().ToString(), out.params[i]->name(),
                              out.params[i]->shape().ToString()));
    }
    out.grads.push_back(g);
  }
  return out;
}

// The role of parameter `p`'s own optimizer work, and of the work all
// parameters share.
ir::Role UpdateRole(const Instruction* p) { return {ir::Phase::kUpdate, p->role().layer}; }
constexpr ir::Role kSharedRole{ir::Phase::kOptimizer};

// Builds named f32 instructions with one metadata; a thin layer over Builder
// so each update line below reads like its formula.
class Emitter {
 public:
  explicit Emitter(ir::Computation* computation) : b_(computation) {}
  ir::Builder& builder() { return b_; }
  void Scope(std::string prefix, std::string metadata, ir::Role role) {
    prefix_ = std::move(prefix);
    b_.set_metadata(std::move(metadata));
    b_.set_role(role);
  }
  StatusOr<Instruction*> Op(Opcode opcode, std::vector<Instruction*> operands,
                            std::string_view suffix) {
    Shape shape = operands[0]->shape();
    return b_.Build(opcode, std::move(operands), {}, shape, nullptr, Name(suffix));
  }
  // Rounded to f32: the IR keeps constants exact in their dtype.
  StatusOr<Instruction*> Const(double value, std::string_view suffix) {
    return b_.ScalarConstant(DType::kF32, static_cast<float>(value), Name(suffix));
  }
  // The scalar `s` broadcast to `shape`.
  StatusOr<Instruction*> Splat(Instruction* s, const Shape& shape, std::string_view suffix) {
    if (shape.is_scalar()) return s;
    ir::Attrs attrs;
    return b_.Build(Opcode::kBroadcast, {s}, attrs, shape, nullptr, Name(suffix));
  }
  StatusOr<Instruction*> SumAll(Instruction* x, std::string_view suffix) {
    ir::Attrs attrs;
    for (int64_t d = 0; d < x->shape().rank(); ++d) attrs.dimensions.push_back(d);
    attrs.reduce_kind = ir::ReduceKind::kSum;
    return b_.Build(Opcode::kReduce, {x}, attrs, Shape::Scalar(DType::kF32), nullptr,
                    Name(suffix));
  }
  StatusOr<Instruction*> NewParameter(int64_t number, const Shape& shape, std::string_view name) {
    return b_.Parameter(number, shape, name);
  }

 private:
  std::string Name(std::string_view suffix) const {
    return suffix.empty() ? prefix_ : fmt::format("{}.{}", prefix_, suffix);
  }
  ir::Builder b_;
  std::string prefix_;
};

// The scalars every parameter's update shares, built once.
struct SharedScalars {
  Instruction* clip_scale = nullptr;  // nullptr: no clipping
  Instruction* beta1 = nullptr;
  Instruction* one_minus_beta1 = nullptr;
  Instruction* beta2 = nullptr;
  Instruction* one_minus_beta2 = nullptr;
  Instruction* inv_bc2 = nullptr;      // 1 / (1 - beta2^step)
  Instruction* step_size = nullptr;    // lr / (1 - beta1^step)
  Instruction* decay_factor = nullptr; // 1 - lr * weight_decay
  Instruction* eps = nullptr;
};

// norm = sqrt(sum_i sum(g_i * g_i)), a partial sum for each parameter; with
// `world` > 1 the g_i are this rank's shards (Note [ZeRO-1]) and the sum of
// squares is all-reduced before the root.
StatusOr<Instruction*> EmitGradNorm(Emitter& e, const std::vector<Instruction*>& params,
                                    const std::vector<Instruction*>& grads, int64_t world) {
  Instruction* sumsq = nullptr;
  for (size_t i = 0; i < params.size(); ++i) {
    e.Scope("adamw." + params[i]->name(), "optimizer." + params[i]->name(), UpdateRole(params[i]));
    ASSIGN_OR_RETURN(Instruction * g2, e.Op(Opcode::kMul, {grads[i], grads[i]}, "grad_sq"));
    ASSIGN_OR_RETURN(Instruction * s, e.SumAll(g2, "grad_sumsq"));
    if (sumsq == nullptr) {
      sumsq = s;
    } else {
      e.Scope("adamw", "optimizer", kSharedRole);
      ASSIGN_OR_RETURN(sumsq, e.Op(Opcode::kAdd, {sumsq, s}, "grad_sumsq"));
    }
  }
  e.Scope("adamw", "optimizer", kSharedRole);
  if (sumsq == nullptr) {
    ASSIGN_OR_RETURN(sumsq, e.Const(0.0, "grad_sumsq"));
  }
  if (world > 1) {
    ir::Attrs sum;
    sum.reduce_kind = ir::ReduceKind::kSum;
    ASSIGN_OR_RETURN(sumsq, e.builder().Build(Opcode::kAllReduce, {sumsq}, sum, sumsq->shape(),
                                              nullptr, "zero.grad_sumsq"));
  }
  return e.Op(Opcode::kSqrt, {sumsq}, "grad_norm");
}

// The scalars every parameter's update reads: the clip scale (with a clip
// norm), the betas, eps, the bias corrections, the step size and the decay.
StatusOr<SharedScalars> EmitSharedScalars(Emitter& e, const AdamWOptions& o, Instruction* norm,
                                          Instruction* step, Instruction* lr) {
  SharedScalars k;
  if (o.clip_norm > 0) {
    // clip_scale = min(1, clip_norm / (norm + 1e-6))
    ASSIGN_OR_RETURN(Instruction * tiny, e.Const(1e-6, "norm_eps"));
    ASSIGN_OR_RETURN(Instruction * guarded, e.Op(Opcode::kAdd, {norm, tiny}, "guarded_norm"));
    ASSIGN_OR_RETURN(Instruction * clip, e.Const(o.clip_norm, "clip_norm"));
    ASSIGN_OR_RETURN(Instruction * ratio, e.Op(Opcode::kDiv, {clip, guarded}, "clip_ratio"));
    ASSIGN_OR_RETURN(Instruction * one, e.Const(1.0, "one"));
    ASSIGN_OR_RETURN(k.clip_scale, e.Op(Opcode::kMin, {one, ratio}, "clip_scale"));
  }
  ASSIGN_OR_RETURN(Instruction * one, e.Const(1.0, "one"));
  ASSIGN_OR_RETURN(k.beta1, e.Const(o.beta1, "beta1"));
  ASSIGN_OR_RETURN(k.one_minus_beta1, e.Const(1.0 - o.beta1, "one_minus_beta1"));
  ASSIGN_OR_RETURN(k.beta2, e.Const(o.beta2, "beta2"));
  ASSIGN_OR_RETURN(k.one_minus_beta2, e.Const(1.0 - o.beta2, "one_minus_beta2"));
  ASSIGN_OR_RETURN(k.eps, e.Const(o.eps, "eps"));
  // Bias corrections: bc1 = 1 - beta1^step, bc2 = 1 - beta2^step.
  ASSIGN_OR_RETURN(Instruction * b1_pow, e.Op(Opcode::kPow, {k.beta1, step}, "beta1_pow"));
  ASSIGN_OR_RETURN(Instruction * bc1, e.Op(Opcode::kSub, {one, b1_pow}, "bias_correction1"));
  ASSIGN_OR_RETURN(Instruction * b2_pow, e.Op(Opcode::kPow, {k.beta2, step}, "beta2_pow"));
  ASSIGN_OR_RETURN(Instruction * bc2, e.Op(Opcode::kSub, {one, b2_pow}, "bias_correction2"));
  ASSIGN_OR_RETURN(k.inv_bc2, e.Op(Opcode::kDiv, {one, bc2}, "inv_bias_correction2"));
  ASSIGN_OR_RETURN(k.step_size, e.Op(Opcode::kDiv, {lr, bc1}, "step_size"));
  ASSIGN_OR_RETURN(Instruction * wd, e.Const(o.weight_decay, "weight_decay"));
  ASSIGN_OR_RETURN(Instruction * lr_wd, e.Op(Opcode::kMul, {lr, wd}, "lr_wd"));
  ASSIGN_OR_RETURN(k.decay_factor, e.Op(Opcode::kSub, {one, lr_wd}, "decay_factor"));
  return k;
}

// The new moments and value of `p`, parameter `param` or (ZeRO-1) its
// master shard, from its gradient `g` and moments `m` and `v`, appended to
// the three lists; `decays`: whether `param` takes weight decay.
Status EmitParamUpdate(Emitter& e, const AdamWOptions& o, const SharedScalars& k,
                       const Instruction* param, Instruction* p, bool decays, Instruction* g,
                       Instruction* m, Instruction* v, std::vector<Instruction*>& new_params,
                       std::vector<Instruction*>& new_m, std::vector<Instruction*>& new_v) {
  const Shape& shape = p->shape();
  e.Scope("adamw." + param->name(), "optimizer." + param->name(), UpdateRole(param));
  if (k.clip_scale != nullptr) {
    ASSIGN_OR_RETURN(Instruction * s, e.Splat(k.clip_scale, shape, "clip_scale"));
    ASSIGN_OR_RETURN(g, e.Op(Opcode::kMul, {g, s}, "clipped_grad"));
  }
  // m' = beta1 * m + (1 - beta1) * g
  ASSIGN_OR_RETURN(Instruction * b1, e.Splat(k.beta1, shape, "beta1"));
  ASSIGN_OR_RETURN(Instruction * c1, e.Splat(k.one_minus_beta1, shape, "one_minus_beta1"));
  ASSIGN_OR_RETURN(Instruction * m_old, e.Op(Opcode::kMul, {b1, m}, "m_decayed"));
  ASSIGN_OR_RETURN(Instruction * m_new, e.Op(Opcode::kMul, {c1, g}, "m_grad"));
  ASSIGN_OR_RETURN(m_new, e.Op(Opcode::kAdd, {m_old, m_new}, "m"));
  // v' = beta2 * v + (1 - beta2) * g * g
  ASSIGN_OR_RETURN(Instruction * b2, e.Splat(k.beta2, shape, "beta2"));
  ASSIGN_OR_RETURN(Instruction * c2, e.Splat(k.one_minus_beta2, shape, "one_minus_beta2"));
  ASSIGN_OR_RETURN(Instruction * v_old, e.Op(Opcode::kMul, {b2, v}, "v_decayed"));
  ASSIGN_OR_RETURN(Instruction * gg, e.Op(Opcode::kMul, {g, g}, "grad_sq_clipped"));
  ASSIGN_OR_RETURN(Instruction * v_new, e.Op(Opcode::kMul, {c2, gg}, "v_grad"));
  ASSIGN_OR_RETURN(v_new, e.Op(Opcode::kAdd, {v_old, v_new}, "v"));
  // update = m' / (sqrt(v' / bc2) + eps)
  ASSIGN_OR_RETURN(Instruction * ibc2, e.Splat(k.inv_bc2, shape, "inv_bias_correction2"));
  ASSIGN_OR_RETURN(Instruction * v_hat, e.Op(Opcode::kMul, {v_new, ibc2}, "v_hat"));
  ASSIGN_OR_RETURN(Instruction * root, e.Op(Opcode::kSqrt, {v_hat}, "v_hat_sqrt"));
  ASSIGN_OR_RETURN(Instruction * eps, e.Splat(k.eps, shape, "eps"));
  ASSIGN_OR_RETURN(Instruction * denom, e.Op(Opcode::kAdd, {root, eps}, "denom"));
  ASSIGN_OR_RETURN(Instruction * update, e.Op(Opcode::kDiv, {m_new, denom}, "update"));
  // p' = p * (1 - lr * wd) - lr / bc1 * update   (no decay below rank 2)
  Instruction* kept = p;
  if (decays && o.weight_decay != 0) {
    ASSIGN_OR_RETURN(Instruction * df, e.Splat(k.decay_factor, shape, "decay_factor"));
    ASSIGN_OR_RETURN(kept, e.Op(Opcode::kMul, {p, df}, "decayed"));
  }
  ASSIGN_OR_RETURN(Instruction * ss, e.Splat(k.step_size, shape, "step_size"));
  ASSIGN_OR_RETURN(Instruction * delta, e.Op(Opcode::kMul, {ss, update}, "delta"));
  ASSIGN_OR_RETURN(Instruction * p_new, e.Op(Opcode::kSub, {kept, delta}, "new"));
  new_params.push_back(p_new);
  new_m.push_back(m_new);
  new_v.push_back(v_new);
  return Status::Ok();
}

// What AdamW updates: the parameters themselves, or (ZeRO-1) this rank's
// shards of their f32 weights, with the parameters they belong to.
struct UpdateTargets {
  std::vector<Instruction*> params;   // the trainable parameters, in order
  std::vector<Instruction*> weights;  // what is updated: params, or their master shards
  int64_t world = 1;                  // > 1: weights, grads and moments are shards
};

// Emits the global norm, clipping and AdamW updates; returns the pre-clip
// norm and fills new weights / m / v. The vectors are in step.
StatusOr<Instruction*> EmitAdamW(Emitter& e, const AdamWOptions& o, const UpdateTargets& t,
                                 const std::vector<Instruction*>& grads,
                                 const std::vector<Instruction*>& m,
                                 const std::vector<Instruction*>& v, Instruction* step,
                                 Instruction* lr, std::vector<Instruction*>& new_weights,
                                 std::vector<Instruction*>& new_m,
                                 std::vector<Instruction*>& new_v) {
  ASSIGN_OR_RETURN(Instruction * norm, EmitGradNorm(e, t.params, grads, t.world));
  ASSIGN_OR_RETURN(const SharedScalars k, EmitSharedScalars(e, o, norm, step, lr));
  for (size_t i = 0; i < t.params.size(); ++i) {
    const bool decays = DecaysWeight(t.params[i]->shape());
    RETURN_IF_ERROR(EmitParamUpdate(e, o, k, t.params[i], t.weights[i], decays, grads[i], m[i],
                                    v[i], new_weights, new_m, new_v));
  }
  return norm;
}

// Puts the parameters first, by number, so the printed order is the signature.
void SortParametersFirst(ir::Computation* c) {
  std::vector<Instruction*> order = c->parameters();
  for (const auto& inst : c->instructions()) {
    if (inst->opcode() != Opcode::kParameter) order.push_back(inst.get());
  }
  c->ReorderInstructions(order);
}

// Appends one new parameter of `role` per trainable parameter: `ROLE.NAME`
// (adam_m.NAME, grad_acc.NAME, ...), numbered from `first`; the accumulated
// gradients are in the gradient phase, the rest in the parameter's update.
// With `zero_world` > 1 the sharded roles are shards (Note [ZeRO-1 shards]).
StatusOr<std::vector<Instruction*>> AddStateParameters(Emitter& e,
                                                       const std::vector<Instruction*>& params,
                                                       program::SlotRole role, int64_t first,
                                                       int64_t zero_world = 1) {
  const ir::Phase phase =
      role == program::SlotRole::kGradAcc ? ir::Phase::kGradient : ir::Phase::kUpdate;
  std::vector<Instruction*> out;
  for (size_t i = 0; i < params.size(); ++i) {
    e.Scope("", "optimizer." + params[i]->name(), {phase, params[i]->role().layer});
    const Shape shape =
        program::StateSlotShape(role, params[i]->shape(), zero_world > 1 ? 1 : 0, zero_world);
    ASSIGN_OR_RETURN(Instruction * x,
                     e.NewParameter(first + static_cast<int64_t>(i), shape,
                                    fmt::format("{}.{}", program::SlotRoleName(role),
                                                params[i]->name())));
    out.push_back(x);
  }
  return out;
}

StatusOr<std::pair<Instruction*, Instruction*>> AddStepAndLr(Emitter& e, int64_t first) {
  e.Scope("", "optimizer", kSharedRole);
  ASSIGN_OR_RETURN(Instruction * step, e.NewParameter(first, Shape::Scalar(DType::kF32), "step"));
  ASSIGN_OR_RETURN(Instruction * lr, e.NewParameter(first + 1, Shape::Scalar(DType::kF32), "lr"));
  return std::pair{step, lr};
}

void Renumber(const std::vector<Instruction*>& params, int64_t first) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i]->mutable_attrs().index = first + static_cast<int64_t>(i);
  }
}

StatusOr<Instruction*> MakeRoot(Emitter& e, std::vector<Instruction*> elements) {
  e.Scope("", "optimizer", kSharedRole);
  return e.builder().Tuple(std::move(elements));
}

}  // namespace

namespace {

using program::EntrySignature;
using program::Slot;
using program::SlotRole;

// Note [optimizer signature]: roles recorded as the pass creates the values.
class SignatureBuilder {
 public:
  void Inputs(const std::vector<Instruction*>& params, SlotRole role) {
    for (size_t i = 0; i < params.size(); ++i) roles_[params[i]] = {role, static_cast<int64_t>(i)};
  }
  void Input(const Instruction* p, SlotRole role) { roles_[p] = {role, -1}; }
  // A scalar output named after its role ("loss", "grad_norm").
  void Output(SlotRole role) { outputs_.push_back({role, -1, nullptr}); }
  // Per-parameter outputs `role`[i], each replacing `donors`[i] in place.
  void Outputs(SlotRole role, const std::vector<Instruction*>& donors) {
    for (size_t i = 0; i < donors.size(); ++i)
      outputs_.push_back({role, static_cast<int64_t>(i), donors[i]});
  }
  // The AdamW update's slots (step and apply): moments, step and lr in; the
  // grad norm, then the new parameters and moments out, each in place.
  void AdamW(const std::vector<Instruction*>& params, const std::vector<Instruction*>& m,
             const std::vector<Instruction*>& v, std::pair<Instruction*, Instruction*> step_lr) {
    Inputs(m, SlotRole::kAdamM);
    Inputs(v, SlotRole::kAdamV);
    Input(step_lr.first, SlotRole::kStep);
    Input(step_lr.second, SlotRole::kLr);
    Output(SlotRole::kGradNorm);
    Outputs(SlotRole::kParam, params);
    Outputs(SlotRole::kAdamM, m);
    Outputs(SlotRole::kAdamV, v);
  }

  EntrySignature Build(const ir::Computation& entry) const {
    EntrySignature sig;
    std::map<const Instruction*, int64_t> input_of;
    for (const Instruction* p : entry.parameters()) {
      Slot slot{SlotRole::kData, -1, p->name(), p->shape()};
      if (auto it = roles_.find(p); it != roles_.end()) {
        std::tie(slot.role, slot.index) = it->second;
      }
      input_of[p] = static_cast<int64_t>(sig.inputs.size());
      sig.inputs.push_back(std::move(slot));
    }
    const ir::Shape scalar = ir::Shape::Scalar(ir::DType::kF32);
    for (const auto& [role, index, donor] : outputs_) {
      if (donor == nullptr) {
        sig.outputs.push_back({role, -1, std::string(program::SlotRoleName(role)), scalar});
        continue;
      }
      const Slot& in = sig.inputs[input_of.at(donor)];
      sig.donations.push_back({static_cast<int64_t>(sig.outputs.size()), input_of.at(donor)});
      sig.outputs.push_back({role, index, "new." + in.name, in.shape});
    }
    return sig;
  }

 private:
  struct Out {
    SlotRole role;
    int64_t index;
    const Instruction* donor;
  };
  std::map<const Instruction*, std::pair<SlotRole, int64_t>> roles_;
  std::vector<Out> outputs_;
};

}  // namespace

namespace {

// The optimizer's state inputs of an AdamW entry: moments, and with ZeRO-1
// the master weights' shards (Note [ZeRO-1]).
struct AdamWState {
  std::vector<Instruction*> m, v, master;  // master: empty without ZeRO-1
};

// Appends the moments (and master shards) as parameters numbered from
// `first`: m, v, then master.
StatusOr<AdamWState> AddAdamWState(Emitter& e, const std::vector<Instruction*>& params,
                                   int64_t first, int64_t zero_world) {
  const int64_t n = static_cast<int64_t>(params.size());
  AdamWState state;
  ASSIGN_OR_RETURN(state.m,
                   AddStateParameters(e, params, SlotRole::kAdamM, first, zero_world));
  ASSIGN_OR_RETURN(
      state.v, AddStateParameters(e, params, SlotRole::kAdamV, first + n, zero_world));
  if (zero_world > 1) {
    ASSIGN_OR_RETURN(state.master,
                     AddStateParameters(e, params, SlotRole::kMaster, first + 2 * n, zero_world));
  }
  return state;
}

// AdamW on `grads` (with ZeRO-1: this rank's shards, updating the master
// shards, then all-gathered into the new parameters); appends the grad norm,
// new parameters, moments (and master shards) to `root` and their slots to
// `sig`.
Status EmitAdamWOutputs(Emitter& e, const OptimizerOptions& o,
                        const std::vector<Instruction*>& params, const AdamWState& state,
                        const std::vector<Instruction*>& grads,
                        std::pair<Instruction*, Instruction*> step_lr,
                        std::vector<Instruction*>& root, SignatureBuilder& sig) {
  const bool zero = !state.master.empty();
  const UpdateTargets targets{params, zero ? state.master : params, zero ? o.zero_world : 1};
  std::vector<Instruction*> new_weights, new_m, new_v;
  ASSIGN_OR_RETURN(Instruction * norm,
                   EmitAdamW(e, o.adamw, targets, grads, state.m, state.v, step_lr.first,
                             step_lr.second, new_weights, new_m, new_v));
  std::vector<Instruction*> new_params = new_weights;
  if (zero) {
    for (size_t i = 0; i < params.size(); ++i) {
      e.Scope("", "optimizer." + params[i]->name(), UpdateRole(params[i]));
      ASSIGN_OR_RETURN(new_params[i],
                       EmitGatheredParameter(e.builder(), new_weights[i], params[i]->shape(),
                                             o.zero_world, params[i]->name()));
    }
  }
  root.push_back(norm);
  for (auto* list : {&new_params, &new_m, &new_v})
    root.insert(root.end(), list->begin(), list->end());
  sig.AdamW(params, state.m, state.v, step_lr);
  if (zero) {
    root.insert(root.end(), new_weights.begin(), new_weights.end());
    sig.Inputs(state.master, SlotRole::kMaster);
    sig.Outputs(SlotRole::kMaster, state.master);
  }
  return Status::Ok();
}

// With ZeRO-1, this rank's shard of each gradient (Note [ZeRO-1]); else the
// gradients themselves.
StatusOr<std::vector<Instruction*>> GradientsToUpdate(ir::Computation& c,
                                                      const std::vector<Instruction*>& params,
                                                      const std::vector<Instruction*>& grads,
                                                      const OptimizerOptions& o) {
  if (o.zero_world <= 1) return grads;
  std::vector<Instruction*> shards;
  for (size_t i = 0; i < params.size(); ++i) {
    ASSIGN_OR_RETURN(Instruction * shard,
                     EmitGradientShard(c, grads[i], o.zero_world, params[i]->name(), o.grad_comm));
    shards.push_back(shard);
  }
  return shards;
}

// The apply entry of gradient accumulation: a fresh entry computation (the
// forward and backward are not needed to apply) that reads the parameters,
// the moments, the accumulated gradients, the step and the learning rate,
// and runs AdamW on the gradients' mean; its signature.
StatusOr<program::EntrySignature> BuildApplyEntry(ir::Module& module, const AutodiffOutput& in,
                                                  const OptimizerOptions& options) {
  const int64_t n = static_cast<int64_t>(in.params.size());
  const int64_t zero = options.zero_world;
  ir::Computation* apply = module.AddComputation("apply");
  Emitter e(apply);
  std::vector<Instruction*> params;
  for (int64_t i = 0; i < n; ++i) {
    e.Scope("", in.params[i]->metadata(), in.params[i]->role());
    ASSIGN_OR_RETURN(Instruction * p,
                     e.NewParameter(i, in.params[i]->shape(), in.params[i]->name()));
    params.push_back(p);
  }
  ASSIGN_OR_RETURN(AdamWState state, AddAdamWState(e, params, n, zero));
  const int64_t after_state = (zero > 1 ? 4 : 3) * n;
  ASSIGN_OR_RETURN(std::vector<Instruction*> acc,
                   AddStateParameters(e, params, SlotRole::kGradAcc, after_state));
  ASSIGN_OR_RETURN(auto step_lr, AddStepAndLr(e, after_state + n));
  // grads = grad_acc / K (with ZeRO-1, of this rank's shard of the sum)
  ASSIGN_OR_RETURN(std::vector<Instruction*> grads,
                   GradientsToUpdate(*apply, params, acc, options));
  e.Scope("adamw", "optimizer", kSharedRole);
  ASSIGN_OR_RETURN(Instruction * inv_k,
                   e.Const(1.0 / static_cast<double>(options.grad_accum), "inv_grad_accum"));
  for (int64_t i = 0; i < n; ++i) {
    e.Scope("adamw." + params[i]->name(), "optimizer." + params[i]->name(), UpdateRole(params[i]));
    ASSIGN_OR_RETURN(Instruction * s, e.Splat(inv_k, grads[i]->shape(), "inv_grad_accum"));
    ASSIGN_OR_RETURN(grads[i], e.Op(Opcode::kMul, {grads[i], s}, "grad"));
  }
  SignatureBuilder sig;
  sig.Inputs(params, SlotRole::kParam);
  sig.Inputs(acc, SlotRole::kGradAcc);
  std::vector<Instruction*> elements;
  RETURN_IF_ERROR(EmitAdamWOutputs(e, options, params, state, grads, step_lr, elements, sig));
  ASSIGN_OR_RETURN(Instruction * root, MakeRoot(e, std::move(elements)));
  apply->set_root(root);
  module.set_entry(apply);
  module.RemoveUnreachableComputations();
  return sig.Build(*apply);
}

}  // namespace

StatusOr<OptimizerOptions> ParseOptimizerOptions(
    const std::map<std::string, std::string>& options) {
  OptimizerOptions o;
  for (const auto& [key, value] : options) {
    if (key == "grad-comm") {
      if (value != "f32" && value != "bf16") {
        return Error("optimizer: grad-comm must be f32 or bf16, got '{}'", value);
      }
      o.grad_comm = value == "bf16" ? ir::DType::kBF16 : ir::DType::kF32;
      continue;
    }
    if (key != "zero") {
      return Error("optimizer: unknown option '{}' (known: zero, grad-comm)", key);
    }
    char* end = nullptr;
    const long long n = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || n < 1) {
      return Error("optimizer: zero must be a number of ranks >= 1, got '{}'", value);
    }
    o.zero_world = n;
  }
  return o;
}

StatusOr<bool> Optimizer::Run(ir::Module& module) {
  ASSIGN_OR_RETURN(AutodiffOutput in, Inspect(module));
  if (options_.grad_accum < 1) {
    return Error("optimizer: grad_accum must be >= 1, got {}", options_.grad_accum);
  }
  const int64_t n = static_cast<int64_t>(in.params.size());
  const int64_t d = static_cast<int64_t>(in.data.size());
  if (!options_.data_roles.empty() && static_cast<int64_t>(options_.data_roles.size()) != d) {
    return Error("optimizer: {} data roles given for the {} data inputs of entry %{}",
                 options_.data_roles.size(), d, module.entry()->name());
  }
  if (options_.zero_world < 1) {
    return Error("optimizer: zero_world must be >= 1, got {}", options_.zero_world);
  }
  if (options_.mode == OptimizerMode::kApply) {
    ASSIGN_OR_RETURN(signature_, BuildApplyEntry(module, in, options_));
    return true;
  }

  ir::Computation* entry = module.entry();
  Emitter e(entry);
  Renumber(in.params, 0);
  std::vector<Instruction*> root_elements = {in.loss};
  SignatureBuilder sig;
  sig.Inputs(in.params, SlotRole::kParam);
  for (size_t i = 0; i < options_.data_roles.size(); ++i)
    sig.Input(in.data[i], options_.data_roles[i]);
  sig.Output(SlotRole::kLoss);
  if (options_.mode == OptimizerMode::kAccumulate) {
    Renumber(in.data, 2 * n);
    ASSIGN_OR_RETURN(std::vector<Instruction*> acc,
                     AddStateParameters(e, in.params, SlotRole::kGradAcc, n));
    sig.Inputs(acc, SlotRole::kGradAcc);
    sig.Outputs(SlotRole::kGradAcc, acc);
    for (int64_t i = 0; i < n; ++i) {
      const std::string& name = in.params[i]->name();
      e.Scope("accumulate." + name, "optimizer." + name, UpdateRole(in.params[i]));
      ASSIGN_OR_RETURN(Instruction * sum, e.Op(Opcode::kAdd, {acc[i], in.grads[i]}, ""));
      root_elements.push_back(sum);
    }
  } else {
    const int64_t zero = options_.zero_world;
    const int64_t after_state = (zero > 1 ? 4 : 3) * n;
    Renumber(in.data, after_state);
    ASSIGN_OR_RETURN(AdamWState state, AddAdamWState(e, in.params, n, zero));
    ASSIGN_OR_RETURN(auto step_lr, AddStepAndLr(e, after_state + d));
    ASSIGN_OR_RETURN(std::vector<Instruction*> grads,
                     GradientsToUpdate(*entry, in.params, in.grads, options_));
    RETURN_IF_ERROR(
        EmitAdamWOutputs(e, options_, in.params, state, grads, step_lr, root_elements, sig));
  }
  ASSIGN_OR_RETURN(Instruction * root, MakeRoot(e, std::move(root_elements)));
  entry->set_root(root);
  if (in.root->users().empty()) {
    in.root->DetachOperands();
    entry->RemoveInstruction(in.root);
  }
  SortParametersFirst(entry);
  signature_ = sig.Build(*entry);
  return true;
}

}  // namespace gptc::passes
