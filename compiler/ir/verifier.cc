#include "compiler/ir/verifier.h"

#include <span>
#include <unordered_map>
#include <unordered_set>

#include "compiler/ir/all_reduce_bucket.h"
#include "compiler/ir/gemm_epilogue.h"
#include "compiler/ir/shape_inference.h"

namespace gptc::ir {

namespace {

bool IsValidName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      return false;
    }
  }
  return true;
}

class Verifier {
 public:
  explicit Verifier(const Module& module) : module_(module) {}

  Status Run() {
    if (!IsValidName(module_.name())) return Error("module name '{}' is not valid", module_.name());
    if (module_.entry() == nullptr) return Error("module {} has no entry computation", module_.name());
    for (const auto& c : module_.computations()) {
      if (!IsValidName(c->name())) return Error("computation name '{}' is not valid", c->name());
      if (!names_.insert(c->name()).second) {
        return Error("computation %{} is defined twice", c->name());
      }
      if (c->parent() != &module_) return Error("computation %{} belongs to another module", c->name());
      RETURN_IF_ERROR(VerifyComputation(*c));
      defined_.insert(c.get());
    }
    if (!defined_.contains(module_.entry())) return Error("entry computation is not in the module");
    return Status::Ok();
  }

 private:
  Status At(const Instruction& inst, const Status& status) const {
    std::string subject = "%" + inst.name();
    if (inst.line() > 0) {
      std::string file = module_.source_file().empty() ? "<input>" : module_.source_file();
      subject = fmt::format("{}:{}:{}: {}", file, inst.line(), inst.column(), subject);
    }
    return status.WithPrefix(subject);
  }

  Status VerifyComputation(const Computation& c) {
    if (c.root() == nullptr) return Error("computation %{} has no root", c.name());
    std::unordered_set<const Instruction*> seen;
    std::unordered_map<int64_t, const Instruction*> params;
    for (const auto& owned : c.instructions()) {
      const Instruction& inst = *owned;
      if (!IsValidName(inst.name())) {
        return At(inst, Error("instruction name is not valid in the text format"));
      }
      if (inst.parent() != &c) return At(inst, Error("is listed in %{} but not owned by it", c.name()));
      for (int64_t i = 0; i < inst.operand_count(); ++i) {
        const Instruction* op = inst.operand(i);
        if (op == nullptr) return At(inst, Error("operand {} is null", i));
        if (op->parent() != &c) {
          return At(inst, Error("operand {} %{} is not in computation %{}", i, op->name(), c.name()));
        }
        if (!seen.contains(op)) {
          return At(inst, Error("operand {} %{} is used before it is defined", i, op->name()));
        }
        bool listed = false;
        for (const Instruction* u : op->users()) listed |= u == &inst;
        if (!listed) return At(inst, Error("missing from the users of %{}", op->name()));
      }
      if (inst.opcode() == Opcode::kParameter) {
        auto [it, inserted] = params.emplace(inst.attrs().index, &inst);
        if (!inserted) {
          return At(inst, Error("parameter number {} already used by %{}", inst.attrs().index,
                                it->second->name()));
        }
      }
      RETURN_IF_ERROR(VerifyCalled(inst, c));
      if (Status s = CheckGemmEpilogue(inst); !s.ok()) return At(inst, s);
      RETURN_IF_ERROR(CheckRole(inst));
      // Copied into shapes kept from instruction to instruction: a fresh
      // vector of copies allocated per operand, and that was most of the
      // verifier's time on gpt2-1558m (its heap after the fusion pass made
      // each allocation slow).
      size_t n = inst.operands().size();
      if (operand_shapes_.size() < n) operand_shapes_.resize(n);
      for (size_t i = 0; i < n; ++i) operand_shapes_[i] = inst.operand(i)->shape();
      StatusOr<Shape> inferred =
          InferShape(inst.opcode(), std::span<const Shape>(operand_shapes_.data(), n), inst.attrs(),
                     inst.called_computation(), inst.shape());
      if (!inferred.ok()) return At(inst, inferred.status());
      if (*inferred != inst.shape()) {
        return At(inst, Error("{} has shape {}, but its operands give {}", OpcodeName(inst.opcode()),
                              inst.shape().ToString(), inferred->ToString()));
      }
      seen.insert(&inst);
    }
    if (!seen.contains(c.root())) return Error("root of computation %{} is not in it", c.name());
    RETURN_IF_ERROR(CheckBuckets(c));
    // Distinct non-negative numbers are 0..n-1 unless one of them is >= n; name that one.
    for (const auto& owned : c.instructions()) {
      const Instruction& inst = *owned;
      if (inst.opcode() != Opcode::kParameter) continue;
      if (inst.attrs().index >= static_cast<int64_t>(params.size())) {
        int64_t missing = 0;
        while (params.contains(missing)) ++missing;
        return At(inst, Error("parameter number {} leaves a gap: computation %{} has {} "
                              "parameters but no parameter number {}",
                              inst.attrs().index, c.name(), params.size(), missing));
      }
    }
    return Status::Ok();
  }

