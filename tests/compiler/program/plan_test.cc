// The plan's codec (compiler/program/plan.h): ToJson then FromJson gives the
// plan back, field for field; a missing or ill-typed field is an error that
// names it.
#include "compiler/program/plan.h"

#include <gtest/gtest.h>

namespace gptc::program {
namespace {

using nlohmann::json;

ArenaSlice Slice(int64_t offset, int64_t size, int64_t buffer) { return {offset, size, buffer}; }

GemmConfig Config() {
  GemmConfig c;
  c.compute_type = GemmCompute::k32F;
  c.transa = GemmOp::kT;
  c.m = 128, c.n = 32, c.k = 64;
  c.a = {GemmDType::kBF16, 64, 128, 64, 1, 0};
  c.b = {GemmDType::kBF16, 64, 32, 64, 1, 0};
  c.c = c.d = {GemmDType::kF32, 128, 32, 128, 1, 0};
  c.beta = 1;
  c.epilogue = GemmEpilogue::kGeluAuxBias;
  c.bias_dtype = GemmDType::kF32;
  c.aux_ld = 128;
  c.workspace_bytes = 32 << 20;
  c.notes = {"bf16 rounding of %dot.1 is skipped (cuBLASLt keeps f32)"};
  return c;
}

// One thunk of every kind, two buckets' worth of all-reduces, slots and buffers.
EntryPlan Entry() {
  EntryPlan e;
  e.role = EntryRole::kTrainStep;
  e.arena_size = 1 << 20;
  PlanSlot param;
  static_cast<Slot&>(param) = {SlotRole::kParam, 0, "wte", ir::Shape(ir::DType::kF32, {4, 8})};
  param.slice = Slice(0, 128, 0);
  PlanSlot loss;
  static_cast<Slot&>(loss) = {SlotRole::kLoss, -1, "loss", ir::Shape::Scalar(ir::DType::kF32)};
  loss.slice = Slice(256, 4, 1);
  e.inputs = {param};
  e.outputs = {param, loss};
  e.donations = {{0, 0}};
  e.buffers = {{0, "p0", Slice(0, 128, 0), "f32[4,8]", BufferCategory::kParameter},
               {1, "fusion.3{1}", Slice(256, 4, 1)}};
  e.thunks.push_back({.name = "fusion_3",
                      .meta = "h.0.mlp",
                      .body = KernelThunk{.fusion = "fusion.3",
                                          .fusion_kind = "loop",
                                          .grid = {4, 1, 1},
                                          .block = {128, 1, 1},
                                          .dynamic_smem = 512,
                                          .args = {Slice(0, 128, 0), Slice(4096, 64, -1)},
                                          .operands = 1,
                                          .fallback = true},
                      .role = ThunkRole{ir::Phase::kForward, 0, ThunkGroup::kBlock}});
  e.thunks.push_back({.name = "fusion.3",
                      .meta = "h.0.mlp",
                      .body = GemmThunk{.config = Config(),
                                        .a = Slice(0, 128, 0),
                                        .b = Slice(0, 128, 0),
                                        .c = Slice(256, 4, 1),
                                        .d = Slice(256, 4, 1),
                                        .bias = Slice(0, 128, 0),
                                        .aux = Slice(512, 64, 2),
                                        .fallback_d = Slice(4096, 64, -1)},
                      .cost = ThunkCost{.flops = 2.5e9, .bytes_read = 4096, .bytes_written = 512},
                      .role = ThunkRole{ir::Phase::kGradient, -1, ThunkGroup::kHead}});
  e.thunks.push_back({.name = "donation.out0.in0",
                      .body = CopyThunk{Slice(0, 8, 0), Slice(8, 8, 1), 8, "aliased"},
                      .role = ThunkRole{ir::Phase::kUpdate, -1, ThunkGroup::kOptimizer}});
  e.thunks.push_back({.name = "constant.1",
                      .body = ConstantThunk{ir::DType::kBF16, {0.5, -2.0}, Slice(16, 4, 1)}});
  e.thunks.push_back({.name = "all-reduce.1",
                      .body = AllReduceThunk{ir::ReduceKind::kMax, ir::DType::kF32, 1,
                                             Slice(256, 4, 1), Slice(256, 4, 1), 0}});
  e.thunks.push_back({.name = "gather.2",
                      .meta = "wte",
                      .body = UnsupportedThunk{"gather", "gather has no emitter yet"}});
  for (size_t i = 0; i < e.thunks.size(); ++i) e.thunks[i].index = static_cast<int64_t>(i);
  e.buckets = {{.id = 0, .members = {4}, .issue_after = 4, .wait_before = 6, .bytes = 4}};
  return e;
}

TEST(PlanCodecTest, RoundTrips) {
  const Plan plan{{Entry()}};
  const json j = ToJson(plan);
  StatusOr<Plan> back = PlanFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, plan);
  // ArenaSlice's == compares the memory only: the buffer ids must survive too.
  EXPECT_EQ(ToJson(*back), j);
  const auto& kernel = std::get<KernelThunk>(back->entries[0].thunks[0].body);
  EXPECT_EQ(kernel.args[1].buffer, -1);
  EXPECT_EQ(back->entries[0].inputs[0].slice.buffer, 0);
  EXPECT_EQ(back->entries[0].thunks[4].index, 4);
  EXPECT_EQ(back->entries[0].thunks[4].kind(), ThunkKind::kAllReduce);
  // Optional fields: written when there, absent otherwise.
  EXPECT_EQ(j["entries"][0]["thunks"][1]["cost"]["flops"], 2.5e9);
  EXPECT_FALSE(j["entries"][0]["thunks"][0].contains("cost"));
  EXPECT_EQ(j["entries"][0]["buffers"][0]["shape"], "f32[4,8]");
  EXPECT_FALSE(j["entries"][0]["buffers"][1].contains("shape"));
}

// Note [plan roles]: a thunk's role and a buffer's category as
// docs/ARTIFACT.md spells them, absent where not recorded.
TEST(PlanCodecTest, RolesAndCategoriesAsTheFormatSpellsThem) {
  const json j = ToJson(Plan{{Entry()}});
  const json& thunks = j["entries"][0]["thunks"];
  EXPECT_EQ(thunks[0]["role"], (json{{"phase", "forward"}, {"layer", 0}, {"group", "block"}}));
  EXPECT_EQ(thunks[1]["role"], (json{{"phase", "gradient"}, {"layer", -1}, {"group", "head"}}));
  EXPECT_EQ(thunks[2]["role"]["group"], "optimizer");
  EXPECT_FALSE(thunks[3].contains("role"));
  EXPECT_EQ(j["entries"][0]["buffers"][0]["category"], "parameter");
  EXPECT_FALSE(j["entries"][0]["buffers"][1].contains("category"));
  for (ThunkGroup g : {ThunkGroup::kOther, ThunkGroup::kEmbedding, ThunkGroup::kBlock,
                       ThunkGroup::kHead, ThunkGroup::kOptimizer, ThunkGroup::kParamCast}) {
    json role = ToJson(ThunkRole{ir::Phase::kNone, -1, g});
    EXPECT_EQ(role["phase"], "none");
    StatusOr<ThunkRole> back = ThunkRoleFromJson(role, "r");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->group, g);
  }
}

