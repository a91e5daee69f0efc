// gptrun eval and --hellaswag on gpt2-tiny (one layer, f32) with eval sets
// the test writes in llm.c's format: every completion's summed loss equals
// the host's cross-entropy over the logits entry's logits; the emulated
// device and two data-parallel ranks give the CPU device's result; a model
// trained on a task whose right ending is predictable scores well above
// chance, an untrained one near it; bad inputs are one line each.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "compiler/program/container.h"
#include "runtime/cpu_device.h"
#include "runtime/data_loader.h"
#include "runtime/eval_file.h"
#include "runtime/program_loader.h"
#include "tests/testing/command.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/train_loop.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ReadAll;
using testing::RunCommand;

constexpr int64_t kSeq = 16;
constexpr char kModel[] =
    " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --seq 16 "
    "--precision f32 ";

// The task: the token after x is always F(x). Contexts are pairs "x F(x)"
// ending in a lone x; the right completion is F(x), the others F(y), y != x.
int32_t F(int32_t x) { return 100 + (x * 5 + 3) % 16; }

std::vector<rt::EvalExample> TaskExamples(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<rt::EvalExample> examples;
  for (int i = 0; i < n; ++i) {
    rt::EvalExample e;
    e.index = i;
    e.label = static_cast<int64_t>(rng() % 4);
    for (int k = 0; k < 2; ++k) {
      const int32_t x = static_cast<int32_t>(rng() % 16);
      e.context.insert(e.context.end(), {x, F(x)});
    }
    const int32_t x = static_cast<int32_t>(rng() % 16);
    e.context.push_back(x);
    std::vector<int32_t> wrong;
    while (wrong.size() < 3) {
      const int32_t y = static_cast<int32_t>(rng() % 16);
      if (y != x && std::find(wrong.begin(), wrong.end(), F(y)) == wrong.end()) {
        wrong.push_back(F(y));
      }
    }
    for (int64_t c = 0, w = 0; c < 4; ++c) {
      e.completions.push_back({c == e.label ? F(x) : wrong[w++]});
    }
    examples.push_back(std::move(e));
  }
  return examples;
}

// Completions of 1 to 6 tokens, so that the least summed loss (short ones)
// and the least mean loss can choose differently.
std::vector<rt::EvalExample> MixedExamples(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<rt::EvalExample> examples;
  for (int i = 0; i < n; ++i) {
    rt::EvalExample e{.index = i, .label = static_cast<int64_t>(rng() % 4)};
    for (int t = 0; t < 5; ++t) e.context.push_back(static_cast<int32_t>(rng() % 50257));
    for (int c = 0; c < 4; ++c) {
      e.completions.emplace_back();
      for (int t = 0; t <= static_cast<int>(c == 3 ? 5 : rng() % 3); ++t) {
        e.completions.back().push_back(static_cast<int32_t>(rng() % 50257));
      }
    }
    examples.push_back(std::move(e));
  }
  return examples;
}

class GptrunEvalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new fs::path(fs::path(::testing::TempDir()) / ("gptrun_eval_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    WriteSet("task.bin", TaskExamples(48, 1));
    WriteSet("mixed.bin", MixedExamples(10, 2));
    const std::string codegen = tools::HaveGpuDevice() ? "--emu" : "--no-codegen";
    for (const auto& [name, flags] :
         {std::pair{"tiny.gptx", "--batch 4 "}, std::pair{"dp2.gptx", "--batch 4 --dp 2 "}}) {
      testing::CommandResult r = RunCommand(
          std::string(GPTC_BIN) + kModel + flags + codegen + " -o " + (*dir_ / name).string(),
          *dir_);
      ASSERT_EQ(r.code, 0) << r.out << r.err;
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static void WriteSet(const std::string& name, const std::vector<rt::EvalExample>& examples) {
    StatusOr<std::string> bytes = rt::EncodeEvalFile(examples);
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    std::ofstream(*dir_ / name, std::ios::binary) << *bytes;
  }
  static std::string Path(const std::string& name) { return (*dir_ / name).string(); }

  // gptrun eval ARTIFACT --hellaswag SET ARGS --json OUT; the JSON, or null.
  static json Eval(const std::string& artifact, const std::string& set, const std::string& args,
                   const std::string& out, std::string* log = nullptr) {
    testing::CommandResult r =
        RunCommand(std::string(GPTRUN_BIN) + " eval " + Path(artifact) + " --hellaswag " +
                       Path(set) + " " + args + " --json " + Path(out),
                   *dir_);
    if (log != nullptr) *log = r.out + r.err;
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    if (r.code != 0) return nullptr;
    return json::parse(ReadAll(*dir_ / out));
  }

  static fs::path* dir_;
};
fs::path* GptrunEvalTest::dir_ = nullptr;

// Each completion's loss sum from the logits entry (batch 1, the window of
// 16) of the same initial parameters, in double on the host.
std::vector<std::vector<double>> HostLossSums(const std::string& artifact,
                                              const std::vector<rt::EvalExample>& examples) {
  StatusOr<program::Artifact> a = program::ReadArtifact(artifact);
  EXPECT_TRUE(a.ok()) << a.status().message();
  StatusOr<rt::LoadedProgram> loaded = rt::LoadProgram(*a, artifact);
  EXPECT_TRUE(loaded.ok()) << loaded.status().message();
  rt::CpuTrainer trainer(&loaded->program, /*seed=*/0);
  const program::TrainEntry& logits = *loaded->program.Find(program::EntryRole::kLogits);
  const int64_t vocab = loaded->model.vocab;
  std::vector<std::vector<double>> sums;
  for (const rt::EvalExample& e : examples) {
    sums.emplace_back();
    for (const std::vector<int32_t>& c : e.completions) {
      rt::MicroBatch row;
      row.tokens = e.context;
      row.tokens.insert(row.tokens.end(), c.begin(), c.end());
      row.tokens.resize(kSeq, 0);
      StatusOr<std::vector<eval::Literal>> out = trainer.Evaluate(logits, row);
      EXPECT_TRUE(out.ok()) << out.status().message();
      const std::vector<double>& v = out->at(0).values;
      const int64_t padded = static_cast<int64_t>(v.size()) / kSeq;
      double sum = 0;
      for (size_t k = 0; k < c.size(); ++k) {
        const double* x = v.data() + (e.context.size() - 1 + k) * padded;
        const double top = *std::max_element(x, x + vocab);
        double z = 0;
        for (int64_t j = 0; j < vocab; ++j) z += std::exp(x[j] - top);
        sum += top + std::log(z) - x[c[k]];
      }
      sums.back().push_back(sum);
    }
  }
  return sums;
}

TEST_F(GptrunEvalTest, CpuScoresAreTheLogitsEntrysLosses) {
  json j = Eval("tiny.gptx", "mixed.bin", "--device cpu", "cpu.json");
  ASSERT_FALSE(j.is_null());
  const std::vector<rt::EvalExample> examples = MixedExamples(10, 2);
  const std::vector<std::vector<double>> want = HostLossSums(Path("tiny.gptx"), examples);
  ASSERT_EQ(j["per_example"].size(), examples.size());
  int differ = 0, correct = 0, correct_norm = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const json& e = j["per_example"][i];
    EXPECT_EQ(e["label"], examples[i].label);
    std::vector<double> sums = e["loss_sums"], means = e["mean_losses"];
    ASSERT_EQ(sums.size(), 4u);
    for (size_t c = 0; c < 4; ++c) {
      EXPECT_NEAR(sums[c], want[i][c], 1e-6 * want[i][c]) << "example " << i << " ending " << c;
      EXPECT_NEAR(means[c], want[i][c] / examples[i].completions[c].size(), 1e-6 * want[i][c]);
    }
    const auto choice = std::min_element(sums.begin(), sums.end()) - sums.begin();
    const auto choice_norm = std::min_element(means.begin(), means.end()) - means.begin();
    EXPECT_EQ(e["choice"], choice);
    EXPECT_EQ(e["choice_norm"], choice_norm);
    differ += choice != choice_norm;
    correct += choice == examples[i].label;
    correct_norm += choice_norm == examples[i].label;
  }
  EXPECT_GT(differ, 0) << "no example where acc and acc_norm choose differently";
  EXPECT_EQ(j["examples"], 10);
  EXPECT_EQ(j["acc_correct"], correct);
  EXPECT_EQ(j["acc_norm_correct"], correct_norm);
  EXPECT_DOUBLE_EQ(j["acc_norm"].get<double>(), correct_norm / 10.0);
  const double low = j["acc_norm_interval"][0], high = j["acc_norm_interval"][1];
  EXPECT_LE(low, j["acc_norm"].get<double>());
  EXPECT_GE(high, j["acc_norm"].get<double>());
}

// The token stream of the task: x F(x) pairs of random x.
void WriteTaskShard(const fs::path& path) {
  std::mt19937 rng(9);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 20000; ++i) {
    const int32_t x = static_cast<int32_t>(rng() % 16);
    tokens.insert(tokens.end(), {x, F(x)});
  }
  std::ofstream(path, std::ios::binary) << rt::EncodeShard(tokens);
}

