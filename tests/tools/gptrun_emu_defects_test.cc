// Seeded defects, each built honestly — a mutated plan, as a buggy buffer
// assignment, codegen or bucketing would write it — and run by gptrun
// --device emu, which must stop with one line naming the thunk, the kernel or
// gemm, the buffer and the defect (runtime/emu/memory_checker.h). The
// missing barrier is a hand-written kernel (tests/compiler/codegen/host_lowering_test.cc).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "compiler/program/container.h"
#include "runtime/data_loader.h"
#include "tests/testing/command.h"

namespace gptc {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ReadAll;

class GptrunEmuDefectTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::path(::testing::TempDir()) /
                        ("gptrun_emu_defects_" + std::to_string(getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 4000; ++i) tokens.push_back((i * 7 + (i / 13)) % 300);
    std::ofstream(*dir_ / "train_000.bin", std::ios::binary) << rt::EncodeShard(tokens);
    for (const auto& [name, flags] :
         {std::pair{"one", "--batch 2"}, std::pair{"dp2", "--batch 1 --dp 2"},
          std::pair{"zero", "--batch 1 --dp 2 --zero 1"}}) {
      const std::string cmd = std::string(GPTC_BIN) +
                              " compile --model gpt2-tiny --layers 1 --heads 2 --width 32 "
                              "--seq 16 --no-logits --emu " +
                              flags + " -o " + (*dir_ / (std::string(name) + ".gptx")).string() +
                              " > /dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  // The artifact `name`.gptx with its plan changed by `mutate` (the entry
  // train_step's plan), written as `out`.
  static void Mutate(
      const std::string& name, const std::string& out,
      const std::function<void(json& entry)>& mutate,
      const std::function<void(program::Manifest& manifest)>& mutate_manifest = nullptr) {
    const fs::path path = *dir_ / (name + ".gptx");
    StatusOr<program::Artifact> a = program::ReadArtifact(path.string());
    ASSERT_TRUE(a.ok()) << a.status().message();
    json plan = a->plan;
    for (json& entry : plan["entries"]) {
      if (entry["name"] == "train_step") mutate(entry);
    }
    program::Manifest manifest = a->manifest;
    if (mutate_manifest) mutate_manifest(manifest);
    std::vector<std::pair<std::string, std::string>> sections = a->sections;
    for (auto& [section, bytes] : sections) {
      if (section == "plan") bytes = plan.dump(1) + "\n";
      if (section == "manifest" && mutate_manifest)
        bytes = program::ToJson(manifest).dump(2) + "\n";
    }
    StatusOr<std::string> bytes = program::EncodeArtifact(sections);
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    std::ofstream(*dir_ / out, std::ios::binary) << *bytes;
  }

  // gptrun --device emu on `artifact` for one step; returns its exit status
  // and sets `output` (stdout and stderr).
  static int Run(const std::string& artifact, std::string* output, const std::string& env = "",
                 const std::string& log = "run.txt") {
    const std::string cmd = env + " " + GPTRUN_BIN + " " + (*dir_ / artifact).string() +
                            " --device emu --train '" + (*dir_ / "train_*.bin").string() +
                            "' --steps 1 > " + (*dir_ / log).string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    *output = ReadAll(*dir_ / log);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Two emulated ranks train `artifact` for a step: rank 1 in the background
  // (its output in TAG1.txt), rank 0 in the foreground; rank 0's exit code,
  // its output in `out`.
  static int RunTwoRanks(const std::string& artifact, const std::string& tag, std::string* out) {
    std::random_device rd;
    const std::string port = std::to_string(20000 + static_cast<int>(rd() % 20000));
    auto env = [&](int rank) {
      return "GPTC_DIST_TIMEOUT=30 RANK=" + std::to_string(rank) +
             " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
             " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port;
    };
    const fs::path& dir = *dir_;
    const std::string rank1 = env(1) + " " + GPTRUN_BIN + " " + (dir / artifact).string() +
                              " --device emu --train '" + (dir / "train_*.bin").string() +
                              "' --steps 1 > " + (dir / (tag + "1.txt")).string() + " 2>&1 &";
    EXPECT_EQ(std::system(("bash -c \"" + rank1 + "\"").c_str()), 0);
    return Run(artifact, out, env(0), tag + "0.txt");
  }

  // The one line gptrun printed when it failed, checked for `patterns`.
  static void ExpectOneLine(int rc, const std::string& output,
                            const std::vector<std::string>& patterns) {
    EXPECT_EQ(rc, 1) << output;
    const std::string last = output.substr(output.rfind('\n', output.size() - 2) + 1);
    std::printf("%s", last.c_str());
    EXPECT_TRUE(last.starts_with("gptrun: ")) << output;
    for (const std::string& p : patterns) {
      EXPECT_TRUE(std::regex_search(last, std::regex(p))) << "'" << p << "' not in: " << last;
    }
  }

  static fs::path* dir_;
};

fs::path* GptrunEmuDefectTest::dir_ = nullptr;

// The thunks of instructions with one kernel, whose results a later thunk reads.
std::vector<size_t> SingleKernelThunks(const json& entry) {
  const json& thunks = entry["thunks"];
  std::vector<size_t> out;
  for (size_t i = 0; i + 1 < thunks.size(); ++i) {
    const json& t = thunks[i];
    if (t["kind"] != "kernel") continue;
    const bool alone = (i == 0 || thunks[i - 1].value("fusion", "") != t["fusion"]) &&
                       thunks[i + 1].value("fusion", "") != t["fusion"];
    if (alone) out.push_back(i);
  }
  return out;
}

// Buffer ids of the entry's inputs and outputs (their slots must stay put).
std::set<int64_t> SlotBuffers(const json& entry) {
  std::set<int64_t> out;
  for (const char* key : {"inputs", "outputs"}) {
    for (const json& s : entry[key]) out.insert(s["buffer"].get<int64_t>());
  }
  return out;
}

// Every slice of a thunk (kernel args, gemm matrices, copy and all-reduce ends).
std::vector<json*> Slices(json& t) {
  std::vector<json*> out;
  if (t.contains("args")) {
    for (json& a : t["args"]) out.push_back(&a);
  }
  for (const char* key : {"a", "b", "c", "d", "bias", "aux", "src", "dst", "in", "out"}) {
    if (t.contains(key) && t[key].is_object()) out.push_back(&t[key]);
  }
  return out;
}

// Moves or resizes buffer `id` everywhere the entry names it.
// Buffer ids some thunk other than a kernel reads or writes (a gemm's
// matrices): a plan whose gemm slice is short is refused at load, before any
// kernel runs.
std::set<int64_t> NonKernelBuffers(json& entry) {
  std::set<int64_t> out;
  for (json& t : entry["thunks"]) {
    if (t["kind"] == "kernel") continue;
    for (json* s : Slices(t)) out.insert(s->value("buffer", -1));
  }
  return out;
}

void Reslice(json& entry, int64_t id, int64_t offset, int64_t size) {
  entry["buffers"][id]["offset"] = offset;
  entry["buffers"][id]["size"] = size;
  for (json& t : entry["thunks"]) {
    for (json* s : Slices(t)) {
      if (s->value("buffer", -1) == id) (*s)["offset"] = offset, (*s)["size"] = size;
    }
  }
}

TEST_F(GptrunEmuDefectTest, TheUnchangedArtifactsRun) {
  std::string out;
  EXPECT_EQ(Run("one.gptx", &out), 0) << out;
}

// A block's static and dynamic shared memory above 48 KiB
// together need the opt-in (cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_
// BYTES)) even when the dynamic part alone is under 48 KiB. A kernel given
// 40000 bytes of static shared memory (what the emulated driver reports,
// as ptxas would) is launched with 16 KiB of dynamic: the runtime must raise
// the limit, which the emulated driver enforces as CUDA does.
TEST_F(GptrunEmuDefectTest, StaticPlusDynamicSharedMemoryOver48KiBTakesTheOptIn) {
  std::string kernel;
  Mutate(
      "one", "smem.gptx",
      [&](json& entry) {
        for (json& t : entry["thunks"]) {
          if (t["kind"] != "kernel") continue;
          t["dynamic_smem"] = 16 << 10;
          kernel = t["name"];
          return;
        }
      },
      [&](program::Manifest& manifest) {
        for (program::HostKernelRecord& k : manifest.emu->kernels) {
          if (k.entry == "train_step" && k.name == kernel) k.static_smem = 40000;
        }
      });
  ASSERT_FALSE(kernel.empty());
  std::string out;
  EXPECT_EQ(Run("smem.gptx", &out), 0) << out;
}

TEST_F(GptrunEmuDefectTest, AGridOneBlockShortLeavesItsResultIncomplete) {
  std::string kernel;
  Mutate("one", "short.gptx", [&](json& entry) {
    for (size_t i : SingleKernelThunks(entry)) {
      json& t = entry["thunks"][i];
      if (t["grid"][0].get<int64_t>() < 2) continue;
      t["grid"][0] = t["grid"][0].get<int64_t>() - 1;
      kernel = t["name"];
      return;
    }
  });
  ASSERT_FALSE(kernel.empty());
  std::string out;
  const int rc = Run("short.gptx", &out);
  ExpectOneLine(rc, out,
                {"thunk \\d+ \\(kernel " + kernel, "its result %\\S+ is incomplete",
                 "bytes \\[\\d+, \\d+\\) hold what .* wrote", "is its grid too small"});
}

TEST_F(GptrunEmuDefectTest, AReadOfAnUnwrittenSlotNamesTheBuffer) {
  std::string removed;
  Mutate("one", "unwritten.gptx", [&](json& entry) {
    const size_t i = SingleKernelThunks(entry).front();
    removed = entry["thunks"][i]["fusion"];
    entry["thunks"].erase(i);
    // The gemms name their fallback kernels by index (Note [epilogue fallback]).
    for (json& t : entry["thunks"]) {
      if (t.contains("fallback_kernel") && t["fallback_kernel"].get<size_t>() > i) {
        t["fallback_kernel"] = t["fallback_kernel"].get<size_t>() - 1;
      }
    }
  });
  std::string out;
  const int rc = Run("unwritten.gptx", &out);
  ExpectOneLine(rc, out,
                {"thunk \\d+ \\((kernel|gemm) ",
                 "reads (operand \\d+|A|B|C|bias|aux|src|in) %" +
                     std::regex_replace(removed, std::regex("\\."), "\\."),
                 "which nothing has written", "an unwritten slot"});
}

TEST_F(GptrunEmuDefectTest, AStorePastItsSliceIsStoppedBeforeIt) {
  std::string kernel;
  Mutate("one", "past.gptx", [&](json& entry) {
    const std::set<int64_t> slots = SlotBuffers(entry);
    const std::set<int64_t> gemm_buffers = NonKernelBuffers(entry);
    for (size_t i : SingleKernelThunks(entry)) {
      json& t = entry["thunks"][i];
      const json& result = t["args"][t["args"].size() - 1];
      const int64_t id = result["buffer"];
      if (slots.contains(id) || gemm_buffers.contains(id) || result["size"].get<int64_t>() < 64) {
        continue;
      }
      // A buffer assignment that sized the result one f32 too short.
      Reslice(entry, id, result["offset"], result["size"].get<int64_t>() - 4);
      kernel = t["name"];
      return;
    }
  });
  ASSERT_FALSE(kernel.empty());
  std::string out;
  const int rc = Run("past.gptx", &out);
  ExpectOneLine(rc, out,
                {"thunk \\d+ \\(kernel " + kernel, "kernel " + kernel + ": block",
                 "store of \\d+ bytes at arena of train_step \\+ \\d+",
                 "outside every argument of the launch",
                 "(bytes past the end of|past its end).* arg \\d+ \\(%|arg \\d+ "
                 "\\(%.*past its end"});
}

TEST_F(GptrunEmuDefectTest, TwoLiveBuffersSharingMemoryAreCaught) {
  Mutate("one", "overlap.gptx", [&](json& entry) {
    const std::set<int64_t> slots = SlotBuffers(entry);
    json& thunks = entry["thunks"];
    // Buffer x, written by a kernel at i and read at j; buffer y written by
    // a kernel between them: y is put where x lives.
    for (size_t i : SingleKernelThunks(entry)) {
      const json& xa = thunks[i]["args"][thunks[i]["args"].size() - 1];
      const int64_t x = xa["buffer"];
      if (slots.contains(x)) continue;
      size_t j = 0;
      for (size_t k = i + 2; k < thunks.size() && j == 0; ++k) {
        for (json* s : Slices(thunks[k])) {
          if (s->value("buffer", -1) == x) j = k;
        }
      }
      for (size_t k = i + 1; k < j; ++k) {
        if (thunks[k]["kind"] != "kernel") continue;
        const json& ya = thunks[k]["args"][thunks[k]["args"].size() - 1];
        const int64_t y = ya["buffer"];
        if (y == x || slots.contains(y)) continue;
        Reslice(entry, y, xa["offset"], ya["size"]);
        return;
      }
    }
    FAIL() << "no pair of buffers to overlap";
  });
  std::string out;
  const int rc = Run("overlap.gptx", &out);
  ExpectOneLine(
      rc, out,
      {"thunk \\d+ \\((kernel|gemm) ",
       "reads \\w+ \\d* ?%\\S+ \\(written by "
       "entry train_step thunk \\d+",
       "hold what entry train_step thunk \\d+ .* wrote", "shares memory with another live buffer"});
}

TEST_F(GptrunEmuDefectTest, AWrongLeadingDimensionIsRefusedNamingTheGemm) {
  std::string gemm;
  Mutate("one", "ld.gptx", [&](json& entry) {
    for (json& t : entry["thunks"]) {
      if (t["kind"] != "gemm") continue;
      json& a = t["descriptor"]["a"];
      a["ld"] = a["ld"].get<int64_t>() + 8;
      gemm = t["name"];
      return;
    }
  });
  ASSERT_FALSE(gemm.empty());
  std::string out;
  const int rc = Run("ld.gptx", &out);
  ExpectOneLine(rc, out,
                {"thunk \\d+ \\(gemm %" + std::regex_replace(gemm, std::regex("\\."), "\\."),
                 "matrix a spans \\d+ bytes, its slice has \\d+"});
}

TEST_F(GptrunEmuDefectTest, AGradientReadBeforeItsBucketsWaitIsCaught) {
  Mutate("dp2", "early.gptx", [&](json& entry) {
    ASSERT_FALSE(entry["buckets"].empty());
    // The plan forgets that a thunk reads the bucket's results: it waits
    // only at the end of the step.
    for (json& b : entry["buckets"]) {
      if (b["wait_before"].get<int64_t>() < static_cast<int64_t>(entry["thunks"].size())) {
        b["wait_before"] = entry["thunks"].size();
        return;
      }
    }
    FAIL() << "every bucket is waited for at the end already";
  });
  std::string out;
  const int rc = RunTwoRanks("early.gptx", "r", &out);
  ExpectOneLine(rc, out,
                {"thunk \\d+ \\((kernel|gemm) ",
                 "while entry train_step thunk \\d+ "
                 "\\(all_reduce %\\S+.* is in flight",
                 "before its bucket's wait"});
}

// ZeRO-1: the plan forgets that a thunk reads the parameters an all-gather
// bucket gathers (the updated shards of every rank): the emulator catches
// the read of the result still in flight.
TEST_F(GptrunEmuDefectTest, AGatheredParameterReadBeforeItsBucketsWaitIsCaught) {
  Mutate("zero", "gather.gptx", [&](json& entry) {
    const json& thunks = entry["thunks"];
    for (json& b : entry["buckets"]) {
      const json& first = thunks[b["members"][0].get<size_t>()];
      if (first.value("collective", "") == "all_gather" &&
          b["wait_before"].get<int64_t>() < static_cast<int64_t>(thunks.size())) {
        b["wait_before"] = thunks.size();
        return;
      }
    }
    FAIL() << "no all-gather bucket is waited for before the end";
  });
  std::string out;
  const int rc = RunTwoRanks("gather.gptx", "g", &out);
  ExpectOneLine(rc, out,
                {"thunk \\d+ \\(kernel ", "reads operand \\d+ %zero\\.\\S+\\.gathered",
                 "while entry train_step thunk \\d+ \\(all_gather %zero\\.\\S+\\.gathered.* is in "
                 "flight",
                 "before its bucket's wait"});
}

// Note [epilogue fallback] (compiler/program/plan.h): a GPU whose cuBLASLt has
// no algorithm for a bias-gradient epilogue must still train. The emulated
// cuBLASLt refuses the epilogues named in $GPTC_EMU_REFUSE_EPILOGUES.

// The gemm thunks of the train step with a BGRAD epilogue, by index.
std::vector<size_t> BiasGradientGemms(const json& entry) {
  std::vector<size_t> out;
  for (size_t i = 0; i < entry["thunks"].size(); ++i) {
    const json& t = entry["thunks"][i];
    if (t["kind"] == "gemm" &&
        t["descriptor"]["epilogue"].get<std::string>().starts_with("CUBLASLT_EPILOGUE_BGRAD")) {
      out.push_back(i);
    }
  }
  return out;
}

TEST_F(GptrunEmuDefectTest, EveryBiasGradientGemmCarriesItsFallbackKernel) {
  StatusOr<program::Artifact> a = program::ReadArtifact((*dir_ / "one.gptx").string());
  ASSERT_TRUE(a.ok()) << a.status().message();
  for (const json& entry : a->plan["entries"]) {
    if (entry["name"] != "train_step") continue;
    const std::vector<size_t> gemms = BiasGradientGemms(entry);
    ASSERT_FALSE(gemms.empty());
    for (size_t i : gemms) {
      // Note [epilogue fallback]: the gemm names its kernel.
      const json& g = entry["thunks"][i];
      ASSERT_TRUE(g.contains("fallback_kernel")) << g.dump();
      const json& k = entry["thunks"][g["fallback_kernel"].get<size_t>()];
      EXPECT_EQ(k["kind"], "kernel");
      EXPECT_TRUE(k.value("fallback", false)) << k.dump();
      EXPECT_EQ(k["fusion"], entry["thunks"][i]["name"]);
      // Its result is the gemm's bias slice.
      EXPECT_EQ(k["args"].back()["offset"], entry["thunks"][i]["bias"]["offset"]);
    }
  }
}

TEST_F(GptrunEmuDefectTest, ARefusedEpilogueFallsBackToItsKernel) {
  auto run = [&](const std::string& env, const std::string& name) {
    const std::string cmd = env + " " + GPTRUN_BIN + " " + (*dir_ / "one.gptx").string() +
                            " --device emu --train '" + (*dir_ / "train_*.bin").string() +
                            "' --steps 3 --seed 2 --log " + (*dir_ / (name + ".jsonl")).string() +
                            " > " + (*dir_ / (name + ".txt")).string() + " 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << ReadAll(*dir_ / (name + ".txt"));
    std::vector<double> losses;
    std::ifstream in(*dir_ / (name + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.value("event", "") == "step") losses.push_back(j["loss"]);
    }
    return losses;
  };
  const std::vector<double> fused = run("", "fused");
  const std::vector<double> fallen =
      run("GPTC_EMU_REFUSE_EPILOGUES=CUBLASLT_EPILOGUE_BGRADA,CUBLASLT_EPILOGUE_BGRADB,"
          "CUBLASLT_EPILOGUE_BIAS,CUBLASLT_EPILOGUE_GELU,CUBLASLT_EPILOGUE_GELU_BIAS,"
          "CUBLASLT_EPILOGUE_GELU_AUX,CUBLASLT_EPILOGUE_GELU_AUX_BIAS,CUBLASLT_EPILOGUE_DGELU,"
          "CUBLASLT_EPILOGUE_DGELU_BGRAD",
          "fallen");
  const std::string out = ReadAll(*dir_ / "fallen.txt");
  // One warning per gemm, naming it, the epilogue and the kernel.
  StatusOr<program::Artifact> a = program::ReadArtifact((*dir_ / "one.gptx").string());
  ASSERT_TRUE(a.ok());
  // Every gemm with an epilogue, in every entry gptrun loads; among them the
  // GELU and its backward (Note [GELU epilogues] in compiler/analysis/gelu_epilogue.h).
  size_t gemms = 0;
  std::set<std::string> epilogues;
  for (const json& entry : a->plan["entries"]) {
    for (const json& t : entry["thunks"]) {
      if (t["kind"] != "gemm" || t["descriptor"]["epilogue"] == "CUBLASLT_EPILOGUE_DEFAULT")
        continue;
      ++gemms;
      epilogues.insert(t["descriptor"]["epilogue"].get<std::string>());
    }
  }
  EXPECT_TRUE(epilogues.contains("CUBLASLT_EPILOGUE_GELU_AUX_BIAS"));
  EXPECT_TRUE(epilogues.contains("CUBLASLT_EPILOGUE_DGELU"));
  const std::regex warning(
      "warning: thunk \\d+ \\(gemm %\\S+, [^)]*\\): cuBLASLt has no algorithm for "
      "CUBLASLT_EPILOGUE_\\w+ here \\[[^\\]]*\\]; it runs without the epilogue, and kernel "
      "\\S+ (computes the bias gradient|applies it)");
  const auto begin = std::sregex_iterator(out.begin(), out.end(), warning);
  EXPECT_EQ(static_cast<size_t>(std::distance(begin, std::sregex_iterator())), gemms) << out;
  EXPECT_EQ(ReadAll(*dir_ / "fused.txt").find("warning:"), std::string::npos);
  // The same training (the bias gradients summed, the biases added and the
  // GELU and its gradient computed by kernels instead of epilogues), with
  // every check of the emulator on.
  ASSERT_EQ(fused.size(), 3u);
  ASSERT_EQ(fallen.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(fallen[i], fused[i], 1e-5 * fused[i]) << "step " << i + 1;
  }
}

TEST_F(GptrunEmuDefectTest, AFallbackKernelNoGemmNamesIsRefused) {
  std::string kernel;
  Mutate("one", "lost.gptx", [&](json& entry) {
    for (json& t : entry["thunks"]) {
      if (t["kind"] == "gemm" && t.contains("fallback_kernel")) {
        kernel = entry["thunks"][t["fallback_kernel"].get<size_t>()]["name"];
        t.erase("fallback_kernel");
        return;
      }
    }
  });
  ASSERT_FALSE(kernel.empty());
  std::string out;
  const int rc = Run("lost.gptx", &out);
  ExpectOneLine(rc, out, {"thunk \\d+ \\(" + kernel + "\\) is a fallback kernel named by 0 gemms"});
}

TEST_F(GptrunEmuDefectTest, AGemmNamingAnotherKernelIsRefused) {
  std::string gemm;
  Mutate("one", "wrong.gptx", [&](json& entry) {
    for (size_t i = 0; i < entry["thunks"].size(); ++i) {
      json& t = entry["thunks"][i];
      if (t["kind"] == "gemm" && t.contains("fallback_kernel") && i > 0 &&
          !entry["thunks"][i - 1].value("fallback", false)) {
        gemm = t["name"];
        t["fallback_kernel"] = i - 1;  // the thunk before it, no fallback
        return;
      }
    }
  });
  ASSERT_FALSE(gemm.empty());
  std::string out;
  const int rc = Run("wrong.gptx", &out);
  ExpectOneLine(rc, out,
                {"thunk \\d+ \\(" + gemm +
                 "\\) names thunk \\d+ as its fallback kernel, which is not a fallback kernel of"});
}

}  // namespace
}  // namespace gptc
