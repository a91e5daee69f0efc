// Ranks as real processes on loopback (what `mpirun -np 3 gptrun ...` does):
// tests/runtime/dp_peer_main.cc started three times with torchrun-style
// variables. They agree on the all-reduce; when one is killed the others end
// with a message naming it, within seconds; a bad variable is one line. No
// run may hang: a process still alive after 30 s fails the test.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/tcp_socket.h"

namespace gptc::rt {
namespace {

struct Outcome {
  int exit_code = -1;  // -1: killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr
};

// Starts one dp_peer per entry of `ranks` (MODE, RANK) in a world of that size.
std::vector<Outcome> RunPeers(const std::vector<std::pair<std::string, std::string>>& ranks,
                              const std::string& world) {
  StatusOr<int> port = PickFreePort();
  EXPECT_TRUE(port.ok());
  char dir_template[] = "/tmp/dp_peerXXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::vector<pid_t> pids;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::string out = dir + "/" + std::to_string(i) + ".txt";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<std::string> env = {"RANK=" + ranks[i].second,
                                    "WORLD_SIZE=" + world,
                                    "LOCAL_RANK=" + ranks[i].second,
                                    "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + std::to_string(*port),
                                    "GPTC_DIST_TIMEOUT=10"};
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string bin = DP_PEER_BIN, mode = ranks[i].first;
    char* argv[] = {bin.data(), mode.data(), nullptr};
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, bin.c_str(), &actions, nullptr, argv, envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    pids.push_back(pid);
  }
  std::vector<Outcome> outcomes(ranks.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    while (waitpid(pids[i], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "rank " << i << " still running after 30 s: a hang";
        kill(pids[i], SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (WIFEXITED(status)) outcomes[i].exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) outcomes[i].signal = WTERMSIG(status);
    std::ifstream in(dir + "/" + std::to_string(i) + ".txt");
    std::stringstream text;
    text << in.rdbuf();
    outcomes[i].output = text.str();
    std::remove((dir + "/" + std::to_string(i) + ".txt").c_str());
  }
  rmdir(dir.c_str());
  return outcomes;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(DataParallelProcessTest, ThreeProcessesAgree) {
  std::vector<Outcome> out = RunPeers({{"sum", "0"}, {"sum", "1"}, {"sum", "2"}}, "3");
  ASSERT_EQ(out.size(), 3u);
  std::string checksum;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[r].exit_code, 0) << out[r].output;
    const std::string prefix = "rank " + std::to_string(r) + " checksum ";
    ASSERT_TRUE(out[r].output.starts_with(prefix)) << out[r].output;
    if (r == 0) checksum = out[r].output.substr(prefix.size());
    EXPECT_EQ(out[r].output.substr(prefix.size()), checksum);
  }
}

TEST(DataParallelProcessTest, AKilledRankEndsTheOthers) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Outcome> out = RunPeers({{"sum", "0"}, {"sum", "1"}, {"die", "2"}}, "3");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 8.0);
  EXPECT_EQ(out[2].signal, SIGKILL);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r].exit_code, 1) << out[r].output;
    EXPECT_TRUE(Contains(out[r].output, "dp_peer: all-reduce: rank ")) << out[r].output;
    EXPECT_TRUE(Contains(out[r].output, "rank 0 awaiting rank 2 (127.0.0.1:")) << out[r].output;
    EXPECT_TRUE(Contains(out[r].output, "connection closed")) << out[r].output;
    EXPECT_EQ(std::count(out[r].output.begin(), out[r].output.end(), '\n'), 1) << out[r].output;
  }
}

TEST(DataParallelProcessTest, ABadVariableIsOneLine) {
  std::vector<Outcome> out = RunPeers({{"sum", "3"}}, "3");
  EXPECT_EQ(out[0].exit_code, 1);
  EXPECT_EQ(out[0].output, "dp_peer: RANK=3 is not below WORLD_SIZE=3\n");
}

}  // namespace
}  // namespace gptc::rt