// A plan written before roles and categories were recorded still loads:
// they are absent, and its readers say "unknown".
TEST(PlanCodecTest, OlderPlanWithoutRolesLoads) {
  json j = ToJson(Plan{{Entry()}});
  for (json& t : j["entries"][0]["thunks"]) t.erase("role");
  for (json& b : j["entries"][0]["buffers"]) b.erase("category");
  StatusOr<Plan> back = PlanFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  for (const Thunk& t : back->entries[0].thunks) EXPECT_FALSE(t.role.has_value()) << t.Describe();
  for (const PlanBuffer& b : back->entries[0].buffers) EXPECT_FALSE(b.category.has_value());
  EXPECT_EQ(ToJson(*back), j);
}

TEST(PlanCodecTest, WritesCublasLtNames) {
  const json j = ToJson(Config());
  EXPECT_EQ(j["transa"], "CUBLAS_OP_T");
  EXPECT_EQ(j["a"]["dtype"], "CUDA_R_16BF");
  EXPECT_EQ(j["epilogue"], "CUBLASLT_EPILOGUE_GELU_AUX_BIAS");
  EXPECT_EQ(j["bias_dtype"], "CUDA_R_32F");
  GemmConfig plain = Config();
  plain.bias_dtype.reset();
  plain.aux_ld = 0;
  plain.notes.clear();
  const json p = ToJson(plain);
  EXPECT_FALSE(p.contains("bias_dtype"));
  EXPECT_FALSE(p.contains("aux_ld"));
  EXPECT_FALSE(p.contains("notes"));
  StatusOr<GemmConfig> back = GemmConfigFromJson(p, "descriptor");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, plain);
}

