// gptrun --autotune on the emulated device (Note [autotune paths] in
// runtime/gpu/autotune.h): its stand-in timings (Note [emulated time] in
// runtime/emu/emu_state.h) make the tuning's choice deterministic, so the
// selection, the cache and its failures are checked here as a GPU would
// exercise them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "runtime/data_loader.h"
#include "tests/testing/command.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::CommandResult;
using testing::ReadAll;
using testing::RunCommand;

class GptrunAutotuneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) /
                        ("gptrun_autotune_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 4000; ++i) tokens.push_back((i * 7 + (i / 13)) % 300);
    std::ofstream(*dir_ / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
    const std::string cmd = std::string(GPTC_BIN) +
                            " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --seq 16 "
                            "--batch 2 --no-logits --emu -o " +
                            (*dir_ / "one.gptx").string() + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  // gptrun on the emulated device, its autotune cache under `xdg`, with
  // `env` before it and `flags` after: 3 steps, --profile-json to `name`.json.
  // gptc recorded its trust in the emulator library in the test run's cache
  // directory, not `xdg`: --trust-artifact (Note [trusted emulator libraries]).
  static CommandResult Run(const std::string& xdg, const std::string& flags,
                           const std::string& name, const std::string& env = "") {
    const std::string cmd = "XDG_CACHE_HOME=" + (*dir_ / xdg).string() + " " + env + " " +
                            GPTRUN_BIN + " " + (*dir_ / "one.gptx").string() +
                            " --device emu --trust-artifact --train '" +
                            (*dir_ / "train_*.bin").string() +
                            "' --steps 3 --seed 2 --log " + (*dir_ / (name + ".jsonl")).string() +
                            " --profile --profile-json " + (*dir_ / (name + ".json")).string() +
                            " " + flags;
    return RunCommand(cmd, *dir_);
  }
  static json Profile(const std::string& name) {
    return json::parse(ReadAll(*dir_ / (name + ".json")), nullptr, false);
  }
  static std::vector<double> Losses(const std::string& name) {
    std::vector<double> losses;
    std::ifstream in(*dir_ / (name + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.value("event", "") == "step") losses.push_back(j["loss"]);
    }
    return losses;
  }
  // The load line's "N timed ..., M from the cache, U untimed".
  static std::vector<int> Counts(const std::string& out) {
    std::smatch m;
    if (!std::regex_search(out, m,
                           std::regex(R"((\d+) timed \(\d+ candidates, [0-9.]+ s\), (\d+) from )"
                                      R"(the cache, (\d+) untimed)"))) {
      return {};
    }
    return {std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])};
  }

  static fs::path* dir_;
};

fs::path* GptrunAutotuneTest::dir_ = nullptr;

TEST_F(GptrunAutotuneTest, TunesEachGemmOnceThenTakesTheCache) {
  CommandResult first = Run("cache", "", "first");
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  const std::vector<int> counts = Counts(first.out);
  ASSERT_EQ(counts.size(), 3u) << first.out;
  EXPECT_GT(counts[0], 0);
  EXPECT_EQ(counts[1], 0);
  EXPECT_EQ(counts[2], 0);
  EXPECT_TRUE(fs::exists(*dir_ / "cache" / "gptc" / "autotune.json"));
  // Each choice is the fastest candidate; some are not the heuristic's first.
  const json p = Profile("first");
  ASSERT_TRUE(p.is_object());
  EXPECT_EQ(p["format"], "gptc-profile-1");
  ASSERT_EQ(p["gemm_tuning"].size(), static_cast<size_t>(counts[0]));
  int reordered = 0;
  size_t thunks = 0;
  for (const json& g : p["gemm_tuning"]) {
    EXPECT_LE(g["us"].get<double>(), g["first_us"].get<double>()) << g.dump();
    EXPECT_GT(g["tflops"].get<double>(), 0) << g.dump();
    // The emulator's 4 algorithms, on both paths where the gemm has a fallback.
    const bool fallback = g["key"].get<std::string>().ends_with(" | fallback");
    EXPECT_EQ(g["candidates"], fallback ? 8 : 4) << g.dump();
    reordered += g["algorithm"] != 0;
    thunks += g["thunks"].size();
  }
  EXPECT_GT(reordered, 0);
  size_t gemm_rows = 0;
  for (const json& r : p["rows"]) gemm_rows += r["kind"] == "gemm";
  EXPECT_EQ(thunks, gemm_rows);  // every gemm of the train step, each once

  CommandResult second = Run("cache", "", "second");
  ASSERT_EQ(second.code, 0) << second.out << second.err;
  EXPECT_EQ(Counts(second.out), (std::vector<int>{0, counts[0], 0})) << second.out;
  const json q = Profile("second");
  ASSERT_EQ(q["gemm_tuning"].size(), p["gemm_tuning"].size());
  for (size_t i = 0; i < p["gemm_tuning"].size(); ++i) {
    EXPECT_EQ(q["gemm_tuning"][i]["algorithm"], p["gemm_tuning"][i]["algorithm"]);
    EXPECT_EQ(q["gemm_tuning"][i]["path"], p["gemm_tuning"][i]["path"]);
    EXPECT_TRUE(q["gemm_tuning"][i]["from_cache"].get<bool>());
  }
  EXPECT_EQ(Losses("second"), Losses("first"));

  // Deterministic: a fresh cache chooses the same again.
  CommandResult fresh = Run("fresh", "", "fresh");
  ASSERT_EQ(fresh.code, 0) << fresh.out << fresh.err;
  EXPECT_EQ(Profile("fresh")["gemm_tuning"], p["gemm_tuning"]);
}

