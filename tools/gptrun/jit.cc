#include "tools/gptrun/jit.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "tools/common/flags.h"

namespace gptc::tools {
namespace {

// `gptc` in the directory of this executable.
StatusOr<std::string> GptcBesideUs() {
  std::error_code error;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return Error("--model: cannot find this executable: {}", error.message());
  std::filesystem::path gptc = self.parent_path() / "gptc";
  if (access(gptc.c_str(), X_OK) != 0) {
    return Error("--model needs gptc beside gptrun to compile the model; no {}", gptc.string());
  }
  return gptc.string();
}

// Runs `argv` with its stdout and stderr captured together; returns its exit
// status and output.
StatusOr<std::pair<int, std::string>> RunCapturingOutput(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return Error("cannot run {}: no pipe", argv[0]);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return Error("cannot run {}: fork failed", argv[0]);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status)) return Error("{} was killed by signal {}", argv[0], WTERMSIG(status));
  return std::pair{WEXITSTATUS(status), out};
}

}  // namespace

std::vector<std::string> JitCompileArgs(const JitOptions& o) {
  std::vector<std::string> args = {
      "compile", "--model", o.model, "--batch", o.batch_auto ? "auto" : std::to_string(o.batch),
      "--cached"};
  if (o.tokens_per_step > 0) {
    args.insert(args.end(), {"--tokens-per-step", std::to_string(o.tokens_per_step)});
  } else {
    args.insert(args.end(), {"--grad-accum", std::to_string(o.grad_accum)});
  }
  if (o.remat != "none") args.insert(args.end(), {"--remat", o.remat});
  if (o.attention_mma != "mma.sync") {
    args.insert(args.end(), {"--attention-mma", o.attention_mma});
  }
  if (!o.memory_budget.empty()) args.insert(args.end(), {"--memory-budget", o.memory_budget});
  if (o.seq > 0) {
    args.push_back("--seq");
    args.push_back(std::to_string(o.seq));
  }
  if (o.device == "cpu") args.push_back("--no-codegen");
  if (o.device == "emu") args.push_back("--emu");
  if (!o.artifact_out.empty()) {
    args.push_back("-o");
    args.push_back(o.artifact_out);
  }
  return args;
}

StatusOr<std::string> CompileThroughCache(const JitOptions& o, bool& temporary) {
  temporary = false;
  ASSIGN_OR_RETURN(std::string gptc, GptcBesideUs());
  std::vector<std::string> argv = {gptc};
  for (std::string& a : JitCompileArgs(o)) argv.push_back(std::move(a));
  auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(auto run, RunCapturingOutput(argv));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto [code, out] = run;
  std::vector<std::string> lines;
  for (size_t at = 0; at < out.size();) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    lines.push_back(out.substr(at, end - at));
    at = end + 1;
  }
  if (code != 0) {
    // gptc's own one-line error, folded into ours.
    std::string why = fmt::format("exit {}", code);
    for (const std::string& line : lines) {
      if (line.starts_with("gptc: ")) why = line;
    }
    const Status failed = Error("--model {}: {}", o.model, why);
    return code == kExitUsage ? failed.WithCode(StatusCode::kUsage) : failed;
  }
  for (const std::string& line : lines) {
    if (line.starts_with("gptc: warning")) std::fprintf(stderr, "%s\n", line.c_str());
  }
  // The last line: "cache: reused|stored|none PATH" (none: gptc warned why).
  const std::string last = lines.empty() ? "" : lines.back();
  std::string how, path;
  for (const char* verb : {"reused", "stored", "none"}) {
    const std::string prefix = fmt::format("cache: {} ", verb);
    if (last.starts_with(prefix)) {
      how = verb;
      path = last.substr(prefix.size());
    }
  }
  if (path.empty()) return Error("--model {}: gptc did not name its artifact", o.model);
  temporary = how == "none" && o.artifact_out.empty();
  const std::string kernels = o.device == "cpu"   ? " (no kernels: CPU device)"
                              : o.device == "emu" ? " (with host kernels for --device emu)"
                                                  : "";
  // gptc's summary says what --batch auto and --remat auto chose.
  std::string chosen;
  for (const std::string& line : lines) {
    for (const char* what : {"; batch auto: ", "; remat auto: "}) {
      if (size_t at = line.find(what); at != std::string::npos) {
        std::string part = line.substr(at + 2, line.find_first_of(";(", at + 2) - (at + 2));
        while (!part.empty() && part.back() == ' ') part.pop_back();
        chosen += ", " + part;
      }
    }
  }
  if (!o.batch_auto) chosen = fmt::format(", batch {}", o.batch) + chosen;
  std::printf("gptrun: %s %s%s%s in %.1f s -> %s%s\n",
              how == "reused" ? "reused the cached compile of" : "compiled", o.model.c_str(),
              chosen.c_str(), kernels.c_str(), seconds, path.c_str(),
              o.artifact_out.empty() ? "" : fmt::format(" (copy: {})", o.artifact_out).c_str());
  std::fflush(stdout);
  return path;
}

}  // namespace gptc::tools
