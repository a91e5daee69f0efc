// The GPU runtime's reading of the artifact, without a GPU: gemm descriptors
// into cuBLASLt's enums, every thunk of the gpt2-tiny plan, and the plan ->
// executor translation checked against the buffer assignment recomputed from
// the artifact's IR (every kernel's args are its operands' then its results'
// slices, as many as its PTX entry declares; every gemm reads its operands'
// slices and writes its results').
#include "runtime/gpu/plan_reader.h"

#include <cublasLt.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "compiler/ir/computation.h"
#include "runtime/gpu/host_values.h"
#include "runtime/gpu/kernel_modules.h"
#include "tests/runtime/gpu/gpu_test_util.h"

namespace gptc::rt::gpu {
namespace {

using nlohmann::json;

json Descriptor() {
  json layout = {{"dtype", "CUDA_R_16BF"}, {"rows", 64},       {"cols", 128}, {"ld", 64},
                 {"batch_count", 1},       {"batch_stride", 0}};
  json d = {{"compute_type", "CUBLAS_COMPUTE_32F"},
            {"scale_type", "CUDA_R_32F"},
            {"transa", "CUBLAS_OP_T"},
            {"transb", "CUBLAS_OP_N"},
            {"m", 128},
            {"n", 32},
            {"k", 64},
            {"batch_count", 1},
            {"a", layout},
            {"b", {{"dtype", "CUDA_R_16BF"}, {"rows", 64}, {"cols", 32}, {"ld", 64}}},
            {"c", {{"dtype", "CUDA_R_32F"}, {"rows", 128}, {"cols", 32}, {"ld", 128}}},
            {"d", {{"dtype", "CUDA_R_32F"}, {"rows", 128}, {"cols", 32}, {"ld", 128}}},
            {"alpha", 1.0},
            {"beta", 1.0},
            {"epilogue", "CUBLASLT_EPILOGUE_GELU_AUX_BIAS"},
            {"bias_dtype", "CUDA_R_32F"},
            {"aux_ld", 128},
            {"workspace_bytes", 33554432}};
  return d;
}

GemmConfig Config(const json& d) {
  StatusOr<GemmConfig> c = program::GemmConfigFromJson(d, "descriptor");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : GemmConfig{};
}

TEST(GemmConfigTest, MapsToCublasLtValues) {
  const GemmConfig c = Config(Descriptor());
  EXPECT_TRUE(CheckGemmConfig(c).ok()) << CheckGemmConfig(c).message();
  EXPECT_EQ(CudaComputeType(c.compute_type), CUBLAS_COMPUTE_32F);
  EXPECT_EQ(CudaDataType(c.scale_type), CUDA_R_32F);
  EXPECT_EQ(CudaOperation(c.transa), CUBLAS_OP_T);
  EXPECT_EQ(CudaOperation(c.transb), CUBLAS_OP_N);
  EXPECT_EQ(CudaDataType(c.a.dtype), CUDA_R_16BF);
  EXPECT_EQ(CudaDataType(c.d.dtype), CUDA_R_32F);
  EXPECT_EQ(CudaEpilogue(c.epilogue), CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  ASSERT_TRUE(c.bias_dtype.has_value());
  EXPECT_EQ(CudaDataType(*c.bias_dtype), CUDA_R_32F);
  EXPECT_TRUE(program::ReadsBias(c.epilogue));
  EXPECT_FALSE(program::WritesBias(c.epilogue));
  EXPECT_TRUE(program::WritesAux(c.epilogue));
  EXPECT_EQ(c.aux_ld, 128);
  EXPECT_EQ(c.workspace_bytes, 32 << 20);
  EXPECT_NE(c.Summary().find("m=128 n=32 k=64"), std::string::npos) << c.Summary();
  // Every epilogue the plan can name has a cuBLASLt value.
  for (int e = 0; e <= static_cast<int>(program::GemmEpilogue::kBGradB); ++e) {
    EXPECT_GE(CudaEpilogue(static_cast<program::GemmEpilogue>(e)), 0) << e;
  }
}

TEST(GemmConfigTest, DgeluReadsAux) {
  json d = Descriptor();
  d["epilogue"] = "CUBLASLT_EPILOGUE_DGELU";
  d.erase("bias_dtype");
  GemmConfig c = Config(d);
  EXPECT_TRUE(CheckGemmConfig(c).ok());
  EXPECT_TRUE(program::ReadsAux(c.epilogue));
  EXPECT_FALSE(program::WritesAux(c.epilogue));
  EXPECT_FALSE(program::ReadsBias(c.epilogue));
  EXPECT_FALSE(program::WritesBias(c.epilogue));
  // Its aux is D's shape: the leading dimension covers D's rows.
  c.aux_ld = 64;
  EXPECT_EQ(CheckGemmConfig(c).message(),
            "descriptor: epilogue CUBLASLT_EPILOGUE_DGELU with aux_ld 64 < m 128");
}

TEST(GemmConfigTest, ErrorsNameTheField) {
  json d = Descriptor();
  d["epilogue"] = "CUBLASLT_EPILOGUE_DRELU";
  EXPECT_EQ(program::GemmConfigFromJson(d, "descriptor").status().message(),
            "descriptor.epilogue: 'CUBLASLT_EPILOGUE_DRELU' is not a value this reader knows");
  d = Descriptor();
  d["a"]["rows"] = 65;  // op(A) must be m x k: A is k x m with transa T
  d["a"]["ld"] = 65;
  EXPECT_EQ(CheckGemmConfig(Config(d)).message(),
            "descriptor.a is 65x128, the problem needs 64x128");
  d = Descriptor();
  d.erase("m");
  EXPECT_EQ(program::GemmConfigFromJson(d, "descriptor").status().message(),
            "descriptor has no 'm'");
}

json Entry(json thunk) {
  return {{"name", "train_step"},       {"arena_size", 4096},
          {"inputs", json::array()},    {"outputs", json::array()},
          {"donations", json::array()}, {"thunks", json::array({std::move(thunk)})}};
}

TEST(PlanReaderTest, ConstantsCopiesAndAllReduces) {
  StatusOr<EntryPlan> p = ReadEntryPlan(Entry({{"kind", "constant"},
                                               {"name", "c"},
                                               {"dtype", "bf16"},
                                               {"values", {0.5}},
                                               {"dst", {{"offset", 256}, {"size", 8}}}}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  const auto& c = std::get<ConstantThunk>(p->thunks[0].body);
  EXPECT_EQ(ConstantBytes(c),
            EncodeValues(ir::DType::kBF16, std::vector<double>(4, 0.5)));  // a splat
  p = ReadEntryPlan(Entry({{"kind", "copy"},
                           {"name", "donation.out1.in2"},
                           {"src", {{"offset", 0}, {"size", 64}}},
                           {"dst", {{"offset", 256}, {"size", 64}}},
                           {"bytes", 64},
                           {"reason", "read later"}}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(std::get<CopyThunk>(p->thunks[0].body).dst.offset, 256);
  p = ReadEntryPlan(Entry({{"kind", "all_reduce"},
                           {"name", "ar"},
                           {"reduce", "sum"},
                           {"dtype", "f32"},
                           {"count", 16},
                           {"in", {{"offset", 0}, {"size", 64}}},
                           {"out", {{"offset", 0}, {"size", 64}}}}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(std::get<AllReduceThunk>(p->thunks[0].body).count, 16);
}

TEST(PlanReaderTest, ErrorsNameTheThunk) {
  StatusOr<EntryPlan> p = ReadEntryPlan(Entry({{"kind", "copy"},
                                               {"name", "x"},
                                               {"src", {{"offset", 4000}, {"size", 512}}},
                                               {"dst", {{"offset", 0}, {"size", 512}}},
                                               {"bytes", 512}}));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(
      p.status().message(),
      "plan entry train_step: thunk 0 (copy %x): slice [4000, +512) is outside the arena of 4096 "
      "bytes");
  p = ReadEntryPlan(Entry({{"kind", "memset"}, {"name", "x"}}));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "plan entry train_step thunk 0.kind: 'memset' is not a value this reader knows");
  p = ReadEntryPlan(Entry({{"kind", "constant"},
                           {"name", "c"},
                           {"dtype", "f32"},
                           {"values", {1, 2, 3}},
                           {"dst", {{"offset", 0}, {"size", 8}}}}));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "plan entry train_step: thunk 0 (constant %c): 3 values for a slice of 2 f32 elements");
}

const testing::Tiny& TinyOrSkip() {
  std::string why;
  const testing::Tiny* tiny = testing::LoadTiny(&why);
  if (tiny == nullptr) {
    ADD_FAILURE() << why;
    static testing::Tiny empty;
    return empty;
  }
  return *tiny;
}

// What GpuTrainer assumes of a grad-accum artifact (Note [entries of a step]
// in gpu_trainer.cc), checked on the plan itself, without a GPU: accumulate
// takes the micro-batch and updates each accumulator in place (donated), so
// it sums over runs; apply holds the state and reads the same accumulators.
TEST(PlanReaderTest, GradAccumPlanHasWhatTheTrainerFeeds) {
  std::string why;
  const testing::Tiny* tiny = testing::LoadTiny(&why, testing::TinyVariant::kGradAccum);
  ASSERT_NE(tiny, nullptr) << why;
  const EntryPlan* accumulate = nullptr;
  const EntryPlan* apply = nullptr;
  for (const EntryPlan& p : tiny->plans) {
    if (p.role == program::EntryRole::kAccumulate) accumulate = &p;
    if (p.role == program::EntryRole::kApply) apply = &p;
  }
  ASSERT_NE(accumulate, nullptr);
  ASSERT_NE(apply, nullptr);
  const ir::Shape scalar = ir::Shape::Scalar(ir::DType::kF32);
  using program::SlotRole;
  for (SlotRole role : {SlotRole::kTokens, SlotRole::kTargets}) {
    EXPECT_NE(accumulate->FindInput(role), nullptr) << program::SlotRoleName(role);
    EXPECT_EQ(apply->FindInput(role), nullptr) << program::SlotRoleName(role);
  }
  ASSERT_NE(accumulate->FindOutput(SlotRole::kLoss), nullptr);
  EXPECT_EQ(accumulate->FindOutput(SlotRole::kLoss)->shape, scalar);
  ASSERT_NE(apply->FindOutput(SlotRole::kGradNorm), nullptr);
  for (SlotRole role : {SlotRole::kStep, SlotRole::kLr}) {
    ASSERT_NE(apply->FindInput(role), nullptr) << program::SlotRoleName(role);
    EXPECT_EQ(apply->FindInput(role)->shape, scalar) << program::SlotRoleName(role);
  }
  const std::vector<program::ParamSpec>& params = tiny->loaded.program.params;
  for (size_t p = 0; p < params.size(); ++p) {
    const auto index = static_cast<int64_t>(p);
    const PlanSlot* in = accumulate->FindInput(SlotRole::kGradAcc, index);
    const PlanSlot* out = accumulate->FindOutput(SlotRole::kGradAcc, index);
    const PlanSlot* applied = apply->FindInput(SlotRole::kGradAcc, index);
    ASSERT_TRUE(in != nullptr && out != nullptr && applied != nullptr) << params[p].name;
    EXPECT_EQ(in->shape, applied->shape) << params[p].name;
    const int64_t in_index = in - accumulate->inputs.data();
    const int64_t out_index = out - accumulate->outputs.data();
    EXPECT_NE(std::find(accumulate->donations.begin(), accumulate->donations.end(),
                        std::pair{out_index, in_index}),
              accumulate->donations.end())
        << params[p].name << ": the accumulator is not updated in place";
    for (SlotRole role : {SlotRole::kParam, SlotRole::kAdamM, SlotRole::kAdamV}) {
      EXPECT_NE(apply->FindInput(role, index), nullptr)
          << program::SlotRoleName(role) << " " << params[p].name;
    }
    EXPECT_NE(accumulate->FindInput(SlotRole::kParam, index), nullptr) << params[p].name;
  }
}

// Every thunk of every entry against the buffer assignment of the IR.
// Note [arena guests]: the tiny artifact's logits and eval entries run in
// train_step's arena and read its parameter slices; a plan that moved one,
// or named another host, is refused at load.
TEST(PlanReaderTest, GuestsReadTheirHostsParameters) {
  const testing::Tiny& tiny = TinyOrSkip();
  std::vector<EntryPlan> plans = tiny.plans;
  StatusOr<std::vector<int>> hosts = CheckArenaHosts(plans, program::EntryRole::kTrainStep);
  ASSERT_TRUE(hosts.ok()) << hosts.status().message();
  int guests = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    const bool guest = program::RunsBetweenSteps(plans[i].role);
    EXPECT_EQ((*hosts)[i] >= 0, guest) << plans[i].name();
    if (guest) {
      ++guests;
      EXPECT_EQ(plans[(*hosts)[i]].role, program::EntryRole::kTrainStep);
    }
  }
  ASSERT_GT(guests, 0);
  StatusOr<std::vector<int>> wrong_micro = CheckArenaHosts(plans, program::EntryRole::kAccumulate);
  ASSERT_FALSE(wrong_micro.ok());
  EXPECT_EQ(wrong_micro.status().message(),
            "plan entry logits: runs in the arena of train_step, which does not run the "
            "micro-batches");
  for (EntryPlan& p : plans) {
    if (p.role != program::EntryRole::kLogits) continue;
    for (PlanSlot& s : p.inputs) {
      if (s.role == program::SlotRole::kParam && s.index == 0) s.slice.offset += 256;
    }
  }
  StatusOr<std::vector<int>> moved = CheckArenaHosts(plans, program::EntryRole::kTrainStep);
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.status().message(),
            "plan entry logits: input %wte.weight (param 0) is not where train_step holds it");
}

TEST(PlanReaderTest, TinyPlanMatchesBufferAssignment) {
  const testing::Tiny& tiny = TinyOrSkip();
  ASSERT_FALSE(tiny.plans.empty());
  const std::map<std::string, int64_t>& counts = tiny.artifact.manifest.counts.thunks;
  std::map<std::string, int64_t> seen;
  const std::string& ptx = *tiny.artifact.Find("ptx");
  const std::vector<KernelRecord>& images = tiny.artifact.manifest.kernels;
  Status checked =
      CheckKernelIndex(images, static_cast<int64_t>(ptx.size()),
                       tiny.artifact.Find("cubin") ? tiny.artifact.Find("cubin")->size() : 0);
  ASSERT_TRUE(checked.ok()) << checked.message();
  for (size_t e = 0; e < tiny.plans.size(); ++e) {
    const EntryPlan& plan = tiny.plans[e];
    const analysis::BufferAssignment& ba = tiny.assignments[e];
    const program::TrainEntry& entry = tiny.loaded.program.entries[e];
    const ir::Computation& c = *entry.module->entry();
    // Buffer assignment's arena, then (Note [split column reductions]) the
    // scratch of kernels that pass partial results to each other.
    int64_t scratch = 0;
    for (const Thunk& t : plan.thunks) {
      for (const ArenaSlice* s : ThunkSlices(t)) {
        if (s->buffer >= 0) continue;
        EXPECT_EQ(s->offset, (ba.arena_size() + 255) / 256 * 256) << t.Describe();
        scratch = std::max(scratch, s->size);
      }
    }
    EXPECT_EQ(plan.arena_size,
              scratch > 0 ? (ba.arena_size() + 255) / 256 * 256 + scratch : ba.arena_size())
        << plan.name();
    std::vector<ir::Instruction*> params = c.parameters();
    ASSERT_EQ(plan.inputs.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      StatusOr<analysis::Slice> s = ba.GetSlice(params[i]);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(plan.inputs[i].slice, (ArenaSlice{s->offset, s->size})) << plan.inputs[i].name;
    }
    // Note [epilogue fallback]: the gemm naming each fallback kernel.
    std::map<int64_t, const GemmThunk*> gemm_of;
    for (const Thunk& t : plan.thunks) {
      const auto* g = std::get_if<GemmThunk>(&t.body);
      if (g != nullptr && g->fallback_kernel) gemm_of[*g->fallback_kernel] = g;
    }
    for (const Thunk& t : plan.thunks) {
      ++seen[std::string(ThunkKindName(t.kind()))];
      const ir::Instruction* inst = c.FindInstruction(t.instruction());
      if (t.kind() == ThunkKind::kCopy) continue;  // donation copies name no instruction
      ASSERT_NE(inst, nullptr) << t.Describe();
      std::vector<ArenaSlice> operands, results;
      for (int64_t i = 0; i < inst->operand_count(); ++i) {
        StatusOr<analysis::Slice> s = ba.GetSlice(inst->operand(i));
        ASSERT_TRUE(s.ok()) << t.Describe();
        operands.push_back({s->offset, s->size});
      }
      StatusOr<std::vector<analysis::Slice>> rs = ba.GetSlices(inst);
      ASSERT_TRUE(rs.ok()) << t.Describe();
      for (const analysis::Slice& s : *rs) results.push_back({s.offset, s.size});
      auto is_operand = [&](const ArenaSlice& s) {
        return std::find(operands.begin(), operands.end(), s) != operands.end();
      };
      auto is_result = [&](const ArenaSlice& s) {
        return std::find(results.begin(), results.end(), s) != results.end();
      };
      if (t.kind() == ThunkKind::kKernel) {
        // Note [kernel ABI]: operands, then results, in order.
        std::vector<ArenaSlice> abi = operands;
        abi.insert(abi.end(), results.begin(), results.end());
        const auto& k = std::get<KernelThunk>(t.body);
        const GemmThunk* gemm = gemm_of.contains(t.index) ? gemm_of[t.index] : nullptr;
        EXPECT_EQ(k.fallback, gemm != nullptr) << t.Describe();
        if (k.fallback && gemm != nullptr && !gemm->fallback_d) {
          // Note [epilogue fallback]: one operand of its gemm, then the bias
          // gradient the gemm's epilogue writes.
          ASSERT_EQ(k.args.size(), 2u) << t.Describe();
          EXPECT_TRUE(is_operand(k.args[0])) << t.Describe();
          EXPECT_EQ(k.args[1], gemm->bias.value()) << t.Describe();
          abi = k.args;
        } else if (k.fallback && gemm != nullptr) {
          // The epilogue after its gemm: the gemm's operands, the dot's
          // result in the scratch the plain gemm writes, then the results.
          const GemmThunk& g = *gemm;
          ASSERT_TRUE(g.fallback_d.has_value()) << t.Describe();
          abi = operands;
          abi.push_back(*g.fallback_d);
          abi.insert(abi.end(), results.begin(), results.end());
          EXPECT_EQ(k.args, abi) << t.Describe();
        } else {
          // A scratch argument comes last (Note [split column reductions]).
          if (!k.args.empty() && k.args.back().buffer < 0) abi.push_back(k.args.back());
          EXPECT_EQ(k.args, abi) << t.Describe();
        }
        auto image = std::find_if(images.begin(), images.end(), [&](const KernelRecord& k) {
          return k.entry == plan.name() && k.name == t.name;
        });
        ASSERT_NE(image, images.end()) << t.Describe() << " is not in the kernel index";
        EXPECT_EQ(CountPtxParams(std::string_view(ptx).substr(image->ptx_offset, image->ptx_size),
                                 t.name),
                  static_cast<int64_t>(abi.size()))
            << t.Describe();
      } else if (t.kind() == ThunkKind::kGemm) {
        const auto& g = std::get<GemmThunk>(t.body);
        EXPECT_TRUE(is_operand(g.a)) << t.Describe();
        EXPECT_TRUE(is_operand(g.b)) << t.Describe();
        EXPECT_TRUE(is_result(g.d)) << t.Describe();
        EXPECT_TRUE(g.c == g.d || is_operand(g.c)) << t.Describe();
        EXPECT_EQ(g.config.beta != 0, !(g.c == g.d) || is_operand(g.c)) << t.Describe();
        if (g.bias) {
          EXPECT_TRUE(program::WritesBias(g.config.epilogue) ? is_result(*g.bias)
                                                             : is_operand(*g.bias))
              << t.Describe();
        }
        if (g.aux) {  // GELU_AUX writes the pre-activation, DGELU reads it
          EXPECT_TRUE(program::ReadsAux(g.config.epilogue) ? is_operand(*g.aux) : is_result(*g.aux))
              << t.Describe();
        }
      }
    }
  }
  for (const auto& [kind, n] : seen) {
    EXPECT_EQ(counts.contains(kind) ? counts.at(kind) : 0, n) << kind;
  }
}

TEST(PlanReaderTest, KernelIndexRejectsOutOfRangeCode) {
  const std::vector<KernelRecord> index = {
      {.entry = "e", .name = "k", .ptx_offset = 10, .ptx_size = 100}};
  Status checked = CheckKernelIndex(index, 50, 0);
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.message(),
            "manifest kernels[0] (k): PTX [10, +100) is outside the ptx section of 50 bytes");
}

TEST(HostValuesTest, RoundTrip) {
  std::vector<double> v = {0, 1.5, -2.25, 3};
  for (ir::DType d : {ir::DType::kF32, ir::DType::kBF16, ir::DType::kF16}) {
    EXPECT_EQ(DecodeValues(d, EncodeValues(d, v)), v) << ir::DTypeName(d);
  }
  std::vector<double> ints = {0, -7, 123456, 3};
  EXPECT_EQ(DecodeValues(ir::DType::kS32, EncodeValues(ir::DType::kS32, ints)), ints);
  EXPECT_EQ(DecodeValues(ir::DType::kPred, EncodeValues(ir::DType::kPred, v)),
            (std::vector<double>{0, 1, 1, 1}));
  EXPECT_EQ(EncodeValues(ir::DType::kBF16, std::vector<double>{1.0}), std::string("\x80\x3f", 2));
}

}  // namespace
}  // namespace gptc::rt::gpu
