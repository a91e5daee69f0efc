// The manifest's codec (compiler/program/manifest.h): ToJson then FromJson
// gives the manifest back, field for field; a missing or ill-typed field is
// an error that names it.
#include "compiler/program/manifest.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

namespace gptc::program {
namespace {

using nlohmann::json;

Manifest Full() {
  Manifest m{
      .format_version = 3,
      .gptc_version = "0.1.0",
      .target = "sm_90a",
      .complete = true,
      .model = {.name = "gpt2-tiny", .layers = 2, .heads = 4, .width = 64, .positions = 1024},
      .flags = {.batch = 4,
                .seq = 64,
                .grad_accum = 2,
                .world_size = 8,
                .precision = "bf16",
                .remat = "dots",
                .remat_layers = {"dots", "dots"},
                .codegen = true,
                .adamw = {.beta1 = 0.8,
                          .beta2 = 0.99,
                          .eps = 1e-6,
                          .weight_decay = 0.0,
                          .clip_norm = -1}},
      .kernels = {{.entry = "accumulate", .name = "k1", .ptx_offset = 0, .ptx_size = 9},
                  {.entry = "apply",
                   .name = "k2",
                   .ptx_offset = 9,
                   .ptx_size = 7,
                   .cubin = std::pair{int64_t{0}, int64_t{256}},
                   .registers = 40,
                   .spill_bytes = 16}},
      .counts = {.thunks = {{"gemm", 3}, {"kernel", 2}},
                 .kernels_by_kind = {{"loop", 1}, {"gemm fallback", 1}},
                 .gemm_epilogues = {{"CUBLASLT_EPILOGUE_BIAS", 3}},
                 .unsupported = {}}};
  m.emu = EmuIndex{.abi = 7,
                   .kernels = {{.entry = "apply",
                                .name = "k2",
                                .symbol = "gptc_apply__k2",
                                .params = 4,
                                .uses_sync = true,
                                .host_shared_bytes = 512,
                                .static_smem = 1024,
                                .registers = 40,
                                .barriers = 2,
                                .atomics = 1,
                                .accesses = 9}}};
  return m;
}

StatusOr<Manifest> RoundTrip(const Manifest& m) {
  return ManifestFromJson(json::parse(ToJson(m).dump(2)));
}

TEST(ManifestTest, RoundTrip) {
  const Manifest m = Full();
  StatusOr<Manifest> back = RoundTrip(m);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, m);
  // Without the emulator library there is no "emu" object.
  Manifest plain = m;
  plain.emu.reset();
  EXPECT_FALSE(ToJson(plain).contains("emu"));
  back = RoundTrip(plain);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, plain);
}

// The keys as docs/ARTIFACT.md gives them: the counts and the AdamW options
// flat, where format 2 has always written them.
TEST(ManifestTest, Layout) {
  const json j = ToJson(Full());
  for (const char* key :
       {"format_version", "gptc_version", "target", "complete", "model", "flags", "kernels",
        "kernels_by_kind", "thunks", "gemm_epilogues", "unsupported", "emu"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.size(), 12u);
  EXPECT_EQ(j["flags"]["beta2"], 0.99);
  EXPECT_EQ(j["flags"]["codegen"], true);
  EXPECT_EQ(j["flags"]["attention_mma"], "mma.sync");
  EXPECT_EQ(j["flags"]["remat_layers"], (json{"dots", "dots"}));
  EXPECT_EQ(j["flags"].size(), 14u);
  EXPECT_EQ(j["thunks"]["gemm"], 3);
  EXPECT_EQ(j["emu"]["abi"], 7);
}

// flags.attention_mma round-trips, and an artifact written before it had
// mma.sync.
TEST(ManifestTest, AttentionMmaIsOptional) {
  Manifest wgmma = Full();
  wgmma.flags.attention_mma = "wgmma";
  StatusOr<Manifest> back = ManifestFromJson(ToJson(wgmma));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->flags.attention_mma, "wgmma");
  json old = ToJson(Full());
  old["flags"].erase("attention_mma");
  StatusOr<Manifest> before = ManifestFromJson(old);
  ASSERT_TRUE(before.ok()) << before.status().message();
  EXPECT_EQ(before->flags.attention_mma, "mma.sync");
}

