// The .gptx container: reading (gptrun, gptc inspect) and encoding (gptc
// compile). See docs/ARTIFACT.md for the layout; no LLVM/MLIR/CUDA here.
//
//   "GPTX" | u32 format version | u64 file size | u32 section count
//   | section* { u32 name length | name | u64 length | bytes }
//   | u64 FNV-1a-64 of every preceding byte
// All integers little-endian. Sections appear in kSectionOrder order; the
// optional ones (cubin; emu, the emulator library of gptc compile --emu) may
// be absent.
#ifndef GPTC_COMPILER_PROGRAM_CONTAINER_H_
#define GPTC_COMPILER_PROGRAM_CONTAINER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/program/manifest.h"
#include "compiler/support/status.h"

namespace gptc::program {

inline constexpr char kArtifactMagic[4] = {'G', 'P', 'T', 'X'};
// 2: the entry signatures are written once, in the plan (not also in the
// manifest's "entries"); grad_accum once, in the manifest's "flags"; no
// params[].offsets (the plan's input slots give them). 3: a gemm thunk
// names its fallback kernel (`fallback_kernel`, Note [epilogue fallback] in
// plan.h) instead of the runtime finding it next to the gemm; the IR text
// carries the gemm fusions' epilogue records. Readers accept exactly this
// version.
inline constexpr uint32_t kArtifactFormatVersion = 3;
// Every section a file may hold, in file order.
inline constexpr std::string_view kSectionOrder[] = {"manifest", "ir",     "ptx", "cubin",
                                                     "plan",     "params", "emu"};
inline constexpr std::string_view kRequiredSections[] = {"manifest", "ir", "ptx", "plan",
                                                         "params"};

// FNV-1a, 64-bit.
uint64_t Fnv1a64(std::string_view bytes);

// The container bytes for `sections` (name, contents), in the given order.
// Errors name a section out of kSectionOrder order or unknown.
StatusOr<std::string> EncodeArtifact(
    const std::vector<std::pair<std::string, std::string>>& sections);

struct ReadOptions {
  // When set, the artifact must have been compiled for this target
  // ("sm_90a"); checked against the manifest's "target".
  std::string expected_target;
};

// A decoded artifact: the manifest decoded by its codec (manifest.h), the
// plan and params sections parsed (their codecs: plan.h, param.h).
struct Artifact {
  uint32_t format_version = 0;
  // The trailer's FNV-1a-64: what a profile or report names the artifact by.
  uint64_t checksum = 0;
  std::vector<std::pair<std::string, std::string>> sections;  // file order
  Manifest manifest;
  nlohmann::json plan;
  nlohmann::json params;

  // The bytes of section `name`, or null when absent.
  const std::string* Find(std::string_view name) const;
};

// Decodes `bytes` read from `path` (used in the messages). Every error is one
// line starting with `path: ` (bad magic, truncated, newer version, checksum
// mismatch, a missing or malformed section, a manifest its codec refuses,
// another target).
StatusOr<Artifact> DecodeArtifact(std::string_view bytes, std::string_view path,
                                  const ReadOptions& options = {});
StatusOr<Artifact> ReadArtifact(const std::string& path, const ReadOptions& options = {});

// The bytes of section `name` of the container `bytes`, walking its framing
// only (no checksum, no JSON: for a writer looking at what it wrote), or
// nullopt when absent or the framing is broken.
std::optional<std::string_view> FindSection(std::string_view bytes, std::string_view name);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_CONTAINER_H_
