// gptrun --model: the JIT path. gptrun links no compiler (DESIGN.md), so it
// runs the `gptc` beside its own executable: `gptc compile --cached --json`,
// which compiles through the compile cache (Note [compile cache] in
// tools/gptc/compile_cache.h) and prints its record (Note [compile record]
// in tools/common/compile_record.h): the artifact, how the cache served it,
// the flags --batch auto and --remat auto chose. gptrun then trains with that
// artifact as with one given on its command line.
#ifndef GPTC_TOOLS_GPTRUN_JIT_H_
#define GPTC_TOOLS_GPTRUN_JIT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::tools {

// The device the artifact is compiled for: its kernels for the GPU (sm_90a),
// those and the host kernels (--device emu), or none (--device cpu:
// --no-codegen).
enum class JitDevice { kGpu, kEmu, kCpu };
std::string_view JitDeviceName(JitDevice device);  // "gpu", "emu", "cpu"
std::optional<JitDevice> ParseJitDevice(std::string_view name);

struct JitOptions {
  std::string model;  // a gptc model name
  int64_t batch = 4;
  bool batch_auto = false;  // --batch auto (gptc compile)
  int64_t tokens_per_step = 0;
  std::string remat = "none";              // gptc compile's --remat
  std::string memory_budget;               // gptc's --memory-budget text; empty: none given
  std::string attention_mma = "mma.sync";  // gptc compile's --attention-mma
  int64_t seq = 0;                         // 0: the model's context length
  int64_t grad_accum = 1;
  JitDevice device = JitDevice::kGpu;
  std::string artifact_out;  // also write the artifact there; empty: only the cache
};

// The arguments of the gptc run for `o` (after "gptc").
std::vector<std::string> JitCompileArgs(const JitOptions& o);

// Compiles (or finds) the artifact of `o` through the cache and returns its
// path. Prints one line: "gptrun: compiled|reused ... -> PATH". Errors:
// gptc not beside gptrun, or gptc's failure with gptc's own one-line error
// in it, of kind kUsage when gptc refused the flags (exit 2). `temporary` is
// set when the artifact is in neither the cache nor --artifact-out but in a
// temporary file (Note [temporary artifact] in tools/gptc/compile.cc), which
// the caller removes when done.
StatusOr<std::string> CompileThroughCache(const JitOptions& o, bool& temporary);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_JIT_H_