// flags.zero_stage: written only when not 0, read as 0 when absent.
TEST(ManifestTest, ZeroStageIsWrittenWhenSharded) {
  EXPECT_FALSE(ToJson(Full())["flags"].contains("zero_stage"));
  Manifest zero = Full();
  zero.flags.zero_stage = 1;
  EXPECT_EQ(ToJson(zero)["flags"]["zero_stage"], 1);
  StatusOr<Manifest> back = ManifestFromJson(ToJson(zero));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->flags.zero_stage, 1);
  StatusOr<Manifest> plain = ManifestFromJson(ToJson(Full()));
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->flags.zero_stage, 0);
}

// flags.remat_layers: the typed per-block record; an artifact written
// before it has none (and none is then written).
TEST(ManifestTest, RematLayersAreOptional) {
  json old = ToJson(Full());
  old["flags"].erase("remat_layers");
  StatusOr<Manifest> before = ManifestFromJson(old);
  ASSERT_TRUE(before.ok()) << before.status().message();
  EXPECT_TRUE(before->flags.remat_layers.empty());
  EXPECT_EQ(before->flags.remat, "dots");
  EXPECT_FALSE(ToJson(*before)["flags"].contains("remat_layers"));
}

std::string ErrorOf(const std::function<void(json&)>& edit) {
  json j = ToJson(Full());
  edit(j);
  StatusOr<Manifest> m = ManifestFromJson(j);
  return m.ok() ? "ok" : m.status().message();
}

TEST(ManifestTest, ErrorsNameTheField) {
  EXPECT_EQ(ManifestFromJson(json::array()).status().message(), "manifest is not an object");
  EXPECT_EQ(ErrorOf([](json& j) { j.erase("target"); }), "manifest has no 'target'");
  EXPECT_EQ(ErrorOf([](json& j) { j["complete"] = 1; }),
            "manifest.complete has the wrong type (1)");
  EXPECT_EQ(ErrorOf([](json& j) { j.erase("flags"); }), "manifest has no 'flags'");
  EXPECT_EQ(ErrorOf([](json& j) { j["flags"].erase("grad_accum"); }),
            "manifest.flags has no 'grad_accum'");
  EXPECT_EQ(ErrorOf([](json& j) { j["flags"]["eps"] = "1e-8"; }),
            "manifest.flags.eps has the wrong type (\"1e-8\")");
  EXPECT_EQ(ErrorOf([](json& j) { j["flags"]["remat_layers"] = "dots"; }),
            "manifest.flags.remat_layers has the wrong type (\"dots\")");
  EXPECT_EQ(ErrorOf([](json& j) { j["flags"]["remat_layers"][1] = 2; }),
            "manifest.flags.remat_layers[1] has the wrong type (2)");
  EXPECT_EQ(ErrorOf([](json& j) { j["model"].erase("heads"); }), "manifest.model: no 'heads'");
  EXPECT_EQ(ErrorOf([](json& j) { j["kernels"][1]["ptx_size"] = "7"; }),
            "manifest kernels[1].ptx_size has the wrong type (\"7\")");
  EXPECT_EQ(ErrorOf([](json& j) { j["kernels"] = json::object(); }),
            "manifest has no 'kernels' array");
  EXPECT_EQ(ErrorOf([](json& j) { j["thunks"]["gemm"] = 1.5; }),
            "manifest.thunks.gemm has the wrong type (1.5)");
  EXPECT_EQ(ErrorOf([](json& j) { j.erase("unsupported"); }), "manifest has no 'unsupported'");
  EXPECT_EQ(ErrorOf([](json& j) { j["emu"].erase("abi"); }), "manifest.emu has no 'abi'");
  EXPECT_EQ(ErrorOf([](json& j) { j["emu"]["kernels"][0].erase("accesses"); }),
            "manifest.emu kernels[0] has no 'accesses'");
}

}  // namespace
}  // namespace gptc::program
