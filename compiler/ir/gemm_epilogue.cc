#include "compiler/ir/gemm_epilogue.h"

#include <fmt/format.h>

#include <vector>

#include "compiler/ir/instruction.h"
#include "compiler/ir/patterns.h"

namespace gptc::ir {

namespace {

struct ActivationInfo {
  std::string_view name;
  ActivationAux aux;
};
constexpr ActivationInfo kActivations[] = {
#define GPTC_GEMM_ACTIVATION_INFO(e, name, aux) {name, ActivationAux::aux},
    GPTC_GEMM_ACTIVATIONS(GPTC_GEMM_ACTIVATION_INFO)
#undef GPTC_GEMM_ACTIVATION_INFO
};

}  // namespace

std::string_view GemmActivationName(GemmActivation a) {
  return kActivations[static_cast<size_t>(a)].name;
}

ActivationAux GemmActivationAux(GemmActivation a) {
  return kActivations[static_cast<size_t>(a)].aux;
}

std::optional<GemmActivation> ParseGemmActivation(std::string_view s) {
  for (size_t i = 0; i < std::size(kActivations); ++i) {
    if (kActivations[i].name == s) return static_cast<GemmActivation>(i);
  }
  return std::nullopt;
}

std::string GemmEpilogueToString(const GemmEpilogue& e) {
  std::vector<std::string> parts = {fmt::format("d={}", e.d)};
  auto add = [&](const char* key, int64_t v) {
    if (v >= 0) parts.push_back(fmt::format("{}={}", key, v));
  };
  add("bias", e.bias);
  add("residual", e.residual);
  if (e.activation != GemmActivation::kNone) {
    parts.push_back(fmt::format("activation={}", GemmActivationName(e.activation)));
  }
  add("aux_out", e.aux_out);
  add("aux_in", e.aux_in);
  add("bias_grad_out", e.bias_grad_out);
  add("bias_grad_of", e.bias_grad_of);
  if (e.transposed) parts.push_back("transposed=true");
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

Status CheckGemmEpilogue(const Instruction& fusion) {
  const bool gemm =
      fusion.opcode() == Opcode::kFusion && fusion.attrs().fusion_kind == FusionKind::kGemm;
  const std::optional<GemmEpilogue>& record = fusion.attrs().gemm_epilogue;
  if (!gemm) {
    if (record) return Error("only a kind=gemm fusion has an epilogue record");
    return Status::Ok();
  }
  if (!record) return Error("kind=gemm fusion without its epilogue record (epilogue={{d=...}})");
  const GemmEpilogue& e = *record;
  const int64_t outputs =
      fusion.shape().is_tuple() ? static_cast<int64_t>(fusion.shape().tuple_elements().size()) : 1;
  const int64_t operands = fusion.operand_count();
  auto output_ok = [&](int64_t i) { return i >= 0 && i < outputs; };
  auto operand_ok = [&](int64_t i) { return i >= 0 && i < operands; };
  if (!output_ok(e.d)) return Error("epilogue d={} is not one of the {} outputs", e.d, outputs);
  const Shape& d = FusionOutputShape(fusion, e.d);
  const int64_t extra = (e.aux_out >= 0 ? 1 : 0) + (e.bias_grad_out >= 0 ? 1 : 0);
  if (outputs != 1 + extra) {
    return Error("epilogue names {} outputs of the fusion's {}", 1 + extra, outputs);
  }
  if (e.bias >= 0) {
    if (!operand_ok(e.bias)) return Error("epilogue bias={} is not an operand", e.bias);
    const Shape& b = fusion.operand(e.bias)->shape();
    if (b.rank() != 1 || d.rank() == 0 || b.dims()[0] != d.dims().back()) {
      return Error("epilogue bias %{} is {}, not a vector of D's last dim ({})",
                   fusion.operand(e.bias)->name(), b.ToString(), d.ToString());
    }
  }
  if (e.residual >= 0) {
    if (!operand_ok(e.residual)) return Error("epilogue residual={} is not an operand", e.residual);
    if (fusion.operand(e.residual)->shape().dims() != d.dims()) {
      return Error("epilogue residual %{} is {}, D is {}", fusion.operand(e.residual)->name(),
                   fusion.operand(e.residual)->shape().ToString(), d.ToString());
    }
  }
  const ActivationAux aux = GemmActivationAux(e.activation);
  if (e.aux_out >= 0 &&
      (aux != ActivationAux::kMayWrite || !output_ok(e.aux_out) || e.aux_out == e.d ||
       FusionOutputShape(fusion, e.aux_out).dims() != d.dims())) {
    return Error("epilogue aux_out={} is not the pre-activation output, of D's dims, of an "
                 "activation that keeps it",
                 e.aux_out);
  }
  const bool reads_aux = aux == ActivationAux::kReads;
  if (reads_aux != (e.aux_in >= 0)) {
    return Error("epilogue aux_in={}: an activation's backward and only it reads an aux operand",
                 e.aux_in);
  }
  if (reads_aux &&
      (!operand_ok(e.aux_in) || fusion.operand(e.aux_in)->shape().dims() != d.dims())) {
    return Error("epilogue aux_in={} is not an operand of D's dims", e.aux_in);
  }
  if ((e.bias_grad_out >= 0) != (e.bias_grad_of >= 0)) {
    return Error("epilogue bias_grad_out and bias_grad_of go together");
  }
  if (e.bias_grad_out >= 0) {
    if (!output_ok(e.bias_grad_out) || e.bias_grad_out == e.d || e.bias_grad_out == e.aux_out ||
        FusionOutputShape(fusion, e.bias_grad_out).rank() != 1) {
      return Error("epilogue bias_grad_out={} is not a vector output of its own", e.bias_grad_out);
    }
    if (!operand_ok(e.bias_grad_of)) {
      return Error("epilogue bias_grad_of={} is not an operand", e.bias_grad_of);
    }
  }
  if (e.transposed && d.rank() != 2)
    return Error("epilogue transposed with a D of rank {}", d.rank());
  return Status::Ok();
}

}  // namespace gptc::ir
