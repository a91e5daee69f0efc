// gptrun with data parallelism on the CPU device: two gptrun processes
// launched with torchrun-style variables (what `torchrun` or `mpirun -np 2`
// would do) train a `--dp 2` artifact with half of every batch each, and
// rank 0 logs the same losses as one process with the whole batch. And the
// failures of the GPU (NCCL) launch that a machine without a GPU can reach.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "runtime/data_loader.h"
#include "tests/testing/command.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;
using testing::ReadAll;

// The loss of every "step N/M | loss X" line.
std::vector<double> Losses(const std::string& log) {
  std::vector<double> losses;
  std::regex line(R"(step \d+/\d+ \| loss (\d+\.\d+))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it) {
    losses.push_back(std::stod((*it)[1]));
  }
  return losses;
}

// Runs `script` with bash (for `&`, `$!` and `wait`); returns std::system's status.
int RunBash(const std::string& script) {
  const std::string quoted = std::regex_replace(script, std::regex("'"), "'\\''");
  return std::system(("bash -c '" + quoted + "'").c_str());
}

class GptrunDataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("gptrun_dp_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 4000; ++i) tokens.push_back((i * 7 + (i / 13)) % 300);
    std::ofstream(dir_ / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
    // One tiny model, compiled for one rank with batch 4 and for two with 2 each.
    for (const auto& [name, flags] : {std::tuple{"dp1.gptx", "--batch 4"},
                                      std::tuple{"dp2.gptx", "--batch 2 --dp 2"}}) {
      const std::string cmd = std::string(GPTC_BIN) +
                              " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 "
                              "--seq 16 --no-codegen " +
                              flags + " -o " + (dir_ / name).string() + " > /dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    std::random_device rd;
    port_ = 20000 + static_cast<int>(rd() % 20000);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // gptrun on `artifact` with `env` prepended; output in dir_/`log`.
  std::string Command(const std::string& env, const std::string& artifact, const std::string& log,
                      const std::string& device = "--device cpu") const {
    return env + " " + GPTRUN_BIN + " " + (dir_ / artifact).string() + " " + device + " --train '" +
           (dir_ / "train_*.bin").string() + "' --steps 3 --lr 1e-3 --seed 5 > " +
           (dir_ / log).string() + " 2>&1";
  }
  std::string RankEnv(int rank, int world = 2) const {
    return "GPTC_DIST_TIMEOUT=20 RANK=" + std::to_string(rank) +
           " WORLD_SIZE=" + std::to_string(world) + " LOCAL_RANK=" + std::to_string(rank) +
           " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port_);
  }

  fs::path dir_;
  int port_ = 0;
};

TEST_F(GptrunDataParallelTest, TwoRanksFollowOneRankWithTheWholeBatch) {
  ASSERT_EQ(std::system(Command("", "dp1.gptx", "dp1.txt").c_str()), 0)
      << ReadAll(dir_ / "dp1.txt");
  // Rank 1 in the background, rank 0 in the foreground; then wait for rank 1.
  const std::string both = "(" + Command(RankEnv(1), "dp2.gptx", "r1.txt") + ") & pid=$!; " +
                           Command(RankEnv(0), "dp2.gptx", "r0.txt") + "; a=$?; wait $pid; b=$?; " +
                           "exit $((a + b))";
  int status = RunBash(both);
  const std::string r0 = ReadAll(dir_ / "r0.txt"), r1 = ReadAll(dir_ / "r1.txt");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << r0 << "\n---\n" << r1;
  EXPECT_NE(r0.find("data parallel: 2 ranks, each 2 rows of every batch"), std::string::npos)
      << r0;
  EXPECT_EQ(r1, "");  // only rank 0 logs
  std::vector<double> one = Losses(ReadAll(dir_ / "dp1.txt")), two = Losses(r0);
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(two.size(), 3u) << r0;
  // The printed losses (4 decimals) agree: the same rows, summed in another order.
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(two[i], one[i], 2e-4) << "step " << i + 1;
}

// Any rank count, not only powers of two: 1/3 is not
// exact in f32, so the mean is scaled by its nearest f32.
TEST_F(GptrunDataParallelTest, ThreeRanksFollowOneRankWithTheWholeBatch) {
  for (const auto& [name, flags] :
       {std::tuple{"b3.gptx", "--batch 3"}, std::tuple{"dp3.gptx", "--batch 1 --dp 3"}}) {
    const std::string cmd = std::string(GPTC_BIN) +
                            " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 "
                            "--seq 16 --no-codegen " +
                            flags + " -o " + (dir_ / name).string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  ASSERT_EQ(std::system(Command("", "b3.gptx", "b3.txt").c_str()), 0) << ReadAll(dir_ / "b3.txt");
  const std::string all = "(" + Command(RankEnv(1, 3), "dp3.gptx", "r1.txt") + ") & p1=$!; (" +
                          Command(RankEnv(2, 3), "dp3.gptx", "r2.txt") + ") & p2=$!; " +
                          Command(RankEnv(0, 3), "dp3.gptx", "r0.txt") +
                          "; a=$?; wait $p1; b=$?; wait $p2; c=$?; exit $((a + b + c))";
  int status = RunBash(all);
  const std::string r0 = ReadAll(dir_ / "r0.txt");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << r0 << "\n---\n"
      << ReadAll(dir_ / "r1.txt") << "\n---\n"
      << ReadAll(dir_ / "r2.txt");
  EXPECT_NE(r0.find("data parallel: 3 ranks, each 1 rows of every batch"), std::string::npos) << r0;
  std::vector<double> one = Losses(ReadAll(dir_ / "b3.txt")), three = Losses(r0);
  ASSERT_EQ(one.size(), 3u);
  ASSERT_EQ(three.size(), 3u) << r0;
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(three[i], one[i], 2e-4) << "step " << i + 1;
}

// ZeRO-1 (docs/DATA_PARALLEL.md): two ranks with sharded optimizer state
// log --zero 0's losses, both take part in each checkpoint, and the whole
// checkpoint resumes in one process with the whole batch. In f32: with bf16
// parameters an ulp of difference in the norm can round a weight to the
// other bf16 neighbour.
TEST_F(GptrunDataParallelTest, ZeroOneTrainsAndResumesAtOneRank) {
  for (const auto& [name, flags] :
       {std::tuple{"z1.gptx", "--batch 2 --dp 2 --zero 1"},
        std::tuple{"z0.gptx", "--batch 2 --dp 2"}, std::tuple{"f1.gptx", "--batch 4"}}) {
    const std::string cmd = std::string(GPTC_BIN) +
                            " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --seq 16 "
                            "--precision f32 --no-codegen " +
                            flags + " -o " + (dir_ / name).string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  auto run = [&](const std::string& env, const std::string& artifact, const std::string& tag,
                 const std::string& extra) {
    return env + " " + GPTRUN_BIN + " " + (dir_ / artifact).string() + " --device cpu --train '" +
           (dir_ / "train_*.bin").string() + "' --steps 4 --lr 1e-3 --seed 5 --log " +
           (dir_ / (tag + ".jsonl")).string() + " " + extra + " > " +
           (dir_ / (tag + ".txt")).string() + " 2>&1";
  };
  auto pair = [&](const std::string& artifact, const std::string& tag, const std::string& extra) {
    return "(" + run(RankEnv(1), artifact, tag + "1", extra) + ") & pid=$!; " +
           run(RankEnv(0), artifact, tag + "0", extra) + "; a=$?; wait $pid; b=$?; exit $((a + b))";
  };
  const std::string ckpt = "--ckpt-dir " + (dir_ / "ck").string() + " --ckpt-every 2";
  ASSERT_EQ(RunBash(pair("z1.gptx", "z", ckpt)), 0) << ReadAll(dir_ / "z0.txt");
  port_ += 1;
  ASSERT_EQ(RunBash(pair("z0.gptx", "p", "")), 0) << ReadAll(dir_ / "p0.txt");
  const std::string z0 = ReadAll(dir_ / "z0.txt");
  EXPECT_NE(z0.find("ZeRO-1: each keeps 1/2 of the optimizer state"), std::string::npos) << z0;
  EXPECT_NE(z0.find("checkpoint " + (dir_ / "ck").string() + "/step_000002"), std::string::npos);
  EXPECT_EQ(ReadAll(dir_ / "z1.txt"), "");
  const std::string resume = "--resume " + (dir_ / "ck" / "step_000002").string();
  ASSERT_EQ(std::system(run("", "f1.gptx", "r", resume).c_str()), 0) << ReadAll(dir_ / "r.txt");
  auto losses = [&](const std::string& tag) {
    std::vector<double> out;
    std::ifstream in(dir_ / (tag + ".jsonl"));
    std::regex step(R"re("event":"step","loss":([-0-9.e]+))re");
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, step)) out.push_back(std::stod(m[1]));
    }
    return out;
  };
  const std::vector<double> zero = losses("z0"), plain = losses("p0"), resumed = losses("r");
  ASSERT_EQ(zero.size(), 4u);
  ASSERT_EQ(plain.size(), 4u);
  ASSERT_EQ(resumed.size(), 2u) << ReadAll(dir_ / "r.txt");
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(zero[i], plain[i], 1e-6 * plain[i]) << "step " << i + 1;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(resumed[i], zero[i + 2], 1e-5 * zero[i + 2]) << "step " << i + 3;
  }
}

