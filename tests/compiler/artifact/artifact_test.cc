// The .gptx writer and reader: golden plan of gpt2-tiny, round trip,
// determinism, rejection of bad files (compiler/program/container.h).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <variant>

#include "compiler/artifact/writer.h"
#include "compiler/program/container.h"
#include "compiler/program/plan.h"
#include "models/config.h"
#include "models/gpt2.h"
#include "passes/train_step.h"

namespace gptc::artifact {
namespace {

StatusOr<BuiltArtifact> CompileTiny() {
  ASSIGN_OR_RETURN(models::GptConfig config, models::FindGptConfig("gpt2-tiny"));
  ASSIGN_OR_RETURN(frontend::TracedModule traced, models::TraceGpt2Forward(config, 2, 16));
  passes::TrainStepOptions options;
  options.optimize = true;
  options.precision.policy = passes::PrecisionPolicy::kBF16;
  ASSIGN_OR_RETURN(
      program::TrainProgram program,
      passes::BuildTrainProgram(std::move(traced.module), traced.params, traced.inputs, options));
  ArtifactOptions ao;
  ao.model = {.name = config.name, .layers = config.layers};
  ao.flags = {.batch = 2, .seq = 16};
  ao.codegen.run_ptxas = false;  // keep the test independent of the CUDA toolkit
  ASSIGN_OR_RETURN(analysis::ProgramBuffers buffers, analysis::AssignProgramBuffers(program));
  ao.buffers = &buffers;
  return BuildArtifact(program, ao);
}

// Compiled once for the whole suite.
const BuiltArtifact& Tiny() {
  static const BuiltArtifact* built = [] {
    StatusOr<BuiltArtifact> b = CompileTiny();
    if (!b.ok()) {
      ADD_FAILURE() << b.status().message();
      return new BuiltArtifact();
    }
    return new BuiltArtifact(std::move(*b));
  }();
  return *built;
}

TEST(ArtifactTest, RoundTrip) {
  StatusOr<program::Artifact> a = program::DecodeArtifact(Tiny().bytes, "t.gptx");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->format_version, 3u);
  // Format 2: the signatures are the plan's (no manifest entries), grad_accum
  // is in the flags only, and the params carry no offsets.
  const nlohmann::json manifest = nlohmann::json::parse(*a->Find("manifest"));
  EXPECT_FALSE(manifest.contains("entries"));
  EXPECT_FALSE(manifest.contains("grad_accum"));
  EXPECT_EQ(a->manifest.flags.grad_accum, 1);
  // The manifest section is the codec's.
  EXPECT_EQ(program::ToJson(a->manifest), manifest);
  EXPECT_FALSE(a->params["params"][0].contains("offsets"));
  // The plan section is the codec's.
  StatusOr<program::Plan> plan = program::PlanFromJson(a->plan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(program::ToJson(*plan), a->plan);
  EXPECT_NE(plan->entries[0].FindInput(program::SlotRole::kParam, 0), nullptr);
  EXPECT_EQ(a->manifest.target, "sm_90a");
  EXPECT_EQ(a->manifest.model.name, "gpt2-tiny");
  EXPECT_EQ(a->manifest.complete, Tiny().complete);
  EXPECT_EQ(a->params["params"][0]["name"], "wte.weight");
  ASSERT_EQ(a->plan["entries"].size(), 1u);
  EXPECT_EQ(a->plan["entries"][0]["name"], "train_step");
  ASSERT_NE(a->Find("ir"), nullptr);
  EXPECT_TRUE(a->Find("ir")->starts_with("module gpt2-tiny"));
  EXPECT_EQ(a->Find("cubin"), nullptr);  // ptxas off
  // Every kernel's PTX is where the manifest says.
  for (const program::KernelRecord& k : a->manifest.kernels) {
    std::string ptx = a->Find("ptx")->substr(k.ptx_offset, k.ptx_size);
    EXPECT_NE(ptx.find(".entry " + k.name), std::string::npos) << k.name;
  }
}

// Golden facts about the gpt2-tiny plan: small and stable on purpose.
TEST(ArtifactTest, TinyPlanGolden) {
  StatusOr<program::Artifact> a = program::DecodeArtifact(Tiny().bytes, "t.gptx");
  ASSERT_TRUE(a.ok()) << a.status().message();
  const auto& thunks = a->plan["entries"][0]["thunks"];
  int gemms = 0;
  std::map<std::string, int> epilogues;
  for (const auto& t : thunks) {
    if (t["kind"] != "gemm") continue;
    ++gemms;
    ++epilogues[t["descriptor"]["epilogue"].get<std::string>()];
  }
  // 2 layers x 4 linears forward + lm_head and two dots per linear backward;
  // the attention backward is kernels, not gemms (Note [flash attention
  // backward]).
  EXPECT_EQ(gemms, 27);
  // Every fusion of the train step has a kernel or a gemm.
  EXPECT_TRUE(a->manifest.complete) << a->manifest.counts.unsupported.size();
  // c_attn, c_proj and mlp.c_proj of each layer: c_attn's gemm writes the
  // bf16 projection with its bf16 bias, which the attention kernels read
  // (Note [bf16 attention projection] in passes/mixed_precision.h).
  EXPECT_EQ(epilogues["CUBLASLT_EPILOGUE_BIAS"], 6);
  // c_fc with its GELU (writing the pre-activation), and the gradient of
  // c_proj's input with the GELU's derivative (reading it): Note [GELU
  // epilogues] in compiler/analysis/gelu_epilogue.h.
  EXPECT_EQ(epilogues["CUBLASLT_EPILOGUE_GELU_AUX_BIAS"], 2);
  EXPECT_EQ(epilogues["CUBLASLT_EPILOGUE_DGELU"], 2);
  // Weight gradients dW = x^T dy with the bias gradient of dy (cuBLASLt's A).
  EXPECT_EQ(epilogues["CUBLASLT_EPILOGUE_BGRADA"], 8);
  // The first gemm: h.0.attn.c_attn, x[32,64] . W[64,192] + bias, in bf16.
  for (const auto& t : thunks) {
    if (t["kind"] != "gemm") continue;
    const auto& d = t["descriptor"];
    EXPECT_EQ(t["meta"], "h.0.attn.c_attn");
    EXPECT_EQ(d["m"], 192);
    EXPECT_EQ(d["n"], 32);
    EXPECT_EQ(d["k"], 64);
    EXPECT_EQ(d["transa"], "CUBLAS_OP_N");
    EXPECT_EQ(d["a"]["dtype"], "CUDA_R_16BF");
    EXPECT_EQ(d["d"]["dtype"], "CUDA_R_16BF");
    EXPECT_EQ(d["epilogue"], "CUBLASLT_EPILOGUE_BIAS");
    EXPECT_EQ(d["workspace_bytes"], 32 << 20);
    break;
  }
  // The embedding gradient scatters into the lm head's gradient in place
  // (Note [scatter into the addend], Note [in-place temporaries]): one
  // kernel, no copy of the table before it.
  int updates = 0;
  for (const auto& t : thunks) {
    if (!t.value("updates_operand", false)) continue;
    ++updates;
    EXPECT_EQ(t["fusion_kind"], "scatter-add") << t;
    EXPECT_EQ(t["args"][0], t["args"][3]) << t;
    int same = 0;
    for (const auto& u : thunks) same += u.value("fusion", "") == t["fusion"];
    EXPECT_EQ(same, 1) << t;
  }
  EXPECT_EQ(updates, 1);
  // Instructions without an emitter are honest "unsupported" thunks.
  EXPECT_EQ(a->manifest.complete, a->manifest.counts.unsupported.empty());
  // Every slice lies inside the arena.
  int64_t arena = a->plan["entries"][0]["arena_size"];
  for (const auto& t : thunks) {
    for (const char* key : {"a", "b", "c", "d", "bias", "aux", "src", "dst", "in", "out"}) {
      if (!t.contains(key)) continue;
      EXPECT_LE(t[key]["offset"].get<int64_t>() + t[key]["size"].get<int64_t>(), arena) << t;
    }
  }
}

// Note [plan roles]: every thunk carries its phase and part of the model,
// every buffer its category, decided from the instructions' typed roles.
// (The test reads names only to pick thunks to check.)
TEST(ArtifactTest, PlanRecordsRolesAndCategories) {
  StatusOr<program::Artifact> a = program::DecodeArtifact(Tiny().bytes, "t.gptx");
  ASSERT_TRUE(a.ok()) << a.status().message();
  StatusOr<program::Plan> plan = program::PlanFromJson(a->plan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const program::EntryPlan& e = plan->entries[0];
  using program::ThunkGroup;
  std::map<ThunkGroup, int> groups;
  std::set<int32_t> layers;
  for (const program::Thunk& t : e.thunks) {
    ASSERT_TRUE(t.role.has_value()) << t.Describe();
    const program::ThunkRole& r = *t.role;
    EXPECT_NE(r.phase, ir::Phase::kNone) << t.Describe();
    EXPECT_NE(r.group, ThunkGroup::kOther) << t.Describe();
    // A layer exactly on the blocks' thunks.
    EXPECT_EQ(r.layer >= 0, r.group == ThunkGroup::kBlock) << t.Describe();
    ++groups[r.group];
    if (r.layer >= 0) layers.insert(r.layer);
    const bool optimizer = r.phase == ir::Phase::kUpdate || r.phase == ir::Phase::kOptimizer;
    EXPECT_EQ(optimizer, r.group == ThunkGroup::kOptimizer) << t.Describe();
    if (t.meta.starts_with("h.1.") || t.meta.starts_with("grad.h.1.")) {
      EXPECT_EQ(r.group, ThunkGroup::kBlock) << t.Describe();
      EXPECT_EQ(r.layer, 1) << t.Describe();
    }
    if (t.meta == "wte" || t.meta == "wpe" || t.meta == "grad.wte" || t.meta == "grad.wpe") {
      EXPECT_EQ(r.group, ThunkGroup::kEmbedding) << t.Describe();
    }
    if (t.meta == "lm_head" || t.meta == "grad.lm_head" || t.meta == "loss") {
      EXPECT_EQ(r.group, ThunkGroup::kHead) << t.Describe();
    }
    if (t.kind() == program::ThunkKind::kGemm) {
      EXPECT_TRUE(r.group == ThunkGroup::kBlock || r.group == ThunkGroup::kHead) << t.Describe();
    }
  }
  EXPECT_EQ(layers, (std::set<int32_t>{0, 1}));
  for (ThunkGroup g : {ThunkGroup::kEmbedding, ThunkGroup::kBlock, ThunkGroup::kHead,
                       ThunkGroup::kOptimizer, ThunkGroup::kParamCast}) {
    EXPECT_GT(groups[g], 0) << program::ThunkGroupName(g);
  }
  // Buffers: every one has a category; the parameters' and moments' by
  // their slots.
  for (const program::PlanBuffer& b : e.buffers) EXPECT_TRUE(b.category.has_value()) << b.name;
  int params = 0;
  for (const program::PlanSlot& s : e.inputs) {
    const program::PlanBuffer* b = e.FindBuffer(s.slice.buffer);
    ASSERT_NE(b, nullptr) << s.name;
    if (s.role == program::SlotRole::kParam) {
      ++params;
      EXPECT_EQ(b->category, program::BufferCategory::kParameter) << s.name;
    } else if (s.role == program::SlotRole::kAdamM || s.role == program::SlotRole::kAdamV) {
      EXPECT_EQ(b->category, program::BufferCategory::kOptimizerState) << s.name;
    } else {
      EXPECT_EQ(b->category, program::BufferCategory::kData) << s.name;
    }
  }
  EXPECT_GT(params, 0);
}

// Note [epilogue fallback]: the writer counts the kernels the plan marks
// `fallback`, which summaries show apart from the launches.
TEST(ArtifactTest, CountsTheFallbackKernelsThePlanMarks) {
  StatusOr<program::Artifact> a = program::DecodeArtifact(Tiny().bytes, "t.gptx");
  ASSERT_TRUE(a.ok()) << a.status().message();
  StatusOr<program::Plan> plan = program::PlanFromJson(a->plan);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  int64_t marked = 0;
  for (const program::Thunk& t : plan->entries[0].thunks) {
    const auto* k = std::get_if<program::KernelThunk>(&t.body);
    marked += k != nullptr && k->fallback;
  }
  EXPECT_GT(marked, 0);
  EXPECT_EQ(Tiny().fallback_kernels, marked);
}

TEST(ArtifactTest, Deterministic) {
  StatusOr<BuiltArtifact> again = CompileTiny();
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_TRUE(again->bytes == Tiny().bytes);
}

std::string Message(std::string_view bytes, const program::ReadOptions& options = {}) {
  StatusOr<program::Artifact> a = program::DecodeArtifact(bytes, "x.gptx", options);
  return a.ok() ? "ok" : a.status().message();
}

// A damaged file is an error of kind corrupt (whatever the damage), so a
// reader can tell it from a file it cannot open.
TEST(ArtifactTest, DamageIsCorrupt) {
  const std::string& good = Tiny().bytes;
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x40;
  for (const std::string& bad : {good.substr(0, good.size() - 10), flipped, std::string("hello")}) {
    StatusOr<program::Artifact> a = program::DecodeArtifact(bad, "x.gptx");
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), StatusCode::kCorrupt) << a.status().message();
  }
}

TEST(ArtifactTest, RejectsBadFiles) {
  const std::string& good = Tiny().bytes;
  ASSERT_GT(good.size(), 100u);
  EXPECT_EQ(Message(good.substr(0, good.size() - 10)),
            fmt::format("x.gptx: truncated ({} bytes, the header says {})", good.size() - 10,
                        good.size()));
  EXPECT_EQ(Message(good.substr(0, 10)),
            "x.gptx: truncated (10 bytes, less than a header and trailer)");
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x40;
  EXPECT_EQ(Message(flipped), "x.gptx: checksum mismatch (file is corrupt)");
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_EQ(Message(magic), "x.gptx: not a gptx artifact (bad magic)");
  EXPECT_EQ(Message("hello"), "x.gptx: not a gptx artifact (bad magic)");
  std::string newer = good;
  newer[4] = 4;
  EXPECT_EQ(Message(newer),
            "x.gptx: format version 4; this build of gptc reads version 3 (update gptc)");
  std::string older = good;
  older[4] = 2;
  EXPECT_EQ(Message(older),
            "x.gptx: format version 2; this build of gptc reads version 3 (recompile it with gptc "
            "compile)");
  EXPECT_EQ(Message(good, {.expected_target = "sm_80"}),
            "x.gptx: compiled for sm_90a, this device is sm_80");
  EXPECT_EQ(Message(good, {.expected_target = "sm_90a"}), "ok");
}

TEST(ArtifactTest, ContainerRoundTripAndOrder) {
  const std::string manifest = program::ToJson(program::Manifest{.target = "sm_90a"}).dump();
  StatusOr<std::string> bytes = program::EncodeArtifact(
      {{"manifest", manifest}, {"ir", "module m"}, {"ptx", ""}, {"plan", "{}"}, {"params", "{}"}});
  ASSERT_TRUE(bytes.ok());
  StatusOr<program::Artifact> a = program::DecodeArtifact(*bytes, "m.gptx");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(*a->Find("ir"), "module m");
  EXPECT_EQ(program::EncodeArtifact({{"plan", "{}"}, {"ir", ""}}).status().message(),
            "artifact section 'ir' is out of order");
  bytes = program::EncodeArtifact({{"manifest", "{}"}, {"ir", ""}, {"plan", "{}"}, {"params", "{}"}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(Message(*bytes), "x.gptx: missing section 'ptx'");
  // The manifest is decoded with the container, by its codec.
  bytes = program::EncodeArtifact(
      {{"manifest", "{}"}, {"ir", ""}, {"ptx", ""}, {"plan", "{}"}, {"params", "{}"}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(Message(*bytes), "x.gptx: manifest has no 'format_version'");
}

}  // namespace
}  // namespace gptc::artifact
