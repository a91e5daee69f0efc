// The artifact's manifest section (docs/ARTIFACT.md): what the artifact is
// (format, gptc version, target, whether every thunk has a kernel), the model
// and the compile flags that shaped the program, the kernel indexes and the
// plan's counts. The compiler writes it (compiler/artifact/writer.cc), the
// container decodes it for every reader (compiler/program/container.h), both
// through the codec below. FromJson checks structure only (every field
// present with its type) and names the field ("manifest.flags has no
// 'batch'"); what the values must satisfy the readers check.
#ifndef GPTC_COMPILER_PROGRAM_MANIFEST_H_
#define GPTC_COMPILER_PROGRAM_MANIFEST_H_

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/program/kernel_index.h"
#include "compiler/program/model_config.h"
#include "compiler/program/program.h"
#include "compiler/support/status.h"

namespace gptc::program {

// The flags of gptc compile that shaped the program: {"batch", "seq",
// "grad_accum", "world_size", "zero_stage" (when not 0), "precision", "remat", "codegen",
// "attention_mma", "beta1", "beta2", "eps", "weight_decay", "clip_norm"}
// (the AdamW options flat), and "remat_layers".
struct CompileFlags {
  int64_t batch = 0, seq = 0;  // one micro-batch of one rank
  int64_t grad_accum = 1;      // micro-batches per optimizer step: its one record
  int64_t world_size = 1;      // data-parallel ranks (gptc compile --dp)
  // gptc compile --zero: 0, or 1 for ZeRO-1 (Note [ZeRO-1 shards] in
  // program.h); written only when not 0, and 0 where absent.
  int64_t zero_stage = 0;
  std::string precision;       // "bf16", "f32"
  // The --remat flag as given, for people: "none", "block:0-5,none:6-11", or
  // the plan --remat auto chose ("auto: wide:0,none:1"). Nothing parses it:
  // readers take remat_layers.
  std::string remat;
  // The remat policy applied to each transformer block, block 0 first
  // ("none", "dots", "wide", "block"); empty in artifacts written before it
  // was recorded (and then written not at all).
  std::vector<std::string> remat_layers;
  bool codegen = true;         // false: gptc compile --no-codegen, no kernel at all
  // The attention kernels' tensor-core instructions (gptc compile
  // --attention-mma): "mma.sync" or "wgmma"; an artifact without it had mma.sync.
  std::string attention_mma = "mma.sync";
  AdamWOptions adamw;
  bool operator==(const CompileFlags&) const = default;
};

// The emulator library's index (gptc compile --emu): {"abi", "kernels"}.
struct EmuIndex {
  int64_t abi = 0;  // program::emu::kKernelAbiVersion when written
  std::vector<HostKernelRecord> kernels;
  bool operator==(const EmuIndex&) const = default;
};

// What the plans hold, counted over every entry (gptc inspect prints them).
struct ArtifactCounts {
  std::map<std::string, int64_t> thunks;           // by thunk kind
  std::map<std::string, int64_t> kernels_by_kind;  // kernel thunks by fusion kind
  std::map<std::string, int64_t> gemm_epilogues;   // gemm thunks by epilogue
  std::map<std::string, int64_t> unsupported;      // by what ("fusion kind attention", "gather")
  bool operator==(const ArtifactCounts&) const = default;
};

struct Manifest {
  int64_t format_version = 0;  // the container header's, repeated
  std::string gptc_version;
  std::string target;     // "sm_90a"
  bool complete = false;  // no unsupported thunk: the GPU and the emulator can run it
  ModelConfig model;
  CompileFlags flags;
  std::vector<KernelRecord> kernels;  // in the ptx (and cubin) sections
  ArtifactCounts counts;              // written at the top level
  std::optional<EmuIndex> emu;        // with the emu section only
  bool operator==(const Manifest&) const = default;
};

// ToJson writes what FromJson reads; FromJson's errors start with `where`.
nlohmann::json ToJson(const CompileFlags& f);
StatusOr<CompileFlags> CompileFlagsFromJson(const nlohmann::json& j, std::string_view where);
nlohmann::json ToJson(const EmuIndex& e);
StatusOr<EmuIndex> EmuIndexFromJson(const nlohmann::json& j, std::string_view where);
nlohmann::json ToJson(const Manifest& m);
// Errors start with "manifest".
StatusOr<Manifest> ManifestFromJson(const nlohmann::json& j);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_MANIFEST_H_