// Two ranks launched as processes with the launch variables gptrun's training
// reads; `args` follow `gptrun` (rank 0's output in r0.log, rank 1's in
// r1.log). Returns both exit codes' sum.
int RunTwoRanks(const fs::path& dir, const std::string& args) {
  std::random_device rd;
  const std::string port = std::to_string(20000 + static_cast<int>(rd() % 20000));
  auto rank = [&](int r) {
    return "GPTC_DIST_TIMEOUT=60 RANK=" + std::to_string(r) + " WORLD_SIZE=2 LOCAL_RANK=" +
           std::to_string(r) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " + GPTRUN_BIN +
           " " + args + " > " + (dir / ("r" + std::to_string(r) + ".log")).string() + " 2>&1";
  };
  const std::string both =
      "(" + rank(1) + ") & pid=$!; " + rank(0) + "; a=$?; wait $pid; b=$?; exit $((a + b))";
  const int status = std::system(("bash -c '" + both + "'").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

// The ranks' shares add up to one process's counts (each example is scored
// by one rank, with the same parameters and rows), on the CPU device and on
// the emulated one.
void ExpectTwoRanksCountWhatOneRankCounts(const fs::path& dir, const std::string& device,
                                          const json& one) {
  fs::remove(dir / "r0.json");
  const std::string args = "eval " + (dir / "dp2.gptx").string() + " --hellaswag " +
                           (dir / "mixed.bin").string() + " --device " + device + " --json " +
                           (dir / "r0.json").string();
  ASSERT_EQ(RunTwoRanks(dir, args), 0) << ReadAll(dir / "r0.log") << "\n---\n"
                                       << ReadAll(dir / "r1.log");
  EXPECT_EQ(ReadAll(dir / "r1.log"), "");  // rank 0 alone reports
  json two = json::parse(ReadAll(dir / "r0.json"));
  EXPECT_EQ(two["ranks"], 2);
  EXPECT_EQ(two["device"], device);
  for (const char* key : {"examples", "acc_correct", "acc_norm_correct"}) {
    EXPECT_EQ(two[key], one[key]) << key;
  }
}

TEST_F(GptrunEvalTest, TwoRanksCountWhatOneRankCounts) {
  json one = Eval("tiny.gptx", "mixed.bin", "--device cpu", "one.json");
  ASSERT_FALSE(one.is_null());
  ExpectTwoRanksCountWhatOneRankCounts(*dir_, "cpu", one);
  if (!tools::HaveGpuDevice()) GTEST_SKIP() << "gptrun built without the GPU runtime (no emu)";
  ExpectTwoRanksCountWhatOneRankCounts(*dir_, "emu", one);
}

// --hellaswag in a data-parallel run: every rank scores its half between
// steps, and rank 0's line counts every example.
TEST_F(GptrunEvalTest, TrainingRanksSplitTheSet) {
  WriteTaskShard(*dir_ / "task_000.bin");
  const std::string args = (*dir_ / "dp2.gptx").string() + " --device cpu --train " +
                           (*dir_ / "task_000.bin").string() + " --steps 2 --hellaswag " +
                           (*dir_ / "mixed.bin").string() + " --hellaswag-every 1";
  ASSERT_EQ(RunTwoRanks(*dir_, args), 0) << ReadAll(*dir_ / "r0.log") << "\n---\n"
                                         << ReadAll(*dir_ / "r1.log");
  const std::string r0 = ReadAll(*dir_ / "r0.log");
  const std::regex line(R"(hellaswag 10 examples \| acc [0-9.]+ .* \| step (\d)\n)");
  std::vector<std::string> steps;
  for (auto it = std::sregex_iterator(r0.begin(), r0.end(), line); it != std::sregex_iterator();
       ++it) {
    steps.push_back((*it)[1]);
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"1", "2"})) << r0;
  EXPECT_EQ(ReadAll(*dir_ / "r1.log"), "");
}

TEST_F(GptrunEvalTest, EmulatedDeviceScoresAsTheCpu) {
  if (!tools::HaveGpuDevice()) GTEST_SKIP() << "gptrun built without the GPU runtime (no emu)";
  json cpu = Eval("tiny.gptx", "mixed.bin", "--device cpu", "c.json");
  json emu = Eval("tiny.gptx", "mixed.bin", "--device emu", "e.json");
  ASSERT_FALSE(cpu.is_null() || emu.is_null());
  EXPECT_EQ(emu["device"], "emu");
  for (size_t i = 0; i < cpu["per_example"].size(); ++i) {
    std::vector<double> a = cpu["per_example"][i]["loss_sums"],
                        b = emu["per_example"][i]["loss_sums"];
    for (size_t c = 0; c < a.size(); ++c) {
      EXPECT_NEAR(b[c], a[c], 1e-5 * a[c]) << "example " << i << " ending " << c;
    }
  }
  EXPECT_EQ(emu["acc_correct"], cpu["acc_correct"]);
  EXPECT_EQ(emu["acc_norm_correct"], cpu["acc_norm_correct"]);
}

