// What the GPU runtime says before it runs anything: targets against compute
// capabilities, memory that does not fit, the cuBLASLt search, no GPU, and
// the profile table. None of these needs a GPU.
#include "runtime/gpu/device.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/gpu/cublaslt_api.h"
#include "runtime/gpu/gemm.h"
#include "runtime/gpu/gpu_trainer.h"
#include "runtime/gpu/profile.h"
#include "runtime/gpu/target.h"
#include "tests/runtime/gpu/gpu_test_util.h"

namespace gptc::rt::gpu {
namespace {

TEST(TargetTest, Parse) {
  StatusOr<Target> t = ParseTarget("sm_90a");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->capability, (ComputeCapability{9, 0}));
  EXPECT_TRUE(t->arch_specific);
  t = ParseTarget("sm_80");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->capability, (ComputeCapability{8, 0}));
  EXPECT_FALSE(t->arch_specific);
  EXPECT_EQ(ParseTarget("compute_90").status().message(),
            "target 'compute_90' is not sm_XY or sm_XYa");
}

TEST(TargetTest, Runs) {
  EXPECT_TRUE(CheckTargetRuns("sm_90a", {9, 0}, "H100", "a.gptx").ok());
  EXPECT_TRUE(CheckTargetRuns("sm_80", {9, 0}, "H100", "a.gptx").ok());  // PTX JIT
  EXPECT_EQ(CheckTargetRuns("sm_90a", {8, 0}, "NVIDIA A100", "a.gptx").message(),
            "a.gptx: compiled for sm_90a, which runs only on compute capability 9.0; NVIDIA A100 "
            "is 8.0: recompile with gptc compile --target sm_80");
  EXPECT_EQ(CheckTargetRuns("sm_90", {8, 6}, "RTX 3090", "a.gptx").message(),
            "a.gptx: compiled for sm_90 (compute capability 9.0), RTX 3090 is only 8.6: "
            "recompile with gptc compile --target sm_86");
  EXPECT_TRUE(CubinLoads("sm_90a", {9, 0}));
  EXPECT_FALSE(CubinLoads("sm_80", {9, 0}));
}

TEST(MemoryTest, TooLittleSaysWhatToChange) {
  DeviceInfo d;
  d.name = "NVIDIA H100 80GB HBM3";
  d.free_bytes = int64_t{10} << 30;
  d.total_bytes = int64_t{80} << 30;
  std::vector<MemoryNeed> needs = {{"arena of train_step", int64_t{12} << 30, true},
                                   {"cuBLASLt workspace", 32 << 20}};
  Status s = CheckMemoryFits(needs, 512 << 20, d, "big.gptx");
  EXPECT_EQ(s.message(),
            "big.gptx: needs 12.53 GiB of device memory (arena of train_step 12.00 GiB, cuBLASLt "
            "workspace 32.00 MiB, 512.00 MiB reserved for CUDA and cuBLASLt), NVIDIA H100 80GB "
            "HBM3 has 10.00 GiB free of 80.00 GiB: compile with --remat auto --memory-budget "
            "10166992896B (or a smaller --batch, or --no-logits; gptc compile)");
  d.free_bytes = int64_t{13} << 30;
  EXPECT_TRUE(CheckMemoryFits(needs, 512 << 20, d, "big.gptx").ok());
}

TEST(CublasLtTest, SearchOrder) {
  std::vector<std::string> c = CublasLtCandidates();
  ASSERT_GE(c.size(), 2u);
  auto at = [&](const std::string& s) { return std::find(c.begin(), c.end(), s) - c.begin(); };
  EXPECT_LT(at("libcublasLt.so.13"), at("/usr/local/cuda/lib64/libcublasLt.so.13"));
  EXPECT_LT(at("/usr/local/cuda/lib64/libcublasLt.so.13"), static_cast<long>(c.size()));
}

TEST(CublasLtTest, MissingLibraryListsWhereItLooked) {
  StatusOr<CublasLtApi> lt = LoadCublasLt({"/nowhere/libcublasLt.so.13", "libnothere.so.13"});
  ASSERT_FALSE(lt.ok());
  EXPECT_EQ(lt.status().message(),
            "cuBLASLt not found: libcublasLt.so.13 could not be loaded from "
            "/nowhere/libcublasLt.so.13, libnothere.so.13 (install the CUDA 13 libraries or "
            "pip's nvidia-cublas, or set GPTC_CUBLASLT=/path/to/libcublasLt.so.13)");
}

TEST(CublasLtTest, LoadsWhereInstalled) {
  const char* path = "/usr/local/cuda/lib64/libcublasLt.so.13";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not installed";
  StatusOr<CublasLtApi> lt = LoadCublasLt({path});
  ASSERT_TRUE(lt.ok()) << lt.status().message();
  EXPECT_EQ(lt->path, path);
  EXPECT_GE(lt->version, 130000u);  // 13.x
  EXPECT_NE(lt->StatusText(CUBLAS_STATUS_NOT_SUPPORTED).find("CUBLAS_STATUS_NOT_SUPPORTED"),
            std::string::npos);
}

