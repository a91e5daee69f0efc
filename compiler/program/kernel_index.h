// The manifest's kernel indexes (docs/ARTIFACT.md): where each compiled
// kernel's PTX and cubin lie in their sections ("kernels"), and, with --emu,
// what the emulated driver answers for its host code ("emu" kernels). The
// compiler writes them (compiler/artifact/writer.cc) and the GPU runtime and
// the emulator read them, both through the codec below (the manifest's,
// manifest.h, calls it); FromJson checks structure only and names the field,
// the readers check the ranges.
#ifndef GPTC_COMPILER_PROGRAM_KERNEL_INDEX_H_
#define GPTC_COMPILER_PROGRAM_KERNEL_INDEX_H_

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::program {

// One kernel's code: {"entry", "name", "ptx_offset", "ptx_size"} and, when
// ptxas assembled it, {"cubin_offset", "cubin_size", "registers", "spill_bytes"}.
struct KernelRecord {
  std::string entry, name;
  int64_t ptx_offset = 0, ptx_size = 0;
  std::optional<std::pair<int64_t, int64_t>> cubin;  // offset, size
  int64_t registers = 0;                             // per thread (ptxas); 0 without a cubin
  int64_t spill_bytes = 0;                           // spill stores + loads (ptxas)
  bool operator==(const KernelRecord&) const = default;
};

// One kernel's host code in the emulator library (Note [host kernels]): what
// cuFuncGetAttribute would say on a GPU, and what its code uses.
struct HostKernelRecord {
  std::string entry, name, symbol;
  int64_t params = 0;
  bool uses_sync = false;
  int64_t host_shared_bytes = 0;  // the host layout's static shared memory
  int64_t static_smem = 0;        // on the GPU (ptxas)
  int64_t registers = 0;          // on the GPU; 0: unknown
  int64_t barriers = 0, shuffles = 0, mmas = 0, ldmatrices = 0, atomics = 0, accesses = 0;
  int64_t wgmmas = 0;  // absent from libraries of kernel ABIs before 5
  bool operator==(const HostKernelRecord&) const = default;
};

nlohmann::json ToJson(const KernelRecord& k);
StatusOr<KernelRecord> KernelRecordFromJson(const nlohmann::json& j, std::string_view where);
nlohmann::json ToJson(const HostKernelRecord& k);
StatusOr<HostKernelRecord> HostKernelRecordFromJson(const nlohmann::json& j,
                                                    std::string_view where);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_KERNEL_INDEX_H_
