// gpt2-124m — the real widths, heads and vocabulary, at batch 1, seq 128 —
// one full train step on the emulated device against the CPU device: the
// loss, the gradient norm and every parameter after the update; twice on the
// emulated device, the second with every gemm epilogue slow
// ($GPTC_EMU_SLOW_EPILOGUES), so that the autotuning (Note [autotune paths]
// in runtime/gpu/autotune.h) runs each such gemm without its epilogue and
// the artifact's fallback kernel does the epilogue's work. About five
// minutes and 14 GB on the 2-core machine, so it carries the `slow` label:
// `scripts/test --slow` runs it, the default run leaves it out. And one
// layer at the full length with the attention on wgmma.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data_loader.h"
#include "runtime/safetensors.h"
#include "tests/testing/command.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;
using testing::ReadAll;

constexpr double kLr = 1e-3;

// The first step event of a gptrun --log file.
nlohmann::json FirstStep(const fs::path& log) {
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("event", "") == "step") return j;
  }
  return nullptr;
}

// The first step of `run` (an emulated run's log and checkpoint in `dir`)
// against the CPU device's.
void ExpectFollowsCpu(const std::filesystem::path& dir, const std::string& run);

// A fresh directory `name` holding a shard of `count` tokens.
fs::path RunDirectory(const std::string& name, int count) {
  const fs::path dir = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<int32_t> tokens;
  for (int i = 0; i < count; ++i) tokens.push_back((i * 7919 + (i / 13)) % 50257);
  std::ofstream(dir / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
  return dir;
}

// gptc compile --model gpt2-124m `flags` --emu into dir/m.gptx, then one
// train step of it for each of `runs` ("cpu" on the CPU device, any other
// on the emulated one, after `env` when given), its log in dir/RUN.jsonl and
// its checkpoint in dir/RUN. Each run has a cache directory of its own (an
// autotune cache), where gptc recorded no trust in the emulator library:
// --trust-artifact (Note [trusted emulator libraries]).
void CompileAndStep(const fs::path& dir, const std::string& flags,
                    const std::vector<std::pair<std::string, std::string>>& runs) {
  const std::string compile = std::string(GPTC_BIN) + " compile --model gpt2-124m " + flags +
                              " --emu -o " + (dir / "m.gptx").string() + " > /dev/null";
  ASSERT_EQ(std::system(compile.c_str()), 0) << compile;
  for (const auto& [run, env] : runs) {
    const std::string device = run == "cpu" ? "cpu" : "emu";
    const std::string cmd =
        env + "XDG_CACHE_HOME=" + (dir / ("cache-" + run)).string() + " " +
        std::string(GPTRUN_BIN) + " " + (dir / "m.gptx").string() + " --device " + device +
        (device == "cpu" ? " --cpu-max-params 200000000" : " --trust-artifact") + " --train '" +
        (dir / "train_*.bin").string() + "' --steps 1 --lr " + std::to_string(kLr) +
        " --seed 3 --log " + (dir / (run + ".jsonl")).string() + " --ckpt-dir " +
        (dir / run).string() + " > " + (dir / (run + ".txt")).string() + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadAll(dir / (run + ".txt"));
    std::printf("%s", ReadAll(dir / (run + ".txt")).c_str());
  }
}

TEST(Emu124mTest, OneStepFollowsTheCpuDevice) {
  const fs::path dir = RunDirectory("emu_124m_test", 4000);
  const std::string slow =
      "GPTC_EMU_SLOW_EPILOGUES=CUBLASLT_EPILOGUE_BIAS,CUBLASLT_EPILOGUE_GELU_AUX_BIAS,"
      "CUBLASLT_EPILOGUE_DGELU,CUBLASLT_EPILOGUE_BGRADA,CUBLASLT_EPILOGUE_BGRADB ";
  ASSERT_NO_FATAL_FAILURE(
      CompileAndStep(dir, "--batch 1 --seq 128", {{"emu", ""}, {"fallback", slow}, {"cpu", ""}}));
  // Every gemm with an epilogue took the plain gemm and its kernel.
  EXPECT_EQ(ReadAll(dir / "fallback.txt").find(" 0 of them the gemm without its epilogue"),
            std::string::npos);
  for (const std::string run : {"emu", "fallback"}) {
    SCOPED_TRACE(run);
    ExpectFollowsCpu(dir, run);
  }
  fs::remove_all(dir);
}

// One gpt2-124m layer at its full length (batch 1, seq 1024) with the
// attention on wgmma (--attention-mma wgmma): 16 query tiles of 64 rows a
// head, the forward's overlapped pipeline over up to 16 key blocks, against
// the CPU device, every check on. About 90 s and 3 GB.
TEST(Emu124mTest, OneLayerAtFullLengthOnWgmmaFollowsTheCpuDevice) {
  const fs::path dir = RunDirectory("emu_124m_wgmma_test", 8000);
  ASSERT_NO_FATAL_FAILURE(CompileAndStep(
      dir, "--layers 1 --batch 1 --seq 1024 --attention-mma wgmma", {{"wgmma", ""}, {"cpu", ""}}));
  EXPECT_NE(ReadAll(dir / "wgmma.txt").find("checks on"), std::string::npos);
  ExpectFollowsCpu(dir, "wgmma");
  fs::remove_all(dir);
}

void ExpectFollowsCpu(const fs::path& dir, const std::string& run) {
  const nlohmann::json emu = FirstStep(dir / (run + ".jsonl"));
  const nlohmann::json cpu = FirstStep(dir / "cpu.jsonl");
  ASSERT_TRUE(emu.is_object() && cpu.is_object());
  const double loss_emu = emu["loss"], loss_cpu = cpu["loss"];
  const double norm_emu = emu["norm"], norm_cpu = cpu["norm"];
  std::printf("loss emu %.7f cpu %.7f; grad norm emu %.5f cpu %.5f\n", loss_emu, loss_cpu, norm_emu,
              norm_cpu);
  EXPECT_NEAR(loss_emu, loss_cpu, 1e-3 * std::abs(loss_cpu));
  EXPECT_NEAR(norm_emu, norm_cpu, 1e-2 * std::abs(norm_cpu));

  // After one AdamW step every parameter moved by about lr: each within 3 lr
  // of the CPU's, and at most 1% of a tensor's values more than lr apart (a
  // bf16 gradient's sign near zero may differ).
  auto params = [&](const std::string& device) {
    std::map<std::string, std::vector<float>> out;
    StatusOr<rt::SafeTensors> model =
        rt::ReadSafeTensors((dir / device / "step_000001" / "model.safetensors").string());
    EXPECT_TRUE(model.ok()) << model.status().message();
    if (model.ok()) {
      for (const rt::SafeTensor& t : model->tensors) out[t.name] = rt::F32Values(t);
    }
    return out;
  };
  const auto want = params("cpu");
  const auto got = params(run);
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    const std::vector<float>& g = got.at(name);
    ASSERT_EQ(g.size(), w.size()) << name;
    // The key bias's gradient is zero (softmax is invariant to it): AdamW
    // moves it by the sign of rounding noise on either device.
    const bool key_bias = name.ends_with("attn.c_attn.bias");
    double worst = 0;
    int64_t far = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (key_bias && i >= g.size() / 3 && i < 2 * g.size() / 3) continue;
      const double d = std::abs(static_cast<double>(g[i]) - w[i]);
      worst = std::max(worst, d);
      if (d > kLr) ++far;
    }
    EXPECT_LT(worst, 3 * kLr) << name;
    EXPECT_LE(far, static_cast<int64_t>(0.01 * static_cast<double>(g.size())) + 1)
        << name << ": worst " << worst;
  }
}

}  // namespace
}  // namespace gptc
