// compiler/perf/step_model.h against what an H100 measured: the artifacts
// of the commits the GPU ran (tests/compiler/perf/data, recorded by
// scripts/perf-fixture), their measured times from docs/PERFORMANCE.md. The
// model holds the attention kernels within 25%, the memory-bound kernels
// within 20% and the whole step within 10%; each run prints the error table
// docs/PERFORMANCE.md keeps.
#include "compiler/perf/step_model.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace gptc::perf {
namespace {

std::string Gunzip(const std::string& path) {
  std::string out;
  FILE* pipe = popen(("gzip -dc '" + path + "'").c_str(), "r");
  if (!pipe) return out;
  char buffer[1 << 16];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  pclose(pipe);
  return out;
}

// A fixture of scripts/perf-fixture as a StepProgram.
StepProgram LoadFixture(const std::string& name) {
  const std::string dir = std::string(GPTC_PERF_DATA) + "/" + name;
  std::ifstream in(dir + "/step.json");
  EXPECT_TRUE(in) << dir;
  const nlohmann::json step = nlohmann::json::parse(in);
  StepProgram p;
  auto kernels = ParsePtx(Gunzip(dir + "/kernels.ptx.gz"));
  EXPECT_TRUE(kernels.ok()) << kernels.status().message();
  p.kernels = std::move(*kernels);
  std::map<std::string, int32_t> index;
  for (size_t i = 0; i < p.kernels.size(); ++i) index[p.kernels[i].name] = static_cast<int32_t>(i);
  for (const auto& [name, registers] : step["registers"].items()) p.registers[name] = registers;
  p.tokens = step["tokens"];
  for (const nlohmann::json& j : step["launches"]) {
    StepLaunch l;
    l.name = j["name"];
    const std::string kind = j["kind"];
    if (kind == "kernel") {
      l.kind = StepLaunch::Kind::kKernel;
      l.kernel = index.at(l.name);
      l.shape.grid = {j["grid"][0], j["grid"][1], j["grid"][2]};
      l.shape.block = {j["block"][0], j["block"][1], j["block"][2]};
      l.shape.dynamic_shared_bytes = j["dynamic_smem"];
      for (const auto& b : j["param_bytes"]) l.shape.param_bytes.push_back(b);
    } else if (kind == "gemm") {
      l.kind = StepLaunch::Kind::kGemm;
      l.gemm = {j["m"], j["n"], j["k"], j["batch"], j["aux_bytes"], j.value("bytes", 0)};
    } else if (kind == "copy") {
      l.kind = StepLaunch::Kind::kCopy;
      l.bytes = j["bytes"];
    } else {
      l.kind = StepLaunch::Kind::kConstant;
    }
    p.launches.push_back(std::move(l));
  }
  return p;
}

// The mean estimate a call of the kernels named, over the step's launches.
double MeanUs(const StepProgram& p, const StepEstimate& e, const std::vector<std::string>& names) {
  double us = 0;
  int64_t calls = 0;
  for (size_t i = 0; i < p.launches.size(); ++i) {
    const StepLaunch& l = p.launches[i];
    if (l.kind != StepLaunch::Kind::kKernel) continue;
    if (std::find(names.begin(), names.end(), l.name) == names.end()) continue;
    us += e.launches[i].us;
    ++calls;
  }
  return calls ? us / calls : 0;
}

// What the H100 measured of a class of the step's kernels (docs/PERFORMANCE.md:
// the profile's mean per call, at the commit named), and the kernels
// (a call of the class may be several kernels: `parts` of them).
struct Measured {
  std::string what;
  double us;
  std::vector<std::string> kernels;
  int parts = 1;
  double tolerance;
};

TEST(StepModelTest, HoldsToWhatTheH100MeasuredAtC7187f1) {
  const StepProgram p = LoadFixture("c7187f1");
  auto e = EstimateStep(p, H100());
  ASSERT_TRUE(e.ok()) << e.status().message();
  const std::vector<Measured> measured = {
      {"attention forward (c7187f1)", 223, {"h_0_attn_attention_fusion"}, 1, 0.25},
      {"attention dk + dv (c7187f1)", 341, {"grad_h_11_attn_attention_14_fusion"}, 1, 0.25},
      {"attention dq (c7187f1)", 277, {"grad_h_11_attn_attention_13_fusion"}, 1, 0.25},
      {"softmax cross-entropy (6c03e57)", 2079, {"loss_softmax_cross_entropy_fusion"}, 1, 0.20},
      {"AdamW (6c03e57)", 1194, {"adamw_ln_f_bias_new_fusion"}, 1, 0.20},
      {"layer-norm forward (6c03e57)",
       70.5,
       {"h_0_ln_1_reduce_fusion", "h_0_ln_2_reduce_fusion"},
       1,
       0.20},
      {"layer-norm backward, rows + partials (6c03e57)",
       171,
       {"grad_h_11_ln_2_broadcast_4_fusion_rows", "grad_h_11_ln_2_broadcast_4_fusion_partials",
        "grad_h_11_ln_2_broadcast_4_fusion"},
       3,
       0.20},
      {"q, k, v copies (c7187f1)",
       31,
       {"h_0_attn_slice_fusion", "h_0_attn_slice_1_fusion", "h_0_attn_slice_2_fusion"},
       1,
       0.20},
      {"dq/dk/dv packing (c7187f1)", 133, {"grad_h_11_attn_slice_2_1_fusion"}, 1, 0.20},
  };
  std::printf("%-50s %10s %10s %7s\n", "kernel", "measured", "estimate", "ratio");
  for (const Measured& m : measured) {
    const double estimate = MeanUs(p, *e, m.kernels) * m.parts;
    const double ratio = estimate / m.us;
    std::printf("%-50s %10.1f %10.1f %7.2f\n", m.what.c_str(), m.us, estimate, ratio);
    EXPECT_NEAR(ratio, 1.0, m.tolerance) << m.what;
  }
  // The profile's sums at c7187f1: kernels 22.8 ms, gemms 20.9 ms.
  std::printf("%-50s %10.1f %10.1f %7.2f\n", "kernels, ms a step", 22.8, e->kernel_us / 1000,
              e->kernel_us / 22800);
  std::printf("%-50s %10.1f %10.1f %7.2f\n", "gemms, ms a step", 20.9, e->gemm_us / 1000,
              e->gemm_us / 20900);
  std::printf("%-50s %10.1f %10.2f %7.2f\n", "step, ms", 43.7, e->us() / 1000, e->us() / 43700);
  EXPECT_NEAR(e->kernel_us / 22800, 1.0, 0.10);
  EXPECT_NEAR(e->us() / 43700, 1.0, 0.10);
  EXPECT_EQ(p.tokens, 16384);
}

TEST(StepModelTest, TheForwardWithPipelinedTilesAtF381ac7) {
  const StepProgram p = LoadFixture("f381ac7-forward");
  auto e = EstimateStep(p, H100());
  ASSERT_TRUE(e.ok()) << e.status().message();
  const double estimate = MeanUs(p, *e, {"h_0_attn_attention_fusion"});
  std::printf("attention forward (f381ac7): measured 210.0, estimate %.1f, ratio %.2f\n", estimate,
              estimate / 210);
  EXPECT_NEAR(estimate / 210, 1.0, 0.25);
}

TEST(StepModelTest, TheGemmTableAtItsMeasuredShapes) {
  // The lm head's gemm (fitted) and the c_proj backward's DGELU gemm (not).
  EXPECT_NEAR(GemmMicroseconds({50304, 16384, 768, 1, 0}, H100()), 1747, 10);
  EXPECT_NEAR(GemmMicroseconds({3072, 16384, 768, 1, 16384 * 3072 * 2}, H100()) / 170, 1.0, 0.1);
}

}  // namespace
}  // namespace gptc::perf