TEST_F(GptrunAutotuneTest, ASlowEpilogueLosesToThePlainGemmAndItsKernel) {
  CommandResult off = Run("off", "--autotune off", "off");
  ASSERT_EQ(off.code, 0) << off.out << off.err;
  EXPECT_EQ(off.out.find("autotune ("), std::string::npos) << off.out;
  CommandResult slow =
      Run("slow", "", "slow",
          "GPTC_EMU_SLOW_EPILOGUES=CUBLASLT_EPILOGUE_BIAS,CUBLASLT_EPILOGUE_GELU_AUX_BIAS,"
          "CUBLASLT_EPILOGUE_DGELU,CUBLASLT_EPILOGUE_BGRADA,CUBLASLT_EPILOGUE_BGRADB");
  ASSERT_EQ(slow.code, 0) << slow.out << slow.err;
  const json p = Profile("slow");
  int fallbacks = 0;
  for (const json& g : p["gemm_tuning"]) fallbacks += g["path"] == "fallback";
  EXPECT_GT(fallbacks, 0) << p.dump(1);
  EXPECT_NE(slow.out.find(
                fmt::format("{} of them the gemm without its epilogue plus its kernel", fallbacks)),
            std::string::npos)
      << slow.out;
  // The same training, every emulator check on.
  const std::vector<double> a = Losses("off"), b = Losses("slow");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "step " << i + 1;
}

