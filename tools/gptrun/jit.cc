#include "tools/gptrun/jit.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "compiler/support/text.h"
#include "tools/common/compile_record.h"
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

struct RunOutput {
  int code = 0;
  std::string out, err;
};

// Runs `argv`; returns its exit status, its stdout and its stderr, read
// together so that neither pipe fills while the other is read.
StatusOr<RunOutput> RunCapturingOutput(const std::vector<std::string>& argv) {
  int out_fds[2], err_fds[2];
  if (pipe(out_fds) != 0) return Error("cannot run {}: no pipe", argv[0]);
  if (pipe(err_fds) != 0) {
    close(out_fds[0]);
    close(out_fds[1]);
    return Error("cannot run {}: no pipe", argv[0]);
  }
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out_fds[0], out_fds[1], err_fds[0], err_fds[1]}) close(fd);
    return Error("cannot run {}: fork failed", argv[0]);
  }
  if (pid == 0) {
    dup2(out_fds[1], STDOUT_FILENO);
    dup2(err_fds[1], STDERR_FILENO);
    for (int fd : {out_fds[0], out_fds[1], err_fds[0], err_fds[1]}) close(fd);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out_fds[1]);
  close(err_fds[1]);
  RunOutput run;
  pollfd fds[2] = {{out_fds[0], POLLIN, 0}, {err_fds[0], POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  char buf[4096];
  for (int open_pipes = 2; open_pipes > 0;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
        continue;
      }
      sinks[i]->append(buf, static_cast<size_t>(n));
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status)) return Error("{} was killed by signal {}", argv[0], WTERMSIG(status));
  run.code = WEXITSTATUS(status);
  return run;
}

// What --batch auto and --remat auto chose, from the record's flags:
// ", batch auto: 8 x grad-accum 8 x seq 64 = 4,096 tokens a step, remat
// auto: none:0-1"; the batch alone when it was given.
std::string ChosenShape(const JitOptions& o, const CompileRecord& record) {
  const program::CompileFlags& f = record.flags;
  std::string chosen;
  if (!o.batch_auto) {
    chosen = fmt::format(", batch {}", o.batch);
  } else {
    chosen = fmt::format(", batch auto: {}", f.batch);
    if (o.tokens_per_step > 0) {
      chosen += fmt::format(" x grad-accum {} x seq {}{} = {} tokens a step", f.grad_accum, f.seq,
                            f.world_size > 1 ? fmt::format(" x dp {}", f.world_size) : "",
                            WithThousands(o.tokens_per_step));
    }
  }
  if (o.remat == "auto") chosen += ", remat " + f.remat;  // "auto: PLAN"
  return chosen;
}

}  // namespace

std::string_view JitDeviceName(JitDevice device) {
  switch (device) {
    case JitDevice::kGpu:
      return "gpu";
    case JitDevice::kEmu:
      return "emu";
    case JitDevice::kCpu:
      return "cpu";
  }
  return "gpu";
}

std::optional<JitDevice> ParseJitDevice(std::string_view name) {
  for (JitDevice device : {JitDevice::kGpu, JitDevice::kEmu, JitDevice::kCpu}) {
    if (JitDeviceName(device) == name) return device;
  }
  return std::nullopt;
}

std::vector<std::string> JitCompileArgs(const JitOptions& o) {
  std::vector<std::string> args = {
      "compile",  "--model", o.model, "--batch", o.batch_auto ? "auto" : std::to_string(o.batch),
      "--cached", "--json"};
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
  if (o.device == JitDevice::kCpu) args.push_back("--no-codegen");
  if (o.device == JitDevice::kEmu) args.push_back("--emu");
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
  ASSIGN_OR_RETURN(RunOutput run, RunCapturingOutput(argv));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (run.code != 0) {
    // gptc's own one-line error (its last line on stderr), folded into ours.
    std::string why = fmt::format("exit {}", run.code);
    for (size_t at = 0; at < run.err.size();) {
      size_t end = run.err.find('\n', at);
      if (end == std::string::npos) end = run.err.size();
      if (run.err.compare(at, 6, "gptc: ") == 0) why = run.err.substr(at, end - at);
      at = end + 1;
    }
    const Status failed = Error("--model {}: {}", o.model, why);
    return run.code == kExitUsage ? failed.WithCode(StatusCode::kUsage) : failed;
  }
  StatusOr<CompileRecord> record = ParseCompileRecord(run.out);
  if (!record.ok()) return record.status().WithPrefix(fmt::format("--model {}", o.model));
  for (const std::string& warning : record->warnings) {
    std::fprintf(stderr, "gptc: warning: %s\n", warning.c_str());
  }
  temporary = record->temporary;
  const std::string kernels = o.device == JitDevice::kCpu ? " (no kernels: CPU device)"
                              : o.device == JitDevice::kEmu
                                  ? " (with host kernels for --device emu)"
                                  : "";
  std::printf("gptrun: %s %s%s%s in %.1f s -> %s%s\n",
              record->cache == CacheUse::kReused ? "reused the cached compile of" : "compiled",
              o.model.c_str(), ChosenShape(o, *record).c_str(), kernels.c_str(), seconds,
              record->artifact.c_str(),
              o.artifact_out.empty() ? "" : fmt::format(" (copy: {})", o.artifact_out).c_str());
  std::fflush(stdout);
  return record->artifact;
}

}  // namespace gptc::tools
