#include "passes/fusion_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <unordered_set>

#include "compiler/analysis/kernel_count.h"
#include "compiler/support/text.h"
#include "passes/fusion.h"

namespace gptc::passes {

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

std::optional<GpuSpec> FindGpuSpec(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (const GpuSpec& g : {GpuSpec::H100(), GpuSpec::H200(), GpuSpec::A100()}) {
    if (g.name == lower) return g;
  }
  return std::nullopt;
}

std::vector<KernelRow> AnalyzeKernels(const ir::Module& module, const GpuSpec& gpu) {
  std::vector<KernelRow> rows;
  for (const auto& inst : module.entry()->instructions()) {
    if (!analysis::IsKernel(*inst)) continue;
    KernelRow row;
    row.name = inst->name();
    std::map<std::string, int64_t> sources;
    if (inst->opcode() == Opcode::kFusion && inst->called_computation() != nullptr) {
      row.kind = std::string(ir::FusionKindName(inst->attrs().fusion_kind));
      for (const auto& f : inst->called_computation()->instructions()) {
        Opcode op = f->opcode();
        if (op == Opcode::kParameter || op == Opcode::kTuple) continue;
        row.flops += InstructionFlops(*f);
        if (op == Opcode::kConstant || op == Opcode::kBroadcast || op == Opcode::kIota) continue;
        ++row.ops;
        ++sources[f->metadata()];
      }
      std::vector<const Instruction*> members;
      for (const auto& f : inst->called_computation()->instructions()) members.push_back(f.get());
      row.flops += AttentionFlops(members);
    } else {
      row.kind = std::string(ir::OpcodeName(inst->opcode()));
      row.ops = 1;
      row.flops = InstructionFlops(*inst);
      row.flops += AttentionFlops({inst.get()});  // unfused: a kernel of its own
      ++sources[inst->metadata()];
    }
    // A fusion parameter read only through slices costs the slices' bytes
    // (the q, k, v copies each read a third of the packed projection).
    std::vector<int64_t> sliced(inst->operand_count(), -1);
    if (inst->opcode() == Opcode::kFusion && inst->called_computation() != nullptr) {
      for (const Instruction* p : inst->called_computation()->parameters()) {
        int64_t bytes = 0;
        bool only_slices = !p->users().empty();
        for (const Instruction* u : p->users()) {
          only_slices &= u->opcode() == Opcode::kSlice;
          bytes += u->shape().byte_size();
        }
        const int64_t i = p->attrs().index;
        if (only_slices && i >= 0 && i < inst->operand_count()) {
          sliced[i] = std::min(bytes, p->shape().byte_size());
        }
      }
    }
    std::unordered_set<const Instruction*> seen;
    for (int64_t i = 0; i < inst->operand_count(); ++i) {
      const Instruction* op = inst->operand(i);
      if (seen.insert(op).second)
        row.bytes_read += sliced[i] >= 0 ? sliced[i] : op->shape().byte_size();
    }
    row.bytes_written = inst->shape().byte_size();
    row.source = inst->metadata();
    int64_t best = 0;
    for (const auto& [meta, n] : sources) {
      if (n > best) best = n, row.source = meta;
    }
    double compute_s = row.flops / (gpu.peak_tflops * 1e12);
    double memory_s =
        static_cast<double>(row.bytes_read + row.bytes_written) / (gpu.hbm_gbps * 1e9);
    row.time_us = std::max(compute_s, memory_s) * 1e6;
    row.compute_bound = compute_s > memory_s;
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string FormatFlops(double flops) {
  static constexpr const char* kNames[] = {"", "K", "M", "G", "T", "P"};
  int unit = 0;
  while (flops >= 1000.0 && unit < 5) {
    flops /= 1000.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f}", flops) : fmt::format("{:.2f} {}", flops, kNames[unit]);
}

std::string RenderFusionReport(const ir::Module& module, const GpuSpec& gpu) {
  std::vector<KernelRow> rows = AnalyzeKernels(module, gpu);
  std::string out =
      fmt::format("fusion report: module {} on {} ({:.0f} TFLOP/s bf16, {:.0f} GB/s)\n",
                  module.name(), gpu.name, gpu.peak_tflops, gpu.hbm_gbps);
  // Bytes in binary units and FLOPs in decimal ones, so a column reads at a
  // glance; the exact counts are KernelRow's (and the tests').
  out += fmt::format("{:<48} {:<13} {:>5} {:>11} {:>11} {:>12} {:>11} {:<7}  {}\n", "kernel",
                     "kind", "ops", "read", "written", "FLOPs", "time us", "bound", "source");
  KernelRow total;
  for (const KernelRow& r : rows) {
    out += fmt::format("{:<48} {:<13} {:>5} {:>11} {:>11} {:>12} {:>11.3f} {:<7}  {}\n", r.name,
                       r.kind, r.ops, FormatBytes(r.bytes_read), FormatBytes(r.bytes_written),
                       FormatFlops(r.flops), r.time_us, r.compute_bound ? "compute" : "memory",
                       r.source);
    total.ops += r.ops;
    total.bytes_read += r.bytes_read;
    total.bytes_written += r.bytes_written;
    total.flops += r.flops;
    total.time_us += r.time_us;
  }
  out += fmt::format("{:<48} {:<13} {:>5} {:>11} {:>11} {:>12} {:>11.3f}\n",
                     fmt::format("total ({} kernels)", rows.size()), "", total.ops,
                     FormatBytes(total.bytes_read), FormatBytes(total.bytes_written),
                     FormatFlops(total.flops), total.time_us);
  out += "kernels by kind:";
  for (const auto& [kind, n] : analysis::CountKernels(module))
    out += fmt::format(" {}={}", kind, n);
  out += "\nkernels per layer (forward + backward):";
  for (const auto& [layer, n] : analysis::KernelsPerLayer(module))
    out += fmt::format(" h.{}={}", layer, n);
  out += "\n";
  return out;
}

}  // namespace gptc::passes
