#include "compiler/analysis/kernel_cost.h"

#include <algorithm>
#include <map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/computation.h"

namespace gptc::analysis {

namespace {

using ir::Instruction;
using ir::Opcode;

double Elements(const ir::Shape& s) {
  if (!s.is_tuple()) return static_cast<double>(s.num_elements());
  double n = 0;
  for (const ir::Shape& e : s.tuple_elements()) n += Elements(e);
  return n;
}

// FLOPs of one instruction (not looking into fusions).
double InstructionFlops(const Instruction& inst) {
  switch (inst.opcode()) {
    case Opcode::kDot: {
      // 2 * (result elements) * (contracted size).
      double k = 1;
      for (int64_t d : inst.attrs().dot.lhs_contracting) k *= inst.operand(0)->shape().dim(d);
      return 2.0 * Elements(inst.shape()) * k;
    }
    case Opcode::kReduce:
      return Elements(inst.operand(0)->shape());
    case Opcode::kAttention: {
      // Two batched matmuls [B,H,T,D] x [B,H,S,D] and the softmax.
      const ir::Shape& q = inst.operand(0)->shape();
      double s = static_cast<double>(inst.operand(1)->shape().dim(2));
      double bht = static_cast<double>(q.dim(0) * q.dim(1) * q.dim(2));
      double flops = 4.0 * bht * s * static_cast<double>(q.dim(3)) + 5.0 * bht * s;
      return inst.attrs().causal ? flops / 2 : flops;
    }
    case Opcode::kAttentionLse:
    case Opcode::kAttentionGrad:
      return 0;  // per kernel: AttentionFlops
    case Opcode::kSoftmaxCrossEntropy:
      // max, exp-sum, log and the target pick per logit.
      return 4.0 * Elements(inst.operand(0)->shape());
    default:
      if (ir::IsElementwise(inst.opcode())) return Elements(inst.shape());
      return 0;
  }
}

// Note [attention FLOPs]: flash kernels recompute the scores, so their FLOPs
// are counted per kernel, not per op: an attention-lse in the forward's
// kernel is free (the forward has the scores), alone it computes s = q k^T;
// attention-grad ops sharing a kernel share s (and dp = do v^T, which dq and
// dk need) and add one matmul each (dq = ds k, dk = ds^T q, dv = p^T do):
// the dk+dv kernel does 4 matmuls and the dq kernel 3, 3.5x the forward's 2
// (FlashAttention-2 with dq by atomics does 5). Causal halves them all.
double AttentionFlops(const std::vector<const Instruction*>& kernel) {
  bool forward = false, needs_dp = false;
  const Instruction* op = nullptr;
  int64_t grads = 0;
  for (const Instruction* f : kernel) {
    if (f->opcode() == Opcode::kAttention) forward = true;
    if (f->opcode() == Opcode::kAttentionLse && op == nullptr) op = f;
    if (f->opcode() == Opcode::kAttentionGrad) {
      op = f;
      ++grads;
      needs_dp |= f->attrs().index != 2;
    }
  }
  if (op == nullptr || (forward && grads == 0)) return 0;
  const ir::Shape& q = op->operand(0)->shape();
  const double bhts = static_cast<double>(q.dim(0) * q.dim(1) * q.dim(2)) *
                      static_cast<double>(op->operand(1)->shape().dim(2));
  const double matmuls = 1 + (grads > 0 && needs_dp ? 1 : 0) + static_cast<double>(grads);
  const double flops =
      matmuls * 2.0 * bhts * static_cast<double>(q.dim(3)) + (grads > 0 ? 6.0 : 3.0) * bhts;
  return op->attrs().causal ? flops / 2 : flops;
}

}  // namespace

KernelCost AnalyzeKernelCost(const Instruction& kernel) {
  KernelCost cost;
  std::map<std::string, int64_t> sources;
  if (kernel.opcode() == Opcode::kFusion && kernel.called_computation() != nullptr) {
    cost.kind = std::string(ir::FusionKindName(kernel.attrs().fusion_kind));
    for (const auto& f : kernel.called_computation()->instructions()) {
      Opcode op = f->opcode();
      if (op == Opcode::kParameter || op == Opcode::kTuple) continue;
      cost.flops += InstructionFlops(*f);
      if (op == Opcode::kConstant || op == Opcode::kBroadcast || op == Opcode::kIota) continue;
      ++cost.ops;
      ++sources[f->metadata()];
    }
    std::vector<const Instruction*> members;
    for (const auto& f : kernel.called_computation()->instructions()) members.push_back(f.get());
    cost.flops += AttentionFlops(members);
  } else {
    cost.kind = std::string(ir::OpcodeName(kernel.opcode()));
    cost.ops = 1;
    cost.flops = InstructionFlops(kernel);
    cost.flops += AttentionFlops({&kernel});  // unfused: a kernel of its own
    ++sources[kernel.metadata()];
  }
  // A fusion parameter read only through slices costs the slices' bytes
  // (the q, k, v copies each read a third of the packed projection).
  std::vector<int64_t> sliced(kernel.operand_count(), -1);
  if (kernel.opcode() == Opcode::kFusion && kernel.called_computation() != nullptr) {
    for (const Instruction* p : kernel.called_computation()->parameters()) {
      int64_t bytes = 0;
      bool only_slices = !p->users().empty();
      for (const Instruction* u : p->users()) {
        only_slices &= u->opcode() == Opcode::kSlice;
        bytes += u->shape().byte_size();
      }
      const int64_t i = p->attrs().index;
      if (only_slices && i >= 0 && i < kernel.operand_count()) {
        sliced[i] = std::min(bytes, p->shape().byte_size());
      }
    }
  }
  std::unordered_set<const Instruction*> seen;
  for (int64_t i = 0; i < kernel.operand_count(); ++i) {
    const Instruction* op = kernel.operand(i);
    if (seen.insert(op).second)
      cost.bytes_read += sliced[i] >= 0 ? sliced[i] : op->shape().byte_size();
  }
  cost.bytes_written = kernel.shape().byte_size();
  cost.source = kernel.metadata();
  int64_t best = 0;
  for (const auto& [meta, n] : sources) {
    if (n > best) best = n, cost.source = meta;
  }
  return cost;
}

}  // namespace gptc::analysis