// Note [gemm epilogue table]: each row's properties find that row and no
// other, and every name the codec writes reads back as its epilogue.
TEST(GemmEpilogueTableTest, EachRowIsFoundByItsProperties) {
  for (int i = 0; i < kNumGemmEpilogues; ++i) {
    const auto e = static_cast<GemmEpilogue>(i);
    const GemmEpilogueInfo& info = GemmEpilogueInfoOf(e);
    EXPECT_EQ(info.epilogue, e);
    EXPECT_EQ(FindGemmEpilogue(info.activation, info.bias, info.aux), e) << info.name;
    GemmConfig c = Config();
    c.epilogue = e;
    StatusOr<GemmConfig> back = GemmConfigFromJson(ToJson(c), "descriptor");
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->epilogue, e) << info.name;
  }
  EXPECT_EQ(GemmEpilogueInfoOf(GemmEpilogue::kGeluAuxBias).name,
            "CUBLASLT_EPILOGUE_GELU_AUX_BIAS");
  EXPECT_TRUE(ReadsBias(GemmEpilogue::kGeluAuxBias) && WritesAux(GemmEpilogue::kGeluAuxBias));
  EXPECT_TRUE(WritesBias(GemmEpilogue::kBGradA) && !ReadsBias(GemmEpilogue::kBGradA));
  EXPECT_TRUE(ReadsAux(GemmEpilogue::kDGelu) && !WritesAux(GemmEpilogue::kDGelu));
  // A GELU backward that writes its aux: cuBLASLt has no such epilogue.
  EXPECT_FALSE(FindGemmEpilogue(ir::GemmActivation::kGeluGrad, EpilogueBias::kNone,
                                EpilogueAux::kWrite));
}

// Note [arena guests]: the host is written only when there is one, read back,
// and must be an entry of the plan with its own arena.
TEST(PlanCodecTest, ArenaHostRoundTripsAndNamesAnEntryWithItsOwnArena) {
  EntryPlan guest = Entry();
  guest.role = EntryRole::kEval;
  guest.arena_size = 1 << 19;
  guest.arena_host = EntryRole::kTrainStep;
  const Plan plan{{Entry(), guest}};
  const json j = ToJson(plan);
  EXPECT_FALSE(j["entries"][0].contains("arena_host"));
  EXPECT_EQ(j["entries"][1]["arena_host"], "train_step");
  StatusOr<Plan> back = PlanFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, plan);
  EXPECT_EQ(ArenaHostIndex(back->entries, back->entries[1]), 0);
  EXPECT_EQ(ArenaHostIndex(back->entries, back->entries[0]), -1);
  // The host's megabyte holds the guest's half: one arena.
  EXPECT_EQ(ArenaAllocationBytes(back->entries), 1 << 20);

  json missing_host = j;
  missing_host["entries"][1]["arena_host"] = "apply";
  EXPECT_EQ(PlanFromJson(missing_host).status().message(),
            "plan entry eval: arena_host apply is not an entry of the plan with its own arena");
  json unknown = j;
  unknown["entries"][1]["arena_host"] = "forward";
  EXPECT_EQ(PlanFromJson(unknown).status().message(),
            "plan entry eval: arena_host: unknown entry 'forward'");
  json itself = j;
  itself["entries"][1]["arena_host"] = "eval";
  EXPECT_FALSE(PlanFromJson(itself).ok());
}

