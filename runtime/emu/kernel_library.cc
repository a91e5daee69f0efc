#include "runtime/emu/kernel_library.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <variant>

#include "compiler/program/emu_abi.h"
#include "compiler/program/kernel_index.h"
#include "compiler/program/plan.h"
#include "runtime/emu/elf_image.h"
#include "runtime/gpu/plan_reader.h"

namespace gptc::rt::emu {

namespace abi = program::emu;

namespace {

// Note [emulator library checks]: the index's promises, checked against the
// plan before any of its code is loaded. Each kernel's symbol is named as
// the ABI names kernels, and the ELF checks find it defined in the library
// (so no index entry reaches a function its dependencies export, as
// dlsym's search would), its params the arguments every thunk
// launching it passes (cuLaunchKernel reads that many), and its resources
// those a GPU could give it.
Status CheckEmuIndex(const program::EmuIndex& index, const program::Plan& plan) {
  std::map<std::pair<std::string, std::string>, size_t> args;  // (entry, kernel) -> count
  for (const program::EntryPlan& entry : plan.entries) {
    for (const program::Thunk& t : entry.thunks) {
      const auto* k = std::get_if<program::KernelThunk>(&t.body);
      if (k == nullptr) continue;
      auto [it, added] = args.emplace(std::pair{std::string(entry.name()), t.name}, k->args.size());
      if (!added && it->second != k->args.size()) {
        return Error("plan entry {}: kernel {} is launched with {} and {} args", entry.name(),
                     t.name, it->second, k->args.size());
      }
    }
  }
  for (size_t i = 0; i < index.kernels.size(); ++i) {
    const program::HostKernelRecord& r = index.kernels[i];
    const std::string where = fmt::format("manifest emu.kernels[{}] ({})", i, r.name);
    if (!r.symbol.starts_with(abi::kKernelSymbolPrefix)) {
      return Error("{}: symbol {} is not a kernel's (they start with {})", where, r.symbol,
                   abi::kKernelSymbolPrefix);
    }
    auto it = args.find({r.entry, r.name});
    if (it != args.end() && r.params != static_cast<int64_t>(it->second)) {
      return Error("{}: {} parameters, the plan's thunks pass {} args", where, r.params,
                   it->second);
    }
    // 4096 pointers: CUDA's 32 KiB of kernel parameters.
    if (r.params < 0 || r.params > 4096 || r.registers < 0 || r.registers > 255 || r.static_smem < 0 ||
        r.static_smem > (227 << 10) || r.host_shared_bytes < 0 ||
        r.host_shared_bytes > (int64_t{1} << 20)) {
      return Error("{}: params {}, registers {}, static_smem {}, host_shared_bytes {}: out of "
                   "range",
                   where, r.params, r.registers, r.static_smem, r.host_shared_bytes);
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<KernelLibrary>> KernelLibrary::Open(
    std::string_view bytes, std::string_view path, std::span<const std::string> kernel_symbols) {
  std::vector<std::string> symbols(kernel_symbols.begin(), kernel_symbols.end());
  for (const char* s : {abi::kAbiSymbol, abi::kRuntimeSymbol, abi::kChecksSymbol}) {
    symbols.emplace_back(s);
  }
  if (Status s = CheckElfImage(bytes, symbols); !s.ok()) {
    return Error("{}: its emulator library is damaged: {}", path, s.message());
  }
  std::unique_ptr<KernelLibrary> lib(new KernelLibrary());
  // dlopen wants a file: an anonymous in-memory one, gone with the process.
  const int fd = memfd_create("gptc-emu", MFD_CLOEXEC);
  if (fd < 0) return Error("{}: memfd_create: {}", path, std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n <= 0) {
      close(fd);
      return Error("{}: writing the emulator library: {}", path, std::strerror(errno));
    }
    written += static_cast<size_t>(n);
  }
  // The descriptor stays open with the library: glibc takes a path it has
  // loaded before for the same library, and a reused descriptor number would
  // give another artifact's library that path.
  lib->fd_ = fd;
  const std::string file = fmt::format("/proc/self/fd/{}", fd);
  lib->handle_ = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) {
    return Error("{}: cannot load its emulator library: {}", path, dlerror());
  }
  auto* abi = static_cast<const uint32_t*>(dlsym(lib->handle_, abi::kAbiSymbol));
  auto** runtime = static_cast<const abi::EmuRuntime**>(dlsym(lib->handle_, abi::kRuntimeSymbol));
  lib->checks_flag_ = static_cast<uint8_t*>(dlsym(lib->handle_, abi::kChecksSymbol));
  if (abi == nullptr || runtime == nullptr || lib->checks_flag_ == nullptr) {
    return Error("{}: its emulator library lacks {}, {} or {}", path, abi::kAbiSymbol,
                 abi::kRuntimeSymbol, abi::kChecksSymbol);
  }
  if (*abi != abi::kKernelAbiVersion) {
    return Error("{}: its emulator library was built for ABI {}, not {}", path, *abi,
                 abi::kKernelAbiVersion);
  }
  *runtime = GridRunner::Table();
  return lib;
}

KernelFunction KernelLibrary::Symbol(const std::string& name) const {
  return reinterpret_cast<KernelFunction>(dlsym(handle_, name.c_str()));
}

Status KernelLibrary::Check(const program::Artifact& artifact, std::string_view path) {
  if (!artifact.manifest.flags.codegen) {
    return Error(
        "{}: was compiled with --no-codegen (no kernels): only --device cpu runs it; compile it "
        "with `gptc compile ... --emu` for --device emu",
        path);
  }
  const std::string* library = artifact.Find("emu");
  if (library == nullptr || !artifact.manifest.emu) {
    return Error(
        "{}: has no emulator library: compile it with `gptc compile ... --emu` to run it on "
        "--device emu",
        path);
  }
  const program::EmuIndex& index = *artifact.manifest.emu;
  if (index.abi != abi::kKernelAbiVersion) {
    return Error("{}: its emulator library has ABI {}, this gptrun runs ABI {} (recompile it)",
                 path, index.abi, abi::kKernelAbiVersion);
  }
  StatusOr<program::Plan> plan = program::PlanFromJson(artifact.plan);
  if (!plan.ok()) return plan.status().WithPrefix(path);
  RETURN_IF_ERROR(CheckEmuIndex(index, *plan).WithPrefix(path));
  const std::string* ptx = artifact.Find("ptx");
  const std::string* cubin = artifact.Find("cubin");
  if (Status s = gpu::CheckKernelIndex(artifact.manifest.kernels,
                                       ptx != nullptr ? static_cast<int64_t>(ptx->size()) : 0,
                                       cubin != nullptr ? static_cast<int64_t>(cubin->size()) : 0);
      !s.ok()) {
    return s.WithPrefix(path);
  }
  std::vector<std::string> symbols = {abi::kAbiSymbol, abi::kRuntimeSymbol, abi::kChecksSymbol};
  for (const program::HostKernelRecord& r : index.kernels) symbols.push_back(r.symbol);
  if (Status s = CheckElfImage(*library, symbols); !s.ok()) {
    return Error("{}: its emulator library is damaged: {}", path, s.message());
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<KernelLibrary>> KernelLibrary::Load(const program::Artifact& artifact,
                                                             std::string_view path) {
  RETURN_IF_ERROR(Check(artifact, path));
  const program::EmuIndex& index = *artifact.manifest.emu;
  std::vector<std::string> symbols;
  for (const program::HostKernelRecord& r : index.kernels) symbols.push_back(r.symbol);
  ASSIGN_OR_RETURN(std::unique_ptr<KernelLibrary> lib, Open(*artifact.Find("emu"), path, symbols));
  const std::vector<program::KernelRecord>& images = artifact.manifest.kernels;
  const std::vector<program::HostKernelRecord>& records = index.kernels;
  for (size_t i = 0; i < records.size(); ++i) {
    const program::HostKernelRecord& r = records[i];
    EmuKernel kernel{.entry = r.entry,
                     .name = r.name,
                     .symbol = r.symbol,
                     .params = r.params,
                     .uses_sync = r.uses_sync,
                     .ordered = r.atomics > 0,
                     .warpgroups = r.wgmmas > 0,
                     .host_shared_bytes = static_cast<uint32_t>(r.host_shared_bytes),
                     .static_smem = r.static_smem,
                     .registers = r.registers};
    kernel.function = lib->Symbol(kernel.symbol);
    if (kernel.function == nullptr) {
      return Error("{}: manifest emu kernels[{}] ({}): the library has no symbol {}", path, i,
                   kernel.name, kernel.symbol);
    }
    lib->kernels_.push_back(std::move(kernel));
  }
  for (const program::KernelRecord& image : images) {
    const EmuKernel* k = lib->Find(image.entry, image.name);
    if (k == nullptr) {
      return Error("{}: kernel {} of entry {} has no host code in its emulator library", path,
                   image.name, image.entry);
    }
    const size_t at = static_cast<size_t>(k - lib->kernels_.data());
    const std::string_view ptx =
        std::string_view(*artifact.Find("ptx")).substr(image.ptx_offset, image.ptx_size);
    lib->ptx_[program::Fnv1a64(ptx)] = at;
    if (image.cubin) {
      lib->cubins_.emplace_back(
          artifact.Find("cubin")->substr(image.cubin->first, image.cubin->second), at);
    }
  }
  return lib;
}

KernelLibrary::~KernelLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
  if (fd_ >= 0) close(fd_);
}

const EmuKernel* KernelLibrary::FindImage(const void* image) const {
  const char* bytes = static_cast<const char*>(image);
  if (std::memcmp(bytes,
                  "\x7f"
                  "ELF",
                  4) == 0) {
    // An ELF64 object ends with its section or program header table (ptxas
    // writes the program headers last): its size is the later end of the two.
    uint64_t shoff = 0, phoff = 0;
    uint16_t shentsize = 0, shnum = 0, phentsize = 0, phnum = 0;
    std::memcpy(&phoff, bytes + 0x20, 8);
    std::memcpy(&shoff, bytes + 0x28, 8);
    std::memcpy(&phentsize, bytes + 0x36, 2);
    std::memcpy(&phnum, bytes + 0x38, 2);
    std::memcpy(&shentsize, bytes + 0x3a, 2);
    std::memcpy(&shnum, bytes + 0x3c, 2);
    const uint64_t size =
        std::max(shoff + uint64_t{shentsize} * shnum, phoff + uint64_t{phentsize} * phnum);
    for (const auto& [cubin, at] : cubins_) {
      if (cubin.size() == size && std::memcmp(bytes, cubin.data(), size) == 0) {
        return &kernels_[at];
      }
    }
    return nullptr;
  }
  auto it = ptx_.find(program::Fnv1a64(std::string_view(bytes)));
  return it == ptx_.end() ? nullptr : &kernels_[it->second];
}

const EmuKernel* KernelLibrary::Find(std::string_view entry, std::string_view name) const {
  for (const EmuKernel& k : kernels_) {
    if (k.entry == entry && k.name == name) return &k;
  }
  return nullptr;
}

void KernelLibrary::SetChecks(bool on) { *checks_flag_ = on ? 1 : 0; }

}  // namespace gptc::rt::emu
