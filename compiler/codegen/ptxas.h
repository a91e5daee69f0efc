// Runs NVIDIA's ptxas on generated PTX, so that code that does not assemble
// fails in `gptc` with the kernel's name rather than at load time on a GPU.
#ifndef GPTC_COMPILER_CODEGEN_PTXAS_H_
#define GPTC_COMPILER_CODEGEN_PTXAS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::codegen {

// What `ptxas -v` reports for one entry function.
struct PtxasInfo {
  int64_t registers = 0;     // per thread
  int64_t shared_bytes = 0;  // static shared memory per block
  int64_t stack_bytes = 0;   // stack frame per thread
  int64_t spill_stores = 0;  // bytes
  int64_t spill_loads = 0;   // bytes
  std::string cubin;         // the assembled object
  // Its warnings, every kernel's ("ptxas warning : ... wgmma.mma_async
  // instructions are serialized ...": a wgmma pipeline ptxas could not keep).
  std::vector<std::string> warnings;
};

// The ptxas binary to use: `explicit_path` if non-empty, else
// /usr/local/cuda/bin/ptxas, else `ptxas` on PATH; nullopt if none is executable.
std::optional<std::string> FindPtxas(std::string_view explicit_path = "");

// Assembles `ptx` (one kernel, entry `kernel_name`) for `arch` ("sm_90a").
// Errors read "kernel NAME: ptxas: <first error line>".
StatusOr<PtxasInfo> RunPtxas(const std::string& ptxas, std::string_view ptx,
                             std::string_view kernel_name, std::string_view arch);

// Parses the `ptxas -v` log for `kernel_name` (exposed for tests).
PtxasInfo ParsePtxasLog(std::string_view log, std::string_view kernel_name);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_PTXAS_H_
