#include "compiler/codegen/wgmma_asm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <vector>

#include "compiler/program/emu_abi.h"

namespace gptc::codegen {
namespace {

namespace emu = program::emu;

constexpr char kMemory[] = "~{memory}";

// "=f,=f,...,INPUTS,0,1,...,~{memory}" for `count` registers tied in and
// out around `inputs` (a comma-separated list, or empty).
std::string TiedConstraints(int64_t count, const std::string& inputs) {
  std::vector<std::string> parts(count, "=f");
  if (!inputs.empty()) parts.push_back(inputs);
  for (int64_t i = 0; i < count; ++i) parts.push_back(std::to_string(i));
  parts.push_back(kMemory);
  return fmt::format("{}", fmt::join(parts, ","));
}

// "$first, ..., $(first + count - 1)"
std::string Operands(int64_t first, int64_t count) {
  std::string out;
  for (int64_t i = 0; i < count; ++i) out += fmt::format("{}${}", i ? ", " : "", first + i);
  return out;
}

}  // namespace

std::string WgmmaForm::Mnemonic() const {
  return fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", n,
                     f16 ? "f16.f16" : "bf16.bf16");
}

uint32_t WgmmaForm::EmuOp() const {
  uint32_t op = static_cast<uint32_t>(n) & emu::kWgmmaNMask;
  if (register_a) op |= emu::kWgmmaRegisterA;
  if (f16) op |= emu::kWgmmaF16;
  if (trans_a) op |= emu::kWgmmaTransA;
  if (trans_b) op |= emu::kWgmmaTransB;
  if (neg_a) op |= emu::kWgmmaNegA;
  if (neg_b) op |= emu::kWgmmaNegB;
  return op;
}

bool IsValid(const WgmmaForm& form) {
  return form.n >= 8 && form.n <= 256 && form.n % 8 == 0 && !(form.register_a && form.trans_a);
}

// The predicate p carries scale-d: the hardware takes it as a predicate, the
// kernels pass it as an integer register (a constant where they know it).
InlineAsm WgmmaAsm(const WgmmaForm& form) {
  const int64_t r = form.accumulators();
  const std::string scales = fmt::format("{}, {}", form.neg_a ? -1 : 1, form.neg_b ? -1 : 1);
  std::string operands, inputs;
  int64_t scale_d = 0;
  if (form.register_a) {
    operands =
        fmt::format("{{{}}}, ${}, p, {}, {}", Operands(r, 4), r + 4, scales, form.trans_b ? 1 : 0);
    inputs = "r,r,r,r,l,r";
    scale_d = r + 5;
  } else {
    operands = fmt::format("${}, ${}, p, {}, {}, {}", r, r + 1, scales, form.trans_a ? 1 : 0,
                           form.trans_b ? 1 : 0);
    inputs = "l,l,r";
    scale_d = r + 2;
  }
  return {fmt::format("{{\n.reg .pred p;\nsetp.ne.b32 p, ${}, 0;\n{} {{{}}}, {};\n}}", scale_d,
                      form.Mnemonic(), Operands(0, r), operands),
          TiedConstraints(r, inputs)};
}

InlineAsm WgmmaFenceAsm() { return {"wgmma.fence.sync.aligned;", kMemory}; }
InlineAsm WgmmaCommitAsm() { return {"wgmma.commit_group.sync.aligned;", kMemory}; }
InlineAsm WgmmaWaitAsm(int64_t n) {
  return {fmt::format("wgmma.wait_group.sync.aligned {};", n), kMemory};
}
InlineAsm WgmmaRegisterFenceAsm(int64_t count) { return {"", TiedConstraints(count, "")}; }
InlineAsm FenceProxyAsyncAsm() { return {"fence.proxy.async.shared::cta;", kMemory}; }

std::optional<WarpgroupAsm> RecognizeWarpgroupAsm(const std::string& text,
                                                  const std::string& constraints) {
  using Kind = WarpgroupAsm::Kind;
  auto is = [&](const InlineAsm& a) { return a.text == text && a.constraints == constraints; };
  if (is(WgmmaFenceAsm())) return WarpgroupAsm{.kind = Kind::kFence};
  if (is(WgmmaCommitAsm())) return WarpgroupAsm{.kind = Kind::kCommit};
  if (is(FenceProxyAsyncAsm())) return WarpgroupAsm{.kind = Kind::kFenceProxyAsync};
  for (int64_t n = 0; n <= 7; ++n) {
    if (is(WgmmaWaitAsm(n))) return WarpgroupAsm{.kind = Kind::kWait, .count = n};
  }
  if (text.empty()) {
    // "=f," per register: the count follows from the constraints' length.
    const int64_t count = static_cast<int64_t>(constraints.find_first_not_of("=f,")) / 3;
    if (count > 0 && is(WgmmaRegisterFenceAsm(count))) {
      return WarpgroupAsm{.kind = Kind::kRegisterFence, .count = count};
    }
    return std::nullopt;
  }
  static constexpr char kShape[] = "wgmma.mma_async.sync.aligned.m64n";
  const size_t at = text.find(kShape);
  if (at == std::string::npos) return std::nullopt;
  int64_t n = 0;
  for (size_t i = at + sizeof(kShape) - 1; i < text.size() && n <= 256 && std::isdigit(text[i]);
       ++i) {
    n = 10 * n + (text[i] - '0');
  }
  for (uint32_t bits = 0; bits < 64; ++bits) {
    const WgmmaForm form{.n = n,
                         .register_a = (bits & 1) != 0,
                         .f16 = (bits & 2) != 0,
                         .trans_a = (bits & 4) != 0,
                         .trans_b = (bits & 8) != 0,
                         .neg_a = (bits & 16) != 0,
                         .neg_b = (bits & 32) != 0};
    if (IsValid(form) && is(WgmmaAsm(form)))
      return WarpgroupAsm{.kind = Kind::kWgmma, .wgmma = form};
  }
  return std::nullopt;
}

}  // namespace gptc::codegen