// Note [sharded checkpoints]: SIGTERM to one rank of a ZeRO-1 run stops
// both after the same step, and rank 0's checkpoint of it (every rank's
// shards gathered) is written.
TEST_F(GptrunDataParallelTest, ZeroOneStopsBothRanksOnOneRanksSignal) {
  const std::string compile = std::string(GPTC_BIN) +
                              " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --seq 16 "
                              "--no-codegen --batch 2 --dp 2 --zero 1 -o " +
                              (dir_ / "zs.gptx").string() + " > /dev/null";
  ASSERT_EQ(std::system(compile.c_str()), 0) << compile;
  const std::string ckpt = (dir_ / "ck_sig").string();
  auto rank = [&](int r) {
    return RankEnv(r) + " " + GPTRUN_BIN + " " + (dir_ / "zs.gptx").string() +
           " --device cpu --train '" + (dir_ / "train_*.bin").string() +
           "' --steps 100000 --lr 1e-3 --ckpt-dir " + ckpt + " > " +
           (dir_ / ("s" + std::to_string(r) + ".txt")).string() + " 2>&1";
  };
  // Rank 1 gets SIGTERM once rank 0 has printed step 3; rank 0 gets none.
  const std::string script =
      "(" + rank(1) + ") & p1=$!; (" + rank(0) + ") & p0=$!; for i in $(seq 600); do grep -q " +
      "'^step 3/' " + (dir_ / "s0.txt").string() +
      " && break; sleep 0.05; done; pkill -TERM -P $p1 || kill -TERM $p1; wait $p0; a=$?; "
      "wait $p1; b=$?; echo rc=$a,$b";
  const std::string quoted = std::regex_replace(script, std::regex("'"), "'\\''");
  testing::CommandResult r = testing::RunCommand("bash -c '" + quoted + "'", dir_);
  const std::string r0 = ReadAll(dir_ / "s0.txt");
  EXPECT_NE(r.out.find("rc=143,143"), std::string::npos) << r.out << r0;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r0, m,
                                std::regex(R"(gptrun: stopped by SIGTERM after step (\d+); )"
                                           R"(checkpoint \S+step_(\d+))")))
      << r0;
  EXPECT_EQ(std::stoll(m[1].str()), std::stoll(m[2].str()));
  EXPECT_TRUE(fs::exists(fs::path(ckpt) / ("step_" + m[2].str()) / "model.safetensors")) << r0;
}

