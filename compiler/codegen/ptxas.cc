#include "compiler/codegen/ptxas.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

namespace gptc::codegen {
namespace {

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// A temporary file removed when this goes out of scope.
class TempFile {
 public:
  explicit TempFile(const char* suffix) {
    std::string pattern = "/tmp/gptc_ptxas_XXXXXX";
    pattern += suffix;
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    int fd = mkstemps(buf.data(), static_cast<int>(std::string_view(suffix).size()));
    if (fd >= 0) {
      close(fd);
      path_ = buf.data();
    }
  }
  ~TempFile() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The first line of ptxas' output that reports a problem, without the
// temporary file name ("ptxas /tmp/x.ptx, line 5; error   : ..." -> "line 5; error : ...").
std::string FirstErrorLine(const std::string& log, const std::string& ptx_path) {
  std::istringstream in(log);
  std::string line, first;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (first.empty()) first = line;
    if (line.find("error") != std::string::npos || line.find("fatal") != std::string::npos) {
      first = line;
      break;
    }
  }
  if (size_t at = first.find(ptx_path); at != std::string::npos) {
    first.erase(at, ptx_path.size() + (first.compare(at + ptx_path.size(), 2, ", ") == 0 ? 2 : 0));
  }
  first = std::regex_replace(first, std::regex("^ptxas\\s*"), "");
  first = std::regex_replace(first, std::regex("\\s+"), " ");
  return first;
}

}  // namespace

std::optional<std::string> FindPtxas(std::string_view explicit_path) {
  if (!explicit_path.empty()) {
    std::string path(explicit_path);
    if (IsExecutable(path)) return path;
    return std::nullopt;
  }
  if (IsExecutable("/usr/local/cuda/bin/ptxas")) return "/usr/local/cuda/bin/ptxas";
  if (const char* path_env = std::getenv("PATH")) {
    std::istringstream dirs(path_env);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      if (!dir.empty() && IsExecutable(dir + "/ptxas")) return dir + "/ptxas";
    }
  }
  return std::nullopt;
}

PtxasInfo ParsePtxasLog(std::string_view log, std::string_view kernel_name) {
  PtxasInfo info;
  std::istringstream in{std::string(log)};
  std::string line;
  // Lines after "Compiling entry function 'NAME'" / "Function properties for NAME"
  // belong to that function until the next such header.
  bool ours = false;
  const std::regex header(
      R"((Compiling entry function|Function properties for) '?([A-Za-z0-9_$.]+)'?)");
  const std::regex regs(R"(Used (\d+) registers)");
  const std::regex smem(R"((\d+) bytes smem)");
  const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (line.find("warning") != std::string::npos) info.warnings.push_back(line);
    if (std::regex_search(line, m, header)) {
      ours = m[2].str() == kernel_name;
      continue;
    }
    if (!ours) continue;
    if (std::regex_search(line, m, regs)) info.registers = std::stoll(m[1].str());
    if (std::regex_search(line, m, smem)) info.shared_bytes = std::stoll(m[1].str());
    if (std::regex_search(line, m, frame)) {
      info.stack_bytes = std::stoll(m[1].str());
      info.spill_stores = std::stoll(m[2].str());
      info.spill_loads = std::stoll(m[3].str());
    }
  }
  return info;
}

StatusOr<PtxasInfo> RunPtxas(const std::string& ptxas, std::string_view ptx,
                             std::string_view kernel_name, std::string_view arch) {
  TempFile ptx_file(".ptx");
  TempFile cubin_file(".cubin");
  if (ptx_file.path().empty() || cubin_file.path().empty()) {
    return Error("kernel {}: ptxas: cannot create a temporary file", kernel_name);
  }
  {
    std::ofstream out(ptx_file.path(), std::ios::binary);
    out << ptx;
    if (!out) return Error("kernel {}: ptxas: cannot write {}", kernel_name, ptx_file.path());
  }
  std::string command = fmt::format("'{}' -arch={} -v -o '{}' '{}' 2>&1", ptxas, arch,
                                    cubin_file.path(), ptx_file.path());
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return Error("kernel {}: ptxas: cannot run {}", kernel_name, ptxas);
  std::string log;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) log.append(buf, n);
  int status = pclose(pipe);
  if (status != 0) {
    return Error("kernel {}: ptxas: {}", kernel_name, FirstErrorLine(log, ptx_file.path()));
  }
  PtxasInfo info = ParsePtxasLog(log, kernel_name);
  std::ifstream cubin(cubin_file.path(), std::ios::binary);
  info.cubin.assign(std::istreambuf_iterator<char>(cubin), std::istreambuf_iterator<char>());
  return info;
}

}  // namespace gptc::codegen
