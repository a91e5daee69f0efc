// Note [whole step directories] (tools/gptrun/checkpoint_dir.h) as a job
// scheduler tests it: one --resume auto job, a checkpoint every step and
// --ckpt-keep 2, killed with SIGKILL at 50 random moments (starting up,
// training, writing, swapping or rotating checkpoints) and started again
// each time. After every kill each step_NNNNNN directory in --ckpt-dir is a
// whole checkpoint, one that reads and checks; no restart fails; the run
// moves on; and a last start runs to the end. About 30 s.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/checkpoint_metadata.h"
#include "runtime/data_loader.h"
#include "runtime/safetensors.h"
#include "tests/testing/command.h"

extern char** environ;

namespace gptc {
namespace {

namespace fs = std::filesystem;
using testing::ReadAll;

constexpr int kKills = 50;

// Starts `argv` with stdout and stderr to `log`; returns its pid.
pid_t Spawn(const std::vector<std::string>& argv, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// Why `dir` is not a whole checkpoint, or "".
std::string NotWhole(const fs::path& dir) {
  if (!fs::exists(dir / "config.json")) return "no config.json";
  for (const char* file : {"model.safetensors", "optim.safetensors"}) {
    StatusOr<rt::SafeTensors> f = rt::ReadSafeTensors((dir / file).string());
    if (!f.ok()) return f.status().message();
    if (Status s = rt::VerifyCheckpointChecksum(*f, (dir / file).string()); !s.ok()) {
      return s.message();
    }
    if (!f->metadata.contains(rt::kChecksumKey)) return std::string(file) + " has no checksum";
  }
  return "";
}

TEST(ResumeKillTest, ResumeAutoSurvivesFiftyKillsWithCkptKeepTwo) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("resume_kill_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 4000; ++i) tokens.push_back((i * 7 + i / 13) % 300);
  std::ofstream(dir / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
  testing::CommandResult c = testing::RunCommand(
      std::string(GPTC_BIN) +
          " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --batch 2 --seq 16 "
          "--no-codegen -o " +
          (dir / "tiny.gptx").string(),
      dir);
  ASSERT_EQ(c.code, 0) << c.out << c.err;

  const fs::path ckpt = dir / "ckpt";
  auto job = [&](int64_t steps) {
    return std::vector<std::string>{GPTRUN_BIN,     (dir / "tiny.gptx").string(),
                                    "--device",     "cpu",
                                    "--train",      (dir / "train_000.bin").string(),
                                    "--steps",      std::to_string(steps),
                                    "--lr",         "1e-3",
                                    "--ckpt-every", "1",
                                    "--ckpt-keep",  "2",
                                    "--ckpt-dir",   ckpt.string(),
                                    "--resume",     "auto"};
  };
  uint64_t rng = 0x6b696c6c;  // "kill": the moments are the same on every run
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return rng >> 33;
  };
  const auto start = std::chrono::steady_clock::now();
  int64_t latest = 0, finished = 0;
  std::error_code ec;  // no --ckpt-dir yet: nothing to check
  for (int kill = 0; kill < kKills; ++kill) {
    const fs::path log = dir / "run.log";
    const pid_t pid = Spawn(job(1'000'000), log);
    ASSERT_GT(pid, 0);
    // One kill in four while the run starts (resuming, removing leftovers);
    // the others once it trains, within a step and its checkpoint's save,
    // swap and rotation (~0.2 s), so that the run moves on between kills.
    if (kill % 4 != 3) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (ReadAll(log).find("\nstep ") == std::string::npos &&
             std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    std::this_thread::sleep_for(
        std::chrono::microseconds(next() % (kill % 4 != 3 ? 350'000 : 600'000)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    // Killed, never failed by itself.
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "kill " << kill << ": exit " << WEXITSTATUS(status) << "\n"
        << ReadAll(log);
    int64_t steps = 0;
    for (const fs::directory_entry& d : fs::directory_iterator(ckpt, ec)) {
      const std::string name = d.path().filename().string();
      if (name.size() != 11 || !name.starts_with("step_")) continue;
      ++steps;
      latest = std::max<int64_t>(latest, std::stoll(name.substr(5)));
      EXPECT_EQ(NotWhole(d.path()), "") << "after kill " << kill << ": " << d.path();
    }
    // The newest two, and once a validation-less run rotates, no more.
    EXPECT_LE(steps, 3) << "after kill " << kill;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(latest, 5) << "the run hardly moved in " << kKills << " starts";
  // The last start runs to its end: a few steps past the newest checkpoint.
  finished = latest + 3;
  testing::CommandResult last = testing::RunCommand(
      [&] {
        std::string cmd;
        for (const std::string& a : job(finished)) cmd += "'" + a + "' ";
        return cmd;
      }(),
      dir);
  EXPECT_EQ(last.code, 0) << last.out << last.err;
  EXPECT_NE(last.out.find("resumed from"), std::string::npos) << last.out;
  EXPECT_EQ(NotWhole(ckpt / fmt::format("step_{:06d}", finished)), "");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("resume-kill: %d kills, newest checkpoint step %lld, %.1f s\n", kKills,
              static_cast<long long>(latest), seconds);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gptc