TEST_F(GptrunDataParallelTest, MissingRankEndsRankZeroWithOneLine) {
  const std::string cmd =
      Command("GPTC_DIST_TIMEOUT=2 RANK=0 WORLD_SIZE=2 MASTER_PORT=" + std::to_string(port_),
              "dp2.gptx", "r0.txt");
  int status = std::system(cmd.c_str());
  const std::string r0 = ReadAll(dir_ / "r0.txt");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << r0;
  ASSERT_FALSE(r0.empty());
  EXPECT_EQ(r0.find('\n'), r0.size() - 1) << r0;  // one line
  EXPECT_NE(r0.find("rank 1"), std::string::npos) << r0;
}

TEST_F(GptrunDataParallelTest, WorldSizeMismatchIsOneLine) {
  const std::string cmd = Command("RANK=0 WORLD_SIZE=3 MASTER_PORT=" + std::to_string(port_),
                                  "dp2.gptx", "r0.txt");
  int status = std::system(cmd.c_str());
  const std::string r0 = ReadAll(dir_ / "r0.txt");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << r0;
  EXPECT_NE(r0.find("--dp 2"), std::string::npos) << r0;
}

// The NCCL path as far as a machine without a GPU takes it: both ranks find
// no GPU for their local rank before the rendezvous and end with one line
// each, long before the timeout.
TEST_F(GptrunDataParallelTest, GpuRanksWithoutAGpuEndWithOneLineEach) {
  if (std::system("nvidia-smi -L > /dev/null 2>&1") == 0) {
    GTEST_SKIP() << "a GPU is present: this checks the failure path of a machine without one";
  }
  const std::string both = "(" + Command(RankEnv(1), "dp2.gptx", "r1.txt", "--device gpu") +
                           "; echo $? > " + (dir_ / "rc1").string() + ") & pid=$!; " +
                           Command(RankEnv(0), "dp2.gptx", "r0.txt", "--device gpu") +
                           "; a=$?; wait $pid; exit $a";
  const auto start = std::chrono::steady_clock::now();
  int status = RunBash(both);
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string r0 = ReadAll(dir_ / "r0.txt"), r1 = ReadAll(dir_ / "r1.txt");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << r0;
  EXPECT_EQ(ReadAll(dir_ / "rc1"), "1\n") << r1;
  EXPECT_LT(took, std::chrono::seconds(15));  // GPTC_DIST_TIMEOUT is 20
  for (const std::string& out : {r0, r1}) {
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(out.find('\n'), out.size() - 1) << out;  // one line
    EXPECT_NE(out.find("GPU"), std::string::npos) << out;
  }
}

