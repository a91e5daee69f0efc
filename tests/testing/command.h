// Running the tools from tests: a file's whole text, and a shell command's
// exit code, standard output and standard error.
#ifndef GPTC_TESTS_TESTING_COMMAND_H_
#define GPTC_TESTS_TESTING_COMMAND_H_

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gptc::testing {

// The file's text ("" when it cannot be read).
inline std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct CommandResult {
  int code = -1;  // the exit status; -1 when killed by a signal
  std::string out, err;
  double seconds = 0;  // wall time
};

// Runs `command` through the shell, its output captured in stdout.txt and
// stderr.txt under `dir` (overwritten by the next command).
inline CommandResult RunCommand(const std::string& command, const std::filesystem::path& dir) {
  const std::filesystem::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const auto start = std::chrono::steady_clock::now();
  const int status = std::system((command + " > " + out.string() + " 2> " + err.string()).c_str());
  CommandResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(out);
  r.err = ReadAll(err);
  return r;
}

}  // namespace gptc::testing

#endif  // GPTC_TESTS_TESTING_COMMAND_H_