TEST_F(GptrunAutotuneTest, ACorruptCacheIsAWarningAndIsRewritten) {
  fs::create_directories(*dir_ / "corrupt" / "gptc");
  std::ofstream(*dir_ / "corrupt" / "gptc" / "autotune.json") << R"({"format": "gptc-autot)";
  CommandResult r = Run("corrupt", "", "corrupt");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("warning: the autotune cache "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is unusable (not JSON"), std::string::npos) << r.err;
  const json j = json::parse(ReadAll(*dir_ / "corrupt" / "gptc" / "autotune.json"), nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["format"], "gptc-autotune-1");
}

// --autotune cached times nothing: a corrupt cache is left as it is, and
// the warning says so (it said "tuned again and the file is replaced").
TEST_F(GptrunAutotuneTest, ACorruptCacheUnderCachedIsLeftAlone) {
  fs::create_directories(*dir_ / "corrupt-cached" / "gptc");
  const std::string bad = R"({"format": "gptc-autot)";
  std::ofstream(*dir_ / "corrupt-cached" / "gptc" / "autotune.json") << bad;
  CommandResult r = Run("corrupt-cached", "--autotune cached", "corrupt-cached");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("is unusable (not JSON"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the heuristic's first answers are used and the file is left as it is"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("tuned again"), std::string::npos) << r.err;
  EXPECT_EQ(ReadAll(*dir_ / "corrupt-cached" / "gptc" / "autotune.json"), bad);
}

TEST_F(GptrunAutotuneTest, AnUnwritableCacheIsAWarning) {
  std::ofstream(*dir_ / "plainfile") << "x";
  CommandResult r = Run("plainfile", "", "unwritable");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("warning: the autotune cache cannot be written"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the tuning holds for this run only"), std::string::npos) << r.err;
}

TEST_F(GptrunAutotuneTest, CachedTimesNothing) {
  CommandResult r = Run("empty", "--autotune cached", "cached");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::vector<int> counts = Counts(r.out);
  ASSERT_EQ(counts.size(), 3u) << r.out;
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[1], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_FALSE(fs::exists(*dir_ / "empty" / "gptc" / "autotune.json"));
}

// Note [emulated memory counters]: --profile on the emulated device counts
// every kernel's requests, sectors and wavefronts, in the table and the JSON.
TEST_F(GptrunAutotuneTest, ProfileOnTheEmulatorCountsMemoryAccesses) {
  CommandResult r = Run("counters", "--autotune off", "counters");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("memory counters (Note [emulated memory counters]"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("instructions and H100 estimate (Note [emulated instruction counters]"),
            std::string::npos)
      << r.out;
  const json p = Profile("counters");
  ASSERT_TRUE(p.contains("counters")) << p.dump(1);
  size_t kernel_rows = 0;
  for (const json& row : p["rows"]) kernel_rows += row["kind"] == "kernel";
  EXPECT_GT(p["counters"].size(), 0u);
  EXPECT_LE(p["counters"].size(), kernel_rows);
  for (const json& k : p["counters"]) {
    EXPECT_GT(k["launches"].get<int64_t>(), 0) << k.dump();
    // A request touches at least one sector and at most one per byte.
    const uint64_t requests = k["global_load_requests"], sectors = k["global_load_sectors"];
    EXPECT_GE(sectors, requests) << k.dump();
    EXPECT_LE(sectors, k["global_load_bytes"].get<uint64_t>()) << k.dump();
    // Note [emulated instruction counters]: every kernel executes some, its
    // global accesses among them; Note [H100 time estimate]: at least the
    // launch, and a bound that decided it.
    const json& mix = k["warp_instructions"];
    uint64_t instructions = 0;
    for (const auto& [name, n] : mix.items()) instructions += n.get<uint64_t>();
    EXPECT_EQ(mix.size(), 8u) << k.dump();
    EXPECT_GT(instructions, 0u) << k.dump();
    EXPECT_GE(mix["gmem"].get<uint64_t>(), 1u) << k.dump();
    EXPECT_GE(k["h100_estimate_us"].get<double>(), 2.0) << k.dump();
    EXPECT_TRUE(k["h100_estimate_bound"] == "memory" || k["h100_estimate_bound"] == "issue" ||
                k["h100_estimate_bound"] == "shared")
        << k.dump();
    EXPECT_GE(k["roofline_us"].get<double>(), 0.0) << k.dump();
  }
  // Note [step model]: the artifact's step on an H100, in the table and
  // the JSON, every launch of the step with its time.
  EXPECT_NE(r.out.find("H100 step estimate (Note [step model]): "), std::string::npos) << r.out;
  ASSERT_TRUE(p.contains("h100_model")) << p.dump(1);
  const json& model = p["h100_model"];
  double sum = 0;
  for (const json& l : model["launches"]) {
    EXPECT_GE(l["us"].get<double>(), 2.0) << l.dump();
    sum += l["us"].get<double>() * l["repeat"].get<double>();
  }
  EXPECT_NEAR(model["step_us"].get<double>(), sum, 1e-6 * sum);
  EXPECT_GT(model["tokens_per_second"].get<double>(), 0);
}

TEST_F(GptrunAutotuneTest, BadFlags) {
  CommandResult r = Run("x", "--autotune maybe", "bad");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--autotune must be off, cached or on, got 'maybe'"), std::string::npos)
      << r.err;
  r = RunCommand(std::string(GPTRUN_BIN) + " " + (*dir_ / "one.gptx").string() +
                     " --device emu --bench --steps 1 --profile-json " +
                     (*dir_ / "p.json").string(),
                 *dir_);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--profile-json"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gptc