TEST_F(GptrunDataParallelTest, GpuFlagWithSeveralRanksIsOneLine) {
  const std::string cmd = Command(RankEnv(0), "dp2.gptx", "r0.txt", "--device gpu --gpu 1");
  int status = std::system(cmd.c_str());
  const std::string r0 = ReadAll(dir_ / "r0.txt");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << r0;
  EXPECT_EQ(r0.find('\n'), r0.size() - 1) << r0;
  EXPECT_NE(r0.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << r0;
}

// Note [agreement] in runtime/rendezvous.h: a rank started with another
// artifact (batch, remat, precision), learning rate, seed or training data
// than rank 0 ends both ranks within 10 s, each with the same one line
// naming rank 1 and what differs; nothing trains.
TEST_F(GptrunDataParallelTest, RanksThatDisagreeEndWithOneLineNamingTheField) {
  for (const auto& [name, flags] :
       {std::tuple{"dp2b3.gptx", "--batch 3 --dp 2"},
        std::tuple{"dp2remat.gptx", "--batch 2 --dp 2 --remat dots"},
        std::tuple{"dp2f32.gptx", "--batch 2 --dp 2 --precision f32"}}) {
    const std::string cmd = std::string(GPTC_BIN) +
                            " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 "
                            "--seq 16 --no-codegen " +
                            flags + " -o " + (dir_ / name).string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::vector<int32_t> tokens;
  for (int i = 0; i < 4000; ++i) tokens.push_back((i * 11 + 3) % 300);
  fs::create_directories(dir_ / "other");
  std::ofstream(dir_ / "other" / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
  const std::string train = "'" + (dir_ / "train_*.bin").string() + "'";
  using Case = std::tuple<std::string, std::string, std::string>;
  for (const auto& [artifact, rank1_flags, field] :
       {Case{"dp2b3.gptx", "", "the artifact's batch is '3' on rank 1 but '2' on rank 0"},
        Case{"dp2remat.gptx", "", "the artifact's remat is 'dots' on rank 1"},
        Case{"dp2f32.gptx", "", "the artifact's precision is 'f32' on rank 1"},
        Case{"dp2.gptx", "--lr 2e-3", "--lr is '0.002' on rank 1 but '0.001' on rank 0"},
        Case{"dp2.gptx", "--seed 6", "--seed is '6' on rank 1 but '5' on rank 0"},
        Case{"dp2.gptx", "--warmup 1", "--warmup is '1' on rank 1 but '0' on rank 0"},
        Case{"dp2.gptx", "--train '" + (dir_ / "other" / "train_*.bin").string() + "'",
                   "--train is 'train_000.bin (1 shard, identity "}}) {
    const std::string flags = " --device cpu --train " + train + " --steps 3 --lr 1e-3 --seed 5 ";
    auto command = [&](int rank, const std::string& art, const std::string& extra) {
      return RankEnv(rank) + " " + GPTRUN_BIN + " " + (dir_ / art).string() + flags + extra +
             " > " + (dir_ / ("r" + std::to_string(rank) + ".txt")).string() + " 2>&1";
    };
    const std::string both = "(" + command(1, artifact, rank1_flags) + "; echo $? > " +
                             (dir_ / "rc1").string() + ") & pid=$!; " +
                             command(0, "dp2.gptx", "") + "; a=$?; wait $pid; exit $a";
    const auto start = std::chrono::steady_clock::now();
    const int status = RunBash(both);
    const auto took = std::chrono::steady_clock::now() - start;
    const std::string r0 = ReadAll(dir_ / "r0.txt"), r1 = ReadAll(dir_ / "r1.txt");
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << field << "\n" << r0;
    EXPECT_EQ(ReadAll(dir_ / "rc1"), "1\n") << field << "\n" << r1;
    EXPECT_LT(took, std::chrono::seconds(10)) << field;
    for (const std::string& out : {r0, r1}) {
      EXPECT_EQ(out.find('\n'), out.size() - 1) << out;  // one line
      EXPECT_TRUE(out.starts_with("gptrun: rendezvous: rank 1 disagrees with rank 0: ")) << out;
      EXPECT_NE(out.find(field), std::string::npos) << field << "\n" << out;
    }
    EXPECT_EQ(r0, r1);
    ++port_;  // the next pair listens elsewhere (the last one's port may linger)
  }
}

// Note [greeting] in runtime/rendezvous.h: a program that is not gptrun on
// MASTER_PORT is named, not taken for rank 0.
TEST_F(GptrunDataParallelTest, AStrangerOnMasterPortIsNamed) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  std::thread server([listener] {
    const int c = accept(listener, nullptr, nullptr);
    if (c < 0) return;
    const char banner[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
    [[maybe_unused]] const ssize_t n = write(c, banner, sizeof(banner) - 1);
    char buf[256];
    while (read(c, buf, sizeof(buf)) > 0) {
    }
    close(c);
  });
  const std::string cmd = Command(RankEnv(1), "dp2.gptx", "r1.txt");
  const int status = std::system(cmd.c_str());
  shutdown(listener, SHUT_RDWR);
  close(listener);
  server.join();
  const std::string r1 = ReadAll(dir_ / "r1.txt");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << r1;
  EXPECT_EQ(r1.find('\n'), r1.size() - 1) << r1;  // one line
  EXPECT_NE(r1.find("127.0.0.1:" + std::to_string(port_) +
                    " is not a gptrun rank 0: it answered 'HTTP/1.0 400 Bad Request"),
            std::string::npos)
      << r1;
  EXPECT_NE(r1.find("(pid " + std::to_string(getpid()) + ") listens there"), std::string::npos)
      << r1;
}

}  // namespace
}  // namespace gptc