// gptc compile --score-seq 8 (Note [score window]): rows of 8 tokens, 8 of
// them, so two examples a pass instead of one; the same loss sums as rows of
// the train step's 16 (causal attention: padding after a row changes nothing).
TEST_F(GptrunEvalTest, AShorterScoreWindowScoresTheSame) {
  testing::CommandResult r = RunCommand(std::string(GPTC_BIN) + kModel +
                                            "--batch 4 --no-codegen --score-seq 8 -o " +
                                            Path("w8.gptx"),
                                        *dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  StatusOr<program::Artifact> a = program::ReadArtifact(Path("w8.gptx"));
  ASSERT_TRUE(a.ok()) << a.status().message();
  StatusOr<rt::LoadedProgram> loaded = rt::LoadProgram(*a, Path("w8.gptx"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const program::TrainEntry* score = loaded->program.Find(program::EntryRole::kScore);
  ASSERT_NE(score, nullptr);
  EXPECT_EQ(score->signature.inputs.back().shape.dims(), (std::vector<int64_t>{8, 8}));

  json full = Eval("tiny.gptx", "task.bin", "--device cpu --limit 12", "full.json");
  json short_rows = Eval("w8.gptx", "task.bin", "--device cpu --limit 12", "w8.json");
  ASSERT_FALSE(full.is_null() || short_rows.is_null());
  for (size_t i = 0; i < 12; ++i) {
    std::vector<double> x = full["per_example"][i]["loss_sums"],
                        y = short_rows["per_example"][i]["loss_sums"];
    for (size_t c = 0; c < x.size(); ++c) EXPECT_NEAR(y[c], x[c], 1e-6 * x[c]) << i << " " << c;
  }
  // mixed.bin's longest example (5 + 6 tokens) does not fit rows of 8.
  testing::CommandResult longer = RunCommand(std::string(GPTRUN_BIN) + " eval " +
                                                 Path("w8.gptx") + " --device cpu --hellaswag " +
                                                 Path("mixed.bin"),
                                             *dir_);
  EXPECT_EQ(longer.code, 2) << longer.err;
  EXPECT_NE(longer.err.find("more than the score entry's 8 (gptc compile --seq or --score-seq)"),
            std::string::npos)
      << longer.err;
  testing::CommandResult bad = RunCommand(
      std::string(GPTC_BIN) + kModel + "--score-seq 17 -o " + Path("bad.gptx"), *dir_);
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_EQ(bad.err, "gptc: --score-seq must be between 1 and --seq 16, got 17\n");
}

// gpt2-124m's shapes (width 768, 12 heads, the padded vocabulary; one
// layer, a window of 32): the emulated device runs the artifact's own score
// kernels and gemm plans and gives the CPU device's loss sums.
TEST_F(GptrunEvalTest, OneLayerOf124mOnTheEmulatorEqualsTheCpu) {
  if (!tools::HaveGpuDevice()) GTEST_SKIP() << "gptrun built without the GPU runtime (no emu)";
  testing::CommandResult r = RunCommand(
      std::string(GPTC_BIN) + " compile --model gpt2-124m --layers 1 --batch 4 --seq 32 "
      "--precision f32 --emu -o " + Path("m124.gptx"), *dir_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<rt::EvalExample> examples = MixedExamples(4, 5);
  WriteSet("m124.bin", examples);
  json cpu = Eval("m124.gptx", "m124.bin", "--device cpu", "m124c.json");
  json emu = Eval("m124.gptx", "m124.bin", "--device emu", "m124e.json");
  ASSERT_FALSE(cpu.is_null() || emu.is_null());
  ASSERT_EQ(emu["per_example"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const json &a = cpu["per_example"][i], &b = emu["per_example"][i];
    std::vector<double> x = a["loss_sums"], y = b["loss_sums"];
    for (size_t c = 0; c < x.size(); ++c) {
      EXPECT_NEAR(y[c], x[c], 1e-5 * x[c]) << "example " << i << " ending " << c;
    }
    EXPECT_EQ(b["choice"], a["choice"]);
    EXPECT_EQ(b["choice_norm"], a["choice_norm"]);
  }
}

// Training with --hellaswag logs the accuracy as it learns the task; the
// trained checkpoint scores far above chance with gptrun eval, the untrained
// parameters near it.
TEST_F(GptrunEvalTest, TrainingOnTheTaskLiftsTheAccuracyAboveChance) {
  WriteTaskShard(*dir_ / "task_000.bin");
  tools::TrainOptions o;
  o.artifact = Path("tiny.gptx");
  o.device = "cpu";
  o.train = Path("task_*.bin");
  o.steps = 200;
  o.lr = 1e-2;
  o.quiet = true;
  o.ckpt_dir = Path("task_ckpt");
  o.log_path = Path("task.jsonl");
  o.hellaswag = Path("task.bin");
  o.hellaswag_every = 100;
  tools::TrainSummary summary;
  ASSERT_EQ(tools::Train(o, &summary), 0) << summary.error;
  std::vector<json> events;
  std::ifstream log(*dir_ / "task.jsonl");
  for (std::string line; std::getline(log, line);) {
    json e = json::parse(line);
    if (e["event"] == "hellaswag") events.push_back(e);
  }
  ASSERT_EQ(events.size(), 2u);  // steps 100 and 200 (the last)
  EXPECT_EQ(events[1]["step"], 200);
  EXPECT_EQ(events[1]["examples"], 48);
  EXPECT_GT(events[1]["acc_norm"].get<double>(), 0.8) << events[1].dump();

  json trained = Eval("tiny.gptx", "task.bin",
                      "--device cpu --resume " + Path("task_ckpt/step_000200"), "trained.json");
  json untrained = Eval("tiny.gptx", "task.bin", "--device cpu --seed 3", "untrained.json");
  ASSERT_FALSE(trained.is_null() || untrained.is_null());
  EXPECT_EQ(trained["acc_norm"], events[1]["acc_norm"]);
  EXPECT_EQ(trained["step"], 200);
  EXPECT_GT(trained["acc_norm"].get<double>(), 0.8);
  // 48 examples: chance is 0.25 with a standard deviation of 0.0625.
  EXPECT_GT(untrained["acc_norm"].get<double>(), 0.05);
  EXPECT_LT(untrained["acc_norm"].get<double>(), 0.5);
}

// Each bad input: one line naming it, exit code 1 (a bad file) or 2 (a bad request).
TEST_F(GptrunEvalTest, BadInputsAreOneLine) {
  WriteTaskShard(*dir_ / "task_000.bin");
  std::vector<rt::EvalExample> long_example = TaskExamples(2, 4);
  long_example[1].context.resize(kSeq, 1);  // context + completion: 17 > 16 tokens
  WriteSet("long.bin", long_example);
  std::string bytes = ReadAll(*dir_ / "task.bin");
  bytes[0] = 'X';
  std::ofstream(*dir_ / "magic.bin", std::ios::binary) << bytes;
  bytes = ReadAll(*dir_ / "task.bin");
  bytes[1024 + 6] = 9;  // the first example's label, past its 4 completions
  std::ofstream(*dir_ / "label.bin", std::ios::binary) << bytes;
  testing::CommandResult other =
      RunCommand(std::string(GPTC_BIN) +
                     " compile --model gpt2-tiny --layers 2 --heads 2 --width 32 "
                     "--seq 16 --no-codegen -o " +
                     Path("other.gptx") + " && " + GPTRUN_BIN + " " + Path("other.gptx") +
                     " --device cpu --train " + Path("task_000.bin") + " --steps 1 --ckpt-dir " +
                     Path("other_ckpt"),
                 *dir_);
  ASSERT_EQ(other.code, 0) << other.out << other.err;
  struct Case {
    std::string args, want;
    int code;
  };
  const std::string tiny = Path("tiny.gptx") + " --device cpu --hellaswag ";
  for (const Case& c : std::vector<Case>{
           {tiny + Path("nosuch.bin"), "nosuch.bin", 1},
           {tiny + Path("magic.bin"), "magic", 1},
           {tiny + Path("label.bin"), "label", 1},
           {tiny + Path("long.bin"), "example 1 (index 1)", 2},
           {tiny + Path("task.bin") + " --resume " + Path("other_ckpt/step_000001"), "--resume", 1},
           {Path("tiny.gptx") + " --device cpu", "--hellaswag", 2},
           {tiny + Path("task.bin") + " --limit 0", "--limit", 2}}) {
    testing::CommandResult r = RunCommand(std::string(GPTRUN_BIN) + " eval " + c.args, *dir_);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.want), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("gptrun: ", 0), 0u) << r.err;
  }
}

}  // namespace
}  // namespace gptc
