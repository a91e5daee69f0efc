// The emulator library (codegen.h: LinkHostLibrary): the host objects of
// every kernel and the support object, linked by the system's C compiler
// driver. No LLVM here beyond host_lowering.h's support object.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/host_lowering.h"

extern char** environ;

namespace gptc::codegen {
namespace {

// Runs `argv` and waits; the error names the command and its first lines of output.
Status RunTool(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return Error("{}: cannot run ({})", argv[0], std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  std::ifstream in(log);
  std::string line, first;
  while (std::getline(in, line) && first.size() < 300) first += (first.empty() ? "" : " | ") + line;
  return Error("{} failed{}{}", argv[0], first.empty() ? "" : ": ", first);
}

// The C compiler driver that links the library: $CC, else the first of cc,
// gcc, clang found on PATH.
std::optional<std::string> FindLinker() {
  if (const char* cc = std::getenv("CC"); cc != nullptr && *cc != '\0') return std::string(cc);
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::vector<std::string> dir_list;
  for (std::string d; std::getline(dirs, d, ':');) dir_list.push_back(d.empty() ? "." : d);
  for (const char* name : {"cc", "gcc", "clang"}) {
    for (const std::string& d : dir_list) {
      const std::string candidate = d + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return std::nullopt;
}

}  // namespace

StatusOr<std::string> LinkHostLibrary(std::vector<std::string> objects) {
  ASSIGN_OR_RETURN(std::string support, HostSupportObject());
  objects.push_back(std::move(support));
  std::optional<std::string> linker = FindLinker();
  if (!linker) {
    return Error(
        "--emu: no C compiler driver to link the emulator library (cc, gcc or clang on PATH; "
        "or set CC)");
  }
  char dir_template[] = "/tmp/gptc-emu-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    return Error("--emu: cannot create a temporary directory: {}", std::strerror(errno));
  }
  const std::filesystem::path dir(dir_template);
  auto cleanup = [&] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  };
  std::vector<std::string> argv = {*linker, "-shared", "-o", (dir / "emu.so").string()};
  for (size_t i = 0; i < objects.size(); ++i) {
    const std::filesystem::path file = dir / fmt::format("k{}.o", i);
    std::ofstream out(file, std::ios::binary);
    out.write(objects[i].data(), static_cast<std::streamsize>(objects[i].size()));
    if (!out) {
      cleanup();
      return Error("--emu: cannot write {}", file.string());
    }
    argv.push_back(file.string());
  }
  argv.push_back("-lm");
  Status linked = RunTool(argv, (dir / "link.log").string());
  if (!linked.ok()) {
    cleanup();
    return linked.WithPrefix("--emu: linking the emulator library");
  }
  std::ifstream in(dir / "emu.so", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  cleanup();
  if (bytes.empty()) return Error("--emu: the linker wrote an empty library");
  return bytes;
}

}  // namespace gptc::codegen