// cuBLASLt checks every descriptor attribute (type, size) when it is set,
// without a GPU: build the descriptors of every gemm of the tiny plan.
TEST(CublasLtTest, EveryTinyGemmDescriptorBuilds) {
  StatusOr<const CublasLtApi*> lt = GetCublasLt();
  if (!lt.ok()) GTEST_SKIP() << lt.status().message();
  std::string why;
  const testing::Tiny* tiny = testing::LoadTiny(&why);
  ASSERT_NE(tiny, nullptr) << why;
  char fake[256];  // never dereferenced: descriptors only hold the pointers
  int built = 0;
  for (const EntryPlan& plan : tiny->plans) {
    for (const Thunk& t : plan.thunks) {
      if (t.kind() != ThunkKind::kGemm) continue;
      const auto& g = std::get<GemmThunk>(t.body);
      GemmPointers p{.a = fake,
                     .b = fake,
                     .c = fake,
                     .d = fake,
                     .bias = fake,
                     .aux = fake,
                     .workspace = fake,
                     .workspace_bytes = 32 << 20};
      StatusOr<std::unique_ptr<GemmRunner>> r =
          GemmRunner::Prepare(**lt, g.config, p, t.Describe());
      EXPECT_TRUE(r.ok()) << r.status().message();
      EXPECT_FALSE(r.ok() && (*r)->Run(nullptr).ok()) << "ran without an algorithm";
      ++built;
    }
  }
  EXPECT_GT(built, 0);
}

TEST(NoGpuTest, SaysThereIsNone) {
  if (CountDevices() > 0) GTEST_SKIP() << "a GPU is present";
  Status s = CheckGpuAvailable();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.message().starts_with("no GPU: ")) << s.message();
  EXPECT_EQ(OpenDevice(0).status().message(), s.message());
  std::printf("without a GPU: %s\n", s.message().c_str());
}

TEST(NoGpuTest, TrainerRefusesIncompleteArtifactsBeforeLookingForAGpu) {
  std::string why;
  const testing::Tiny* tiny = testing::LoadTiny(&why);
  ASSERT_NE(tiny, nullptr) << why;
  program::Artifact a = tiny->artifact;
  a.manifest.complete = false;
  StatusOr<std::unique_ptr<GpuTrainer>> t =
      GpuTrainer::Create(a, "t.gptx", &tiny->loaded.program, 0, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "t.gptx: the artifact is incomplete (complete:false: some instructions have no kernel "
            "yet, see gptc inspect); the GPU device cannot run it, --device cpu can");
  if (CountDevices() > 0) return;
  a.manifest.complete = true;
  t = GpuTrainer::Create(a, "t.gptx", &tiny->loaded.program, 0, {});
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(t.status().message().starts_with("no GPU: ")) << t.status().message();
}

TEST(ProfileTest, AggregatesByKindAndName) {
  ProfileTable p;
  for (int step = 0; step < 2; ++step) {
    std::vector<ThunkTime> run = {{"kernel", "ln_fusion", "h.0.ln_1", 1.0},
                                  {"gemm", "h.0.mlp.c_fc.dot.fusion", "h.0.mlp.c_fc", 6.0},
                                  {"kernel", "ln_fusion", "h.0.ln_2", 1.0},
                                  {"copy", "donation.out1.in2", "", 2.0}};
    p.AddRun(run);
  }
  EXPECT_EQ(p.runs(), 2);
  EXPECT_DOUBLE_EQ(p.total_ms(), 20.0);
  EXPECT_DOUBLE_EQ(p.KindMsPerRun("kernel"), 2.0);
  EXPECT_DOUBLE_EQ(p.KindMsPerRun("gemm"), 6.0);
  const std::string table = p.Format(3);
  EXPECT_NE(table.find("profile: 2 steps, 10.000 ms/step in 4 thunks"), std::string::npos) << table;
  EXPECT_NE(table.find("by kind: | gemm 6.000 ms (60.0%, 1 a step) | copy 2.000 ms (20.0%, 1 a "
                       "step) | kernel 2.000 ms (20.0%, 2 a step)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("top 3 of 3 by time:"), std::string::npos) << table;
  EXPECT_NE(table.find("kernel ln_fusion"), std::string::npos) << table;
  EXPECT_NE(table.find("gemm h.0.mlp.c_fc.dot.fusion"), std::string::npos) << table;
  EXPECT_NE(table.find("h.0.ln_1,h.0.ln_2"), std::string::npos) << table;
  EXPECT_EQ(ProfileTable().Format(), "profile: no profiled steps");
}

}  // namespace
}  // namespace gptc::rt::gpu
