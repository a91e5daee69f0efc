// gptc simulate as a process (Note [scaling model] in
// compiler/perf/scaling_model.h) on gpt2-tiny artifacts: a --dp 2 artifact
// timed by the H100 model, a --dp 1 artifact by the roofline, the JSON, and bad flags and files in
// one line. The model's arithmetic: tests/compiler/perf/scaling_model_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/program/container.h"
#include "compiler/program/plan.h"
#include "tests/testing/command.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::RunCommand;

class SimulateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) /
                        ("simulate_test_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    for (const auto& [name, flags] :
         {std::pair{"dp2", "--dp 2"}, std::pair{"dp1", ""}, std::pair{"nocodegen", "--no-codegen"},
          std::pair{"accum", "--no-codegen --grad-accum 2"},
          std::pair{"zero", "--no-codegen --dp 2 --zero 1"}}) {
      const CommandResult r = RunCommand(
          std::string(GPTC_BIN) + " compile --model gpt2-tiny " + flags + " -o " + Path(name),
          *dir_);
      ASSERT_EQ(r.code, 0) << r.err;
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string Path(const std::string& name) { return (*dir_ / (name + ".gptx")).string(); }
  static CommandResult Simulate(const std::string& args) {
    return RunCommand(std::string(GPTC_BIN) + " simulate " + args, *dir_);
  }
  // The table rows of `out`: lines that start with a GPU count.
  static std::vector<std::string> Rows(const std::string& out) {
    std::vector<std::string> rows;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      if (std::regex_match(line, std::regex(R"( *[0-9]+ +[0-9.]+ .*)"))) rows.push_back(line);
    }
    return rows;
  }
  static fs::path* dir_;
};
fs::path* SimulateTest::dir_ = nullptr;

