// The artifact's emulator library (the `emu` section, gptc compile --emu):
// the shared object of the kernels compiled for the host (Note [host
// kernels] in compiler/codegen/host_lowering.h), loaded with dlopen from
// memory, with the manifest's index of its kernels.
//
// The emulated driver meets a kernel the way a GPU's does, as the PTX or
// cubin image given to cuModuleLoadDataEx; FindImage maps that image back to
// the host code compiled from the same module.
#ifndef GPTC_RUNTIME_EMU_KERNEL_LIBRARY_H_
#define GPTC_RUNTIME_EMU_KERNEL_LIBRARY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "compiler/program/container.h"
#include "compiler/support/status.h"
#include "runtime/emu/grid_runner.h"

namespace gptc::rt::emu {

struct EmuKernel {
  std::string entry, name, symbol;
  KernelFunction function = nullptr;
  int64_t params = 0;
  bool uses_sync = false;
  bool ordered = false;            // it has global atomics: Note [ordered atomics] (grid_runner.h)
  bool warpgroups = false;         // it has wgmma (warpgroup.h)
  uint32_t host_shared_bytes = 0;  // the host layout's static shared memory
  int64_t static_smem = 0;         // on the GPU (ptxas), what cuFuncGetAttribute reports
  int64_t registers = 0;           // per thread on the GPU; 0: unknown
};

class KernelLibrary {
 public:
  // Loads `artifact`'s emulator library; an artifact without one is refused
  // in one line saying how to compile one. `path` names the artifact. The
  // index is checked against the plan first: each kernel's symbol is its
  // entry's and name's, its parameter count the args its thunks pass, its
  // resources within a GPU's.
  static StatusOr<std::unique_ptr<KernelLibrary>> Load(const program::Artifact& artifact,
                                                       std::string_view path);
  // What Load checks before it loads any code (the fuzz tests call it).
  static Status Check(const program::Artifact& artifact, std::string_view path);
  // A library alone (`bytes`, e.g. linked by codegen::LinkHostLibrary), with
  // no kernel index: kernels by Symbol. `path` names it in errors. The
  // image is checked before dlopen (Note [emulator library checks] in
  // elf_image.h): it must define the ABI's symbols and `kernel_symbols`.
  static StatusOr<std::unique_ptr<KernelLibrary>> Open(
      std::string_view bytes, std::string_view path,
      std::span<const std::string> kernel_symbols = {});
  ~KernelLibrary();
  KernelLibrary(const KernelLibrary&) = delete;
  KernelLibrary& operator=(const KernelLibrary&) = delete;

  // The kernel whose PTX or cubin image (as the artifact holds it) is at
  // `image`, or null.
  const EmuKernel* FindImage(const void* image) const;
  const EmuKernel* Find(std::string_view entry, std::string_view name) const;
  const std::vector<EmuKernel>& kernels() const { return kernels_; }
  // The function exported as `name`, or null.
  KernelFunction Symbol(const std::string& name) const;
  // Whether instrumented accesses call the emulator (the library's flag).
  void SetChecks(bool on);

 private:
  KernelLibrary() = default;

  void* handle_ = nullptr;
  int fd_ = -1;  // the in-memory file it was loaded from
  uint8_t* checks_flag_ = nullptr;
  std::vector<EmuKernel> kernels_;
  std::map<uint64_t, size_t> ptx_;  // FNV-1a of the PTX text -> kernels_ index
  // The cubin images, compared byte for byte (their size is in no header).
  std::vector<std::pair<std::string, size_t>> cubins_;
};

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_KERNEL_LIBRARY_H_