  // Note [all-reduce buckets] (passes/all_reduce_combiner.h): every
  // collective of `c` (all-reduce, reduce-scatter, all-gather) has a bucket
  // or none does; buckets are numbered from 0 in instruction order over all
  // three opcodes, each a run of consecutive collectives of one opcode.
  Status CheckBuckets(const Computation& c) const {
    const Instruction* previous = nullptr;
    std::optional<int64_t> previous_bucket;
    for (const auto& owned : c.instructions()) {
      const Instruction& inst = *owned;
      if (!IsCollective(inst.opcode())) continue;
      const std::optional<int64_t> bucket = CollectiveBucket(inst);
      if (previous != nullptr && bucket.has_value() != previous_bucket.has_value()) {
        return At(inst, Error("{} a bucket but %{} {}", bucket ? "has" : "has no", previous->name(),
                              bucket ? "has none" : "has one"));
      }
      const int64_t expected = previous_bucket.value_or(-1);
      if (bucket && previous == nullptr && *bucket != 0) {
        return At(inst, Error("is the first collective but in bucket {}, not 0", *bucket));
      }
      if (bucket && previous != nullptr && *bucket != expected && *bucket != expected + 1) {
        return At(inst, Error("is in bucket {} after %{} in bucket {}: buckets are numbered "
                              "from 0 in order, each a run of consecutive collectives",
                              *bucket, previous->name(), expected));
      }
      if (bucket && previous != nullptr && *bucket == expected &&
          inst.opcode() != previous->opcode()) {
        return At(inst, Error("is in bucket {} with %{}, but its opcode {} is not {}: a bucket "
                              "holds collectives of one opcode",
                              *bucket, previous->name(), OpcodeName(inst.opcode()),
                              OpcodeName(previous->opcode())));
      }
      previous = &inst;
      previous_bucket = bucket;
    }
    return Status::Ok();
  }

  // Note [roles]: values flow forward -> remat -> gradient -> optimizer. A
  // fusion mixes phases (the cross-entropy's forward and backward in one
  // kernel), so edges into and out of fusions and their tuple elements are
  // not checked.
  Status CheckRole(const Instruction& inst) const {
    const Role role = inst.role();
    if (role.phase == Phase::kNone && role.layer >= 0) {
      return At(inst, Error("has layer={} but no phase", role.layer));
    }
    const std::optional<int> rank = PhaseRank(role.phase);
    if (!rank || IsFusionValue(inst)) return Status::Ok();
    for (const Instruction* op : inst.operands()) {
      const std::optional<int> op_rank = PhaseRank(op->role().phase);
      if (op_rank && *op_rank > *rank && !IsFusionValue(*op)) {
        return At(inst, Error("a {} value reads %{}, a {} value", PhaseName(role.phase), op->name(),
                              PhaseName(op->role().phase)));
      }
    }
    return Status::Ok();
  }

  static bool IsFusionValue(const Instruction& inst) {
    return inst.opcode() == Opcode::kFusion || inst.opcode() == Opcode::kGetTupleElement;
  }

  Status VerifyCalled(const Instruction& inst, const Computation& caller) const {
    const Computation* called = inst.called_computation();
    if (!CallsComputation(inst.opcode())) {
      if (called != nullptr) return At(inst, Error("{} cannot call a computation", OpcodeName(inst.opcode())));
      return Status::Ok();
    }
    if (called == nullptr) return At(inst, Error("needs a called computation (calls=%name)"));
    if (called == module_.entry()) return At(inst, Error("calls the entry computation"));
    if (called == &caller || !defined_.contains(called)) {
      return At(inst, Error("calls %{}, which must be defined before %{}", called->name(),
                            caller.name()));
    }
    return Status::Ok();
  }

  const Module& module_;
  std::vector<Shape> operand_shapes_;  // VerifyComputation's, reused
  std::unordered_set<std::string> names_;
  std::unordered_set<const Computation*> defined_;
};

}  // namespace

Status VerifyModule(const Module& module) { return Verifier(module).Run(); }

}  // namespace gptc::ir