TEST(PlanCodecTest, ArenaAllocationBytesGrowsEachHostToItsLargestGuest) {
  const std::vector<int64_t> sizes = {100, 40, 300, 50};
  const std::vector<int> hosts = {-1, -1, 0, 0};
  EXPECT_EQ(ArenaAllocationBytes(sizes, hosts), 300 + 40);
  const std::vector<int> own = {-1, -1, -1, -1};
  EXPECT_EQ(ArenaAllocationBytes(sizes, own), 490);
}

TEST(PlanCodecTest, ErrorsNameTheField) {
  json j = ToJson(Plan{{Entry()}});
  json missing = j;
  missing["entries"][0]["thunks"][0].erase("grid");
  EXPECT_EQ(PlanFromJson(missing).status().message(),
            "plan entry train_step thunk 0 has no 'grid'");

  json ill_typed = j;
  ill_typed["entries"][0]["thunks"][1]["descriptor"]["m"] = "128";
  EXPECT_EQ(PlanFromJson(ill_typed).status().message(),
            "plan entry train_step thunk 1.descriptor.m has the wrong type (\"128\")");

  json bad_enum = j;
  bad_enum["entries"][0]["thunks"][1]["descriptor"]["a"]["dtype"] = "CUDA_R_8I";
  EXPECT_EQ(PlanFromJson(bad_enum).status().message(),
            "plan entry train_step thunk 1.descriptor.a.dtype: 'CUDA_R_8I' is not a value this "
            "reader knows");

  json bad_role = j;
  bad_role["entries"][0]["inputs"][0]["role"] = "weights";
  EXPECT_EQ(PlanFromJson(bad_role).status().message(),
            "plan entry train_step inputs[0].role: unknown role 'weights'");

  json bad_slice = j;
  bad_slice["entries"][0]["thunks"][2]["src"].erase("size");
  EXPECT_EQ(PlanFromJson(bad_slice).status().message(),
            "plan entry train_step thunk 2.src has no 'size'");

  json bad_kind = j;
  bad_kind["entries"][0]["thunks"][5]["kind"] = "memset";
  EXPECT_EQ(PlanFromJson(bad_kind).status().message(),
            "plan entry train_step thunk 5.kind: 'memset' is not a value this reader knows");

  json bad_cost = j;
  bad_cost["entries"][0]["thunks"][1]["cost"]["bytes_read"] = -0.5;
  EXPECT_EQ(PlanFromJson(bad_cost).status().message(),
            "plan entry train_step thunk 1.cost.bytes_read has the wrong type (-0.5)");

  json bad_group = j;
  bad_group["entries"][0]["thunks"][0]["role"]["group"] = "torso";
  EXPECT_EQ(PlanFromJson(bad_group).status().message(),
            "plan entry train_step thunk 0.role.group: 'torso' is not a value this reader knows");

  json bad_phase = j;
  bad_phase["entries"][0]["thunks"][1]["role"]["phase"] = "backward";
  EXPECT_EQ(PlanFromJson(bad_phase).status().message(),
            "plan entry train_step thunk 1.role.phase: 'backward' is not a value this reader "
            "knows");

  json bad_layer = j;
  bad_layer["entries"][0]["thunks"][0]["role"]["layer"] = -2;
  EXPECT_EQ(PlanFromJson(bad_layer).status().message(),
            "plan entry train_step thunk 0.role.layer: -2 is not a block index or -1");

  json bad_category = j;
  bad_category["entries"][0]["buffers"][0]["category"] = "weights";
  EXPECT_EQ(PlanFromJson(bad_category).status().message(),
            "plan entry train_step buffers[0].category: 'weights' is not a value this reader "
            "knows");

  json bad_entry = j;
  bad_entry["entries"][0]["name"] = "warmup";
  EXPECT_EQ(PlanFromJson(bad_entry).status().message(),
            "section 'plan' entries[0]: unknown entry 'warmup' (train_step, accumulate, apply, "
            "logits or eval)");

  EXPECT_EQ(PlanFromJson(json::object()).status().message(),
            "section 'plan' has no 'entries' array");
}

}  // namespace
}  // namespace gptc::program
