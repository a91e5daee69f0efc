// The GPU architectures the kernels are compiled for, and the attention
// kernels' tensor-core instructions: one table of targets and one owner of
// the rule which instructions a target has. gptc's flag parser, the compile
// options and codegen all read these; header-only, so that a gptc built
// without codegen (no MLIR) still parses and checks its flags.
#ifndef GPTC_COMPILER_CODEGEN_TARGET_H_
#define GPTC_COMPILER_CODEGEN_TARGET_H_

#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace gptc::codegen {

// A PTX target: sm_90a is Hopper with its arch-specific instructions (wgmma,
// setmaxnreg), which run on compute capability 9.0 alone; sm_90 and sm_80 run
// on their capability and later ones.
enum class Target { kSm90a, kSm90, kSm80 };

struct TargetInfo {
  Target target;
  std::string_view name;  // the PTX `.target` and ptxas --gpu-name
  bool arch_specific;     // the "a" targets: wgmma and setmaxnreg
};

// Every target, the default (gptc compile --target) first.
inline constexpr TargetInfo kTargets[] = {
    {Target::kSm90a, "sm_90a", true},
    {Target::kSm90, "sm_90", false},
    {Target::kSm80, "sm_80", false},
};

constexpr const TargetInfo& InfoOf(Target target) {
  for (const TargetInfo& info : kTargets) {
    if (info.target == target) return info;
  }
  return kTargets[0];  // unreachable: every enumerator has its row
}

constexpr std::string_view TargetName(Target target) { return InfoOf(target).name; }

inline std::optional<Target> ParseTarget(std::string_view name) {
  for (const TargetInfo& info : kTargets) {
    if (info.name == name) return info.target;
  }
  return std::nullopt;
}

// The names joined for a message or a flag's help: "sm_90a, sm_90 or sm_80"
// (TargetNames(", ", " or ")), "sm_90a|sm_90|sm_80" (TargetNames("|", "|")).
inline std::string TargetNames(std::string_view separator, std::string_view last) {
  std::string out;
  const size_t n = std::size(kTargets);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += i + 1 == n ? last : separator;
    out += kTargets[i].name;
  }
  return out;
}

// The tensor-core instructions of the attention kernels (gptc compile
// --attention-mma): mma.sync (Note [tensor-core attention forward]) or, on
// sm_90a, wgmma.mma_async on swizzled tiles (attention_wgmma.h).
enum class AttentionMma { kMmaSync, kWgmma };

constexpr std::string_view AttentionMmaName(AttentionMma mma) {
  return mma == AttentionMma::kWgmma ? "wgmma" : "mma.sync";
}

inline std::optional<AttentionMma> ParseAttentionMma(std::string_view name) {
  if (name == "mma.sync") return AttentionMma::kMmaSync;
  if (name == "wgmma") return AttentionMma::kWgmma;
  return std::nullopt;
}

// The one target whose instructions `mma` needs, or nullopt when every target
// has them: wgmma is an arch-specific sm_90a instruction.
constexpr std::optional<Target> TargetRequiredBy(AttentionMma mma) {
  if (mma == AttentionMma::kWgmma) return Target::kSm90a;
  return std::nullopt;
}

// Whether `target` has the instructions of `mma`.
constexpr bool TargetHas(Target target, AttentionMma mma) {
  const std::optional<Target> required = TargetRequiredBy(mma);
  return !required || *required == target;
}

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_TARGET_H_
