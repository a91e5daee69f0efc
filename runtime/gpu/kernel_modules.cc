#include "runtime/gpu/kernel_modules.h"

#include <array>

namespace gptc::rt::gpu {

namespace {

constexpr int64_t kDefaultBlockSmem = 48 * 1024;

// cuModuleLoadDataEx with an error log, whose text is added to the message.
Status LoadModule(const DriverApi& cu, const void* image, CUmodule* module, std::string_view what) {
  std::array<char, 8192> log{};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(log.size()))};
  CUresult r = cu.ModuleLoadDataEx(module, image, 2, options, values);
  if (r == CUDA_SUCCESS) return Status::Ok();
  std::string text(log.data());
  for (char& c : text) {
    if (c == '\n') c = ' ';  // one line
  }
  return Error("{}: cuModuleLoadDataEx: {}{}", what, cu.ErrorText(r),
               text.empty() ? "" : " | log: " + text);
}

}  // namespace

int64_t CountPtxParams(std::string_view ptx, std::string_view name) {
  const std::string header = fmt::format(".entry {}(", name);
  size_t at = ptx.find(header);
  if (at == std::string_view::npos) return -1;
  const size_t end = ptx.find(')', at);
  if (end == std::string_view::npos) return -1;
  std::string_view params = ptx.substr(at + header.size(), end - at - header.size());
  int64_t n = 0;
  for (size_t p = params.find(".param"); p != std::string_view::npos;
       p = params.find(".param", p + 1)) {
    ++n;
  }
  return n;
}

StatusOr<std::unique_ptr<KernelModules>> KernelModules::Load(const DriverApi& cu,
                                                             const program::Artifact& artifact,
                                                             std::string_view artifact_path,
                                                             const DeviceInfo& device) {
  const std::string* ptx = artifact.Find("ptx");
  const std::string* cubin = artifact.Find("cubin");
  if (ptx == nullptr) return Error("{}: missing section 'ptx'", artifact_path);
  const std::vector<KernelRecord>& images = artifact.manifest.kernels;
  if (Status s = CheckKernelIndex(images, static_cast<int64_t>(ptx->size()),
                                  cubin != nullptr ? static_cast<int64_t>(cubin->size()) : 0);
      !s.ok()) {
    return s.WithPrefix(artifact_path);
  }
  const std::string& target = artifact.manifest.target;
  const bool use_cubin = CubinLoads(target, device.capability);
  std::unique_ptr<KernelModules> m(new KernelModules(cu, device));
  for (const KernelRecord& image : images) {
    CUmodule module = nullptr;
    const std::string what =
        fmt::format("{}: kernel {} (entry {})", artifact_path, image.name, image.entry);
    if (use_cubin && image.cubin) {
      const std::string code = cubin->substr(image.cubin->first, image.cubin->second);
      RETURN_IF_ERROR(LoadModule(cu, code.data(), &module, what + ", cubin for " + target));
      ++m->cubins_;
    } else {
      // PTX text must end in a NUL, which the substring's std::string adds.
      const std::string code = ptx->substr(image.ptx_offset, image.ptx_size);
      RETURN_IF_ERROR(LoadModule(cu, code.c_str(), &module,
                                 fmt::format("{}, PTX JIT for sm_{}{}", what,
                                             device.capability.major, device.capability.minor)));
      ++m->jitted_;
    }
    m->modules_.push_back(module);
    CUfunction f = nullptr;
    CUresult r = cu.ModuleGetFunction(&f, module, image.name.c_str());
    if (r != CUDA_SUCCESS) {
      return Error("{}: cuModuleGetFunction: {}", what, cu.ErrorText(r));
    }
    m->functions_[{image.entry, image.name}] = f;
    m->param_counts_[{image.entry, image.name}] =
        CountPtxParams(std::string_view(*ptx).substr(image.ptx_offset, image.ptx_size), image.name);
  }
  return m;
}

KernelModules::~KernelModules() {
  for (CUmodule module : modules_) cu_.ModuleUnload(module);
}

StatusOr<CUfunction> KernelModules::Find(std::string_view entry, std::string_view name) const {
  auto it = functions_.find(std::pair{std::string(entry), std::string(name)});
  if (it == functions_.end()) {
    return Error("kernel {} of entry {} is not in the artifact's kernel index", name, entry);
  }
  return it->second;
}

int64_t KernelModules::ParamCount(std::string_view entry, std::string_view name) const {
  auto it = param_counts_.find(std::pair{std::string(entry), std::string(name)});
  return it == param_counts_.end() ? -1 : it->second;
}

Status KernelModules::PrepareLaunch(CUfunction function, int64_t threads, int64_t dynamic_smem,
                                    std::string_view what) {
  int max_threads = 0, static_smem = 0, registers = 0;
  for (auto [attr, out] : {std::pair{CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &max_threads},
                           std::pair{CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &static_smem},
                           std::pair{CU_FUNC_ATTRIBUTE_NUM_REGS, &registers}}) {
    CUresult r = cu_.FuncGetAttribute(out, attr, function);
    if (r != CUDA_SUCCESS) return Error("{}: cuFuncGetAttribute: {}", what, cu_.ErrorText(r));
  }
  if (threads > max_threads) {
    return Error("{}: block of {} threads, the kernel allows at most {} ({} registers a thread)",
                 what, threads, max_threads, registers);
  }
  if (static_smem + dynamic_smem > device_.max_shared_per_block) {
    return Error("{}: {} bytes of static + {} of dynamic shared memory exceed the device's {}",
                 what, static_smem, dynamic_smem, device_.max_shared_per_block);
  }
  // Without the opt-in a block gets 48 KiB of static and dynamic shared
  // memory together; beyond that the dynamic part must be raised explicitly.
  if (static_smem + dynamic_smem > kDefaultBlockSmem &&
      dynamic_smem > dynamic_smem_limit_[function]) {
    CUresult r = cu_.FuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      static_cast<int>(dynamic_smem));
    if (r != CUDA_SUCCESS) {
      return Error("{}: cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {}): {}", what,
                   dynamic_smem, cu_.ErrorText(r));
    }
    dynamic_smem_limit_[function] = dynamic_smem;
  }
  return Status::Ok();
}

}  // namespace gptc::rt::gpu