TEST_F(SimulateTest, DataParallelArtifactByTheModel) {
  const CommandResult r = Simulate(Path("dp2"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("times: H100 model"), std::string::npos) << r.out;
  // The loss's all-reduce and the 28 gradients'.
  EXPECT_NE(r.out.find("29 gradients"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("zero 0, all-reduce f32, buckets 25 MiB (1 bucket)"), std::string::npos);
  EXPECT_NE(r.out.find("zero 1, reduce-scatter f32, buckets 25 MiB, all-gather after the "
                       "optimizer (1 bucket)"),
            std::string::npos);
  const std::vector<std::string> rows = Rows(r.out);
  ASSERT_EQ(rows.size(), 14u) << r.out;  // 1, 2, 4, 8, 16, 64, 512 GPUs, two tables
  EXPECT_TRUE(rows[0].starts_with("    1 ")) << rows[0];
  EXPECT_TRUE(rows[0].ends_with(" 1.000")) << rows[0];
  EXPECT_TRUE(rows[6].starts_with("  512 ")) << rows[6];
}

TEST_F(SimulateTest, SingleRankArtifactByTheRoofline) {
  const CommandResult r =
      Simulate(Path("dp1") + " --times roofline --zero 0 --gpus 1,8 --bucket-mib 1,25");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("times: H100 roofline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("28 gradients"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("buckets 1 MiB"), std::string::npos) << r.out;
  EXPECT_EQ(Rows(r.out).size(), 4u) << r.out;
}

TEST_F(SimulateTest, JsonRowsStartAtTheOneGpuStep) {
  const CommandResult r = Simulate(Path("dp1") + " --json --gpus 1,2,8,16 --gather after,overlap");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "gptc-simulate-1");
  ASSERT_EQ(j["tables"].size(), 3u);  // zero 0; zero 1 with the gather after and overlapped
  for (const nlohmann::json& t : j["tables"]) {
    ASSERT_EQ(t["rows"].size(), 4u);
    EXPECT_DOUBLE_EQ(t["rows"][0]["step_ms"].get<double>(), j["one_gpu_step_ms"].get<double>());
    EXPECT_EQ(t["rows"][0]["efficiency"], 1.0);
    EXPECT_GT(t["rows"][3]["exposed_ms"].get<double>(), 0) << t;
  }
}

// A gptrun --profile-json of the artifact where every launch took 10 µs:
// the step is 10 µs a thunk that does work; a row left out is counted as
// unmeasured; another artifact's profile is refused naming both.
TEST_F(SimulateTest, MeasuredTimesFromAProfile) {
  StatusOr<program::Artifact> a = program::ReadArtifact(Path("dp1"));
  ASSERT_TRUE(a.ok()) << a.status().message();
  StatusOr<program::Plan> plan = program::PlanFromJson(a->plan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  std::map<std::pair<std::string, std::string>, int> calls;
  int working = 0;
  for (const program::Thunk& t : plan->entries.front().thunks) {
    const auto* k = std::get_if<program::KernelThunk>(&t.body);
    if ((k != nullptr && k->fallback) || t.kind() == program::ThunkKind::kConstant) continue;
    ++calls[{std::string(program::ThunkKindName(t.kind())), t.name}];
    ++working;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, n] : calls) {
    rows.push_back({{"entry", "train_step"},
                    {"kind", key.first},
                    {"name", key.second},
                    {"ms_per_step", 0.01 * n},
                    {"calls_per_step", n}});
  }
  nlohmann::json profile = {{"format", "gptc-profile-1"},
                            {"artifact", Path("dp1")},
                            {"artifact_checksum", fmt::format("{:016x}", a->checksum)},
                            {"device", "NVIDIA H100"},
                            {"steps", 3},
                            {"rows", rows}};
  const std::string path = (*dir_ / "profile.json").string();
  std::ofstream(path) << profile.dump();
  CommandResult r = Simulate(Path("dp1") + " --times " + path + " --json --gpus 1");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j["one_gpu_step_ms"].get<double>(), 0.01 * working, 1e-9);
  EXPECT_EQ(j["times"], "measured (" + path + ", 3 steps on NVIDIA H100)");
  profile["rows"].erase(0);
  std::ofstream(path) << profile.dump();
  r = Simulate(Path("dp1") + " --times " + path + " --json --gpus 1");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["times"].get<std::string>().find("thunks unmeasured, timed 0"), std::string::npos);
  EXPECT_LT(j["one_gpu_step_ms"].get<double>(), 0.01 * working);
  profile["artifact_checksum"] = "0000000000000000";
  std::ofstream(path) << profile.dump();
  r = Simulate(Path("dp1") + " --times " + path);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("measured on another artifact"), std::string::npos) << r.err;
}

TEST_F(SimulateTest, BadFlagsAndFilesInOneLine) {
  const std::string a = Path("dp1");
  for (const auto& [args, code, message] : std::vector<std::tuple<std::string, int, std::string>>{
           {a + " --gpus 0", 2, "--gpus: '0' is not a whole number of at least 1"},
           {a + " --gpus 2,x", 2, "--gpus: 'x' is not a whole number of at least 1"},
           {a + " --zero 2", 2, "--zero: 2 is neither 0 nor 1"},
           {a + " --grad-comm f16", 2, "--grad-comm must be f32 or bf16, got 'f16'"},
           {a + " --gather later", 2, "--gather: 'later' is neither after nor overlap"},
           {a + " --bucket-mib 25,0", 2, "--bucket-mib: '0' is not a number of at least 0.001"},
           {a + " --grad-accum 2,4", 2, "--grad-accum takes one number"},
           {a + " --times " + a + ".nope", 1, "--times"},
           {Path("nocodegen"), 1,
            "has no kernel (compiled with --no-codegen): nothing to time it by"},
           {Path("missing"), 1, "missing.gptx"},
           {Path("accum"), 1, "compiled with --grad-accum 2: no train_step entry"},
           {Path("zero"), 1,
            "compiled with --zero 1: the scaling model predicts ZeRO-1 from the --zero 0 "
            "artifact"},
       }) {
    const CommandResult r = Simulate(args);
    EXPECT_EQ(r.code, code) << args << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << args;
  }
}

}  // namespace
}  // namespace gptc
