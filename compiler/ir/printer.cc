#include "compiler/ir/printer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "compiler/ir/all_reduce_bucket.h"

namespace gptc::ir {

namespace {

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string FormatSlice(const SliceSpec& s) {
  std::vector<std::string> parts;
  for (size_t d = 0; d < s.starts.size(); ++d) {
    if (s.strides[d] == 1) {
      parts.push_back(fmt::format("[{}:{}]", s.starts[d], s.limits[d]));
    } else {
      parts.push_back(fmt::format("[{}:{}:{}]", s.starts[d], s.limits[d], s.strides[d]));
    }
  }
  return fmt::format("{{{}}}", fmt::join(parts, ","));
}

std::string FormatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, end);
}

// The attributes `inst`'s opcode reads, as `key=value` strings in a fixed
// order per opcode.
std::vector<std::string> FormatOpcodeAttrs(const Instruction& inst) {
  const Attrs& a = inst.attrs();
  std::vector<std::string> out;
  switch (inst.opcode()) {
    case Opcode::kIota:
      out.push_back(fmt::format("iota_dimension={}", a.index));
      break;
    case Opcode::kBroadcast:
    case Opcode::kTranspose:
    case Opcode::kConcatenate:
      out.push_back("dimensions=" + DimsToString(a.dimensions));
      break;
    case Opcode::kReduce:
      out.push_back("dimensions=" + DimsToString(a.dimensions));
      out.push_back(fmt::format("kind={}", ReduceKindName(a.reduce_kind)));
      break;
    case Opcode::kAllReduce:
      out.push_back(fmt::format("kind={}", ReduceKindName(a.reduce_kind)));
      break;
    case Opcode::kReduceScatter:
      out.push_back(fmt::format("kind={}", ReduceKindName(a.reduce_kind)));
      out.push_back(fmt::format("replicas={}", a.index));
      break;
    case Opcode::kAllGather:
      out.push_back(fmt::format("replicas={}", a.index));
      break;
    case Opcode::kSlice:
      out.push_back("slice=" + FormatSlice(a.slice));
      break;
    case Opcode::kPad:
      out.push_back("low=" + DimsToString(a.pad_low));
      out.push_back("high=" + DimsToString(a.pad_high));
      break;
    case Opcode::kCompare:
      out.push_back(fmt::format("direction={}", CompareDirectionName(a.direction)));
      break;
    case Opcode::kDot:
      if (!a.dot.lhs_batch.empty() || !a.dot.rhs_batch.empty()) {
        out.push_back("lhs_batch=" + DimsToString(a.dot.lhs_batch));
        out.push_back("rhs_batch=" + DimsToString(a.dot.rhs_batch));
      }
      out.push_back("lhs_contracting=" + DimsToString(a.dot.lhs_contracting));
      out.push_back("rhs_contracting=" + DimsToString(a.dot.rhs_contracting));
      break;
    case Opcode::kGather:
    case Opcode::kScatterAdd:
      out.push_back(fmt::format("axis={}", a.index));
      break;
    case Opcode::kGetTupleElement:
      out.push_back(fmt::format("index={}", a.index));
      break;
    case Opcode::kFusion:
      out.push_back(fmt::format("kind={}", FusionKindName(a.fusion_kind)));
      if (a.gemm_epilogue) out.push_back("epilogue=" + GemmEpilogueToString(*a.gemm_epilogue));
      break;
    case Opcode::kAttention:
      out.push_back(fmt::format("causal={}", a.causal));
      out.push_back("scale=" + FormatDouble(a.scale));
      if (a.grad_dtype) out.push_back(fmt::format("grad_dtype={}", DTypeName(*a.grad_dtype)));
      break;
    case Opcode::kAttentionLse:
    case Opcode::kAttentionGrad:
      out.push_back(fmt::format("causal={}", a.causal));
      out.push_back("scale=" + FormatDouble(a.scale));
      if (a.grad_dtype) out.push_back(fmt::format("grad_dtype={}", DTypeName(*a.grad_dtype)));
      if (inst.opcode() == Opcode::kAttentionGrad) {
        out.push_back(fmt::format("wrt={}", "qkv"[std::clamp<int64_t>(a.index, 0, 2)]));
      }
      break;
    case Opcode::kSoftmaxCrossEntropy:
      if (a.num_classes != 0) out.push_back(fmt::format("num_classes={}", a.num_classes));
      break;
    default:
      break;
  }
  if (std::optional<int64_t> bucket = CollectiveBucket(inst)) {
    out.push_back(fmt::format("bucket={}", *bucket));
  }
  return out;
}

// The attributes of `inst` as `key=value` strings: its opcode's, the called
// computation, then (with `origin`) its role and metadata.
std::vector<std::string> FormatAttrs(const Instruction& inst, bool origin) {
  std::vector<std::string> out = FormatOpcodeAttrs(inst);
  if (inst.called_computation() != nullptr) {
    out.push_back("calls=%" + inst.called_computation()->name());
  }
  if (!origin) return out;
  const Role role = inst.role();
  if (role.phase != Phase::kNone) out.push_back(fmt::format("phase={}", PhaseName(role.phase)));
  if (role.layer >= 0) out.push_back(fmt::format("layer={}", role.layer));
  if (!inst.metadata().empty()) out.push_back("meta=" + Quote(inst.metadata()));
  return out;
}

std::string FormatConstant(const Instruction& inst) {
  const std::vector<double>& values = inst.attrs().literal;
  DType dtype = inst.shape().dtype();
  if (inst.shape().is_scalar() && values.size() == 1) return FormatLiteralValue(dtype, values[0]);
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += FormatLiteralValue(dtype, values[i]);
  }
  return out + "}";
}

}  // namespace

std::string FormatLiteralValue(DType dtype, double value) {
  if (dtype == DType::kPred) return value != 0 ? "true" : "false";
  if (IsInteger(dtype)) return fmt::format("{}", static_cast<int64_t>(value));
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // Shortest decimal that round-trips as a float; the parser rounds back to the dtype.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), static_cast<float>(value));
  return std::string(buf, end);
}

std::string PrintInstruction(const Instruction& inst, bool origin) {
  std::string operands;
  if (inst.opcode() == Opcode::kParameter) {
    operands = fmt::format("{}", inst.attrs().index);
  } else if (inst.opcode() == Opcode::kConstant) {
    operands = FormatConstant(inst);
  } else {
    std::vector<std::string> names;
    for (const Instruction* op : inst.operands()) names.push_back("%" + op->name());
    operands = fmt::format("{}", fmt::join(names, ", "));
  }
  std::string line = fmt::format("%{} = {} {}({})", inst.name(), inst.shape().ToString(),
                                 OpcodeName(inst.opcode()), operands);
  for (const std::string& attr : FormatAttrs(inst, origin)) line += ", " + attr;
  return line;
}

std::string PrintComputation(const Computation& computation, bool is_entry) {
  std::string out = fmt::format("{}%{} {{\n", is_entry ? "ENTRY " : "", computation.name());
  for (const auto& inst : computation.instructions()) {
    out += inst.get() == computation.root() ? "  ROOT " : "  ";
    out += PrintInstruction(*inst);
    out += '\n';
  }
  return out + "}\n";
}

std::string PrintModule(const Module& module) {
  std::string out = fmt::format("module {}\n", module.name());
  for (const auto& c : module.computations()) {
    out += '\n';
    out += PrintComputation(*c, c.get() == module.entry());
  }
  return out;
}

}  // namespace gptc::ir
