// Every kernel and every gemm of the gpt2-tiny artifact on the GPU (and on
// the emulated device, in every CI run) against the reference evaluator, and
// on a GPU machine the GPU against the emulator, one instruction at a time:
// random values in the operand slices, the instruction's thunks run by the executor (all kernels of
// a multi-kernel instruction, in order: Note [multi-kernel instructions]), the result slices read
// back and compared with the evaluator run on the instruction (its fused computation) from the
// artifact's IR. Two input sets: normal(0, 1), and positive values (so that sqrt, log and rsqrt of
// inputs are exercised away from NaN). Prints the worst error of every instruction. Tolerances:
// DefaultRtol of the result's dtype, the 16-bit one for f32 results of instructions that touch
// 16-bit floats (Touches16Bit).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>

#include "compiler/ir/computation.h"
#include "runtime/gpu/host_values.h"
#include "tests/runtime/gpu/gpu_test_util.h"

namespace gptc::rt::gpu::testing {
namespace {

// The thunks of one entry instruction, in plan order.
struct Group {
  std::string instruction;
  ThunkKind kind;
  std::vector<size_t> thunks;
};

std::vector<Group> Groups(const EntryPlan& plan, ThunkKind kind) {
  std::vector<Group> out;
  std::map<std::string, size_t> index;
  for (const Thunk& t : plan.thunks) {
    if (t.kind() != kind) continue;
    // Note [epilogue fallback]: a gemm's fallback kernel runs only where
    // cuBLASLt refuses the epilogue (tests/tools/gptrun_emu_defects_test.cc).
    if (const auto* k = std::get_if<KernelThunk>(&t.body); k != nullptr && k->fallback) continue;
    auto [it, inserted] = index.try_emplace(t.instruction(), out.size());
    if (inserted) out.push_back({t.instruction(), kind, {}});
    out[it->second].thunks.push_back(static_cast<size_t>(t.index));
  }
  return out;
}

enum class Inputs { kNormal, kPositive };

// Whether `inst` reads or computes any 16-bit float (its operands, or any
// value of its called computations). Then an f32 result may differ from the
// evaluator's by a 16-bit rounding step: an intermediate computed in another
// order can round to the neighbouring bf16 value, and cuBLASLt skips the bf16
// rounding of a dot result before its epilogue (gemm_plan.h notes). Such
// results are held to the 16-bit tolerance.
bool Touches16Bit(const ir::Instruction& inst) {
  auto is16 = [](const ir::Shape& s) {
    return s.dtype() == ir::DType::kBF16 || s.dtype() == ir::DType::kF16;
  };
  for (const ir::Instruction* o : inst.operands()) {
    if (!o->shape().is_tuple() && is16(o->shape())) return true;
  }
  if (inst.called_computation() == nullptr) return false;
  for (const auto& i : inst.called_computation()->instructions()) {
    if ((!i->shape().is_tuple() && is16(i->shape())) || Touches16Bit(*i)) return true;
  }
  return false;
}

// Whether `x` is a narrowing convert of `y` (both operands of one
// instruction): x = convert(y) in the entry, or x and y outputs of one
// multi-output fusion whose x is a convert of its y. A gemm may then read
// either for the same value (gemm_plan.cc: a bias gradient summed from the
// dot's bf16 operand instead of its f32 source), so the test feeds them
// consistent values, as every producer would.
bool IsConvertOf(const ir::Instruction* x, const ir::Instruction* y) {
  if (x->opcode() == ir::Opcode::kConvert && x->operand(0) == y) return true;
  if (x->opcode() != ir::Opcode::kGetTupleElement || y->opcode() != ir::Opcode::kGetTupleElement ||
      x->operand(0) != y->operand(0) || x->operand(0)->called_computation() == nullptr) {
    return false;
  }
  const ir::Instruction* root = x->operand(0)->called_computation()->root();
  if (root->opcode() != ir::Opcode::kTuple) return false;
  const ir::Instruction* xo = root->operand(x->attrs().index);
  const ir::Instruction* yo = root->operand(y->attrs().index);
  return xo->opcode() == ir::Opcode::kConvert && xo->operand(0) == yo;
}

// One run of a group: its instruction, the operands it was given and the
// values of its result slices.
struct GroupRun {
  const ir::Instruction* inst = nullptr;
  std::vector<eval::Literal> operands;
  std::vector<ir::Shape> shapes;             // per result
  std::vector<std::vector<double>> results;  // per result
};

// Runs one group on the device with random operands (the same for a given
// instruction and `inputs` on every device); an error names the instruction.
StatusOr<GroupRun> RunGroup(GpuHarness& gpu, const Tiny& tiny, size_t e, const Group& g,
                            Inputs inputs) {
  const program::TrainEntry& entry = tiny.loaded.program.entries[e];
  GroupRun run;
  run.inst = entry.module->entry()->FindInstruction(g.instruction);
  const ir::Instruction* inst = run.inst;
  if (inst == nullptr) return Error("%{} is not in entry {}", g.instruction, entry.name());
  const analysis::BufferAssignment& ba = tiny.assignments[e];
  std::mt19937_64 rng(std::hash<std::string>{}(g.instruction) + static_cast<int>(inputs));
  std::map<int64_t, std::vector<double>> by_offset;  // aliased operands share values
  std::vector<eval::Literal>& operands = run.operands;
  for (int64_t i = 0; i < inst->operand_count(); ++i) {
    const ir::Shape& shape = inst->operand(i)->shape();
    ASSIGN_OR_RETURN(analysis::Slice slice, ba.GetSlice(inst->operand(i)));
    auto it = by_offset.find(slice.offset);
    if (it == by_offset.end()) {
      eval::Literal random = eval::Literal::Random(shape, rng);
      if (inputs == Inputs::kPositive && ir::IsFloat(shape.dtype())) {
        for (double& v : random.values) v = 0.25 + std::abs(v);
        random.values = DecodeValues(shape.dtype(), EncodeValues(shape.dtype(), random.values));
      }
      for (int64_t j = 0; j < i; ++j) {
        if ((IsConvertOf(inst->operand(i), inst->operand(j)) ||
             IsConvertOf(inst->operand(j), inst->operand(i))) &&
            operands[j].values.size() == random.values.size()) {
          random.values =
              DecodeValues(shape.dtype(), EncodeValues(shape.dtype(), operands[j].values));
        }
      }
      it = by_offset.emplace(slice.offset, std::move(random.values)).first;
      RETURN_IF_ERROR(
          gpu.Upload(e, {slice.offset, slice.size}, EncodeValues(shape.dtype(), it->second)));
    }
    if (static_cast<int64_t>(it->second.size()) != shape.num_elements()) {
      return Error("%{}: operands {} shares a slice with an operand of another size", inst->name(),
                   i);
    }
    operands.push_back(eval::Literal{.shape = shape, .values = it->second});
  }
  RETURN_IF_ERROR(gpu.Run(e, g.thunks));
  ASSIGN_OR_RETURN(std::vector<analysis::Slice> slices, ba.GetSlices(inst));
  std::vector<ir::Shape> leaves;
  if (inst->shape().is_tuple()) {
    for (const ir::Shape& leaf : inst->shape().tuple_elements()) leaves.push_back(leaf);
  } else {
    leaves.push_back(inst->shape());
  }
  if (slices.size() != leaves.size()) {
    return Error("%{}: {} result slices for {} results", inst->name(), slices.size(),
                 leaves.size());
  }
  for (size_t r = 0; r < slices.size(); ++r) {
    const ir::Shape& shape = leaves[r];
    ASSIGN_OR_RETURN(std::string bytes, gpu.Download(e, {slices[r].offset, slices[r].size}));
    bytes.resize(shape.num_elements() * ir::DTypeBytes(shape.dtype()));
    run.shapes.push_back(shape);
    run.results.push_back(DecodeValues(shape.dtype(), bytes));
  }
  return run;
}

// Runs one group on the device and the evaluator; returns the report line,
// or an error that names the instruction.
StatusOr<std::string> CheckGroup(GpuHarness& gpu, const Tiny& tiny, size_t e, const Group& g,
                                 Inputs inputs, bool* failed) {
  ASSIGN_OR_RETURN(GroupRun run, RunGroup(gpu, tiny, e, g, inputs));
  const ir::Instruction* inst = run.inst;
  ASSIGN_OR_RETURN(std::vector<eval::Literal> expected, EvaluateInstruction(*inst, run.operands));
  if (run.results.size() != expected.size()) {
    return Error("%{}: {} result slices, the evaluator gives {} results", inst->name(),
                 run.results.size(), expected.size());
  }
  const Thunk& first = tiny.plans[e].thunks[g.thunks[0]];
  std::string line =
      fmt::format("{} {:<34} {:<40}", ThunkKindName(g.kind), first.name, "%" + g.instruction);
  for (size_t r = 0; r < run.results.size(); ++r) {
    const ir::Shape& shape = expected[r].shape;
    const std::vector<double>& got = run.results[r];
    const double rtol = shape.dtype() == ir::DType::kF32 && Touches16Bit(*inst)
                            ? DefaultRtol(ir::DType::kBF16)
                            : DefaultRtol(shape.dtype());
    Comparison c = Compare(got, expected[r].values, rtol);
    line +=
        fmt::format(" | out{} {} worst {:.2e} (gpu {:.6g} ref {:.6g} at {}) tol {:.0e}{}", r,
                    shape.ToString(), c.worst, c.gpu, c.ref, c.worst_index, rtol,
                    c.ok() ? "" : fmt::format(" FAIL: {} of {} elements", c.failures, got.size()));
    if (!c.ok()) *failed = true;
  }
  return line;
}

void CheckEntry(TestBackend backend, std::string_view entry_name, ThunkKind kind) {
  std::string why;
  const Tiny* tiny = LoadTiny(&why);
  ASSERT_NE(tiny, nullptr) << why;
  StatusOr<std::unique_ptr<TestDevice>> device = TestDevice::Open(backend, {tiny}, &why);
  ASSERT_TRUE(device.ok()) << device.status().message();
  if (*device == nullptr) GTEST_SKIP() << why;
  StatusOr<std::unique_ptr<GpuHarness>> gpu = GpuHarness::Create(**device, *tiny);
  ASSERT_TRUE(gpu.ok()) << gpu.status().message();
  size_t e = 0;
  while (e < tiny->plans.size() && tiny->plans[e].name() != entry_name) ++e;
  if (e == tiny->plans.size()) GTEST_SKIP() << tiny->path << " has no entry " << entry_name;
  std::vector<Group> groups = Groups(tiny->plans[e], kind);
  ASSERT_FALSE(groups.empty());
  int checked = 0;
  for (Inputs inputs : {Inputs::kNormal, Inputs::kPositive}) {
    std::printf("%s %s thunks, %s inputs:\n", std::string(entry_name).c_str(),
                std::string(ThunkKindName(kind)).c_str(),
                inputs == Inputs::kNormal ? "normal(0,1)" : "positive");
    for (const Group& g : groups) {
      bool failed = false;
      StatusOr<std::string> line = CheckGroup(**gpu, *tiny, e, g, inputs, &failed);
      if (!line.ok()) {
        ADD_FAILURE() << line.status().message();
        continue;
      }
      std::printf("  %s\n", line->c_str());
      if (failed) ADD_FAILURE() << *line;
      ++checked;
    }
  }
  std::printf("%d instruction runs checked\n", checked);
}

class ThunkTest : public ::testing::TestWithParam<TestBackend> {};

TEST_P(ThunkTest, TrainStepKernelsMatchEvaluator) {
  CheckEntry(GetParam(), "train_step", ThunkKind::kKernel);
}
TEST_P(ThunkTest, TrainStepGemmsMatchEvaluator) {
  CheckEntry(GetParam(), "train_step", ThunkKind::kGemm);
}
TEST_P(ThunkTest, LogitsKernelsMatchEvaluator) {
  CheckEntry(GetParam(), "logits", ThunkKind::kKernel);
}
TEST_P(ThunkTest, LogitsGemmsMatchEvaluator) { CheckEntry(GetParam(), "logits", ThunkKind::kGemm); }
TEST_P(ThunkTest, EvalKernelsMatchEvaluator) { CheckEntry(GetParam(), "eval", ThunkKind::kKernel); }
TEST_P(ThunkTest, EvalGemmsMatchEvaluator) { CheckEntry(GetParam(), "eval", ThunkKind::kGemm); }

// Every thunk of every entry on the GPU and on the emulated device, same
// operands, outputs compared with each other (on a GPU machine only: the
// bundle's tiny artifact carries its emulator library). They run the same
// code; only the approx math (exactly rounded on the host), the order of
// atomics and cuBLASLt's accumulation order may differ: f32 kernel results
// within 1e-5 (the 16-bit tolerance for kernels that touch bf16), one bf16
// rounding step for 16-bit results, gemms within the evaluator's tolerance.
TEST(GpuVsEmulatorTest, EveryThunkAgrees) {
  GPTC_SKIP_WITHOUT_GPU();
  std::string why;
  const Tiny* tiny = LoadTiny(&why);
  ASSERT_NE(tiny, nullptr) << why;
  using Runs = std::map<std::string, GroupRun>;
  auto collect = [&](TestBackend backend, Runs& out) {
    StatusOr<std::unique_ptr<TestDevice>> device = TestDevice::Open(backend, {tiny}, &why);
    ASSERT_TRUE(device.ok()) << device.status().message();
    ASSERT_NE(*device, nullptr) << why;
    StatusOr<std::unique_ptr<GpuHarness>> harness = GpuHarness::Create(**device, *tiny);
    ASSERT_TRUE(harness.ok()) << harness.status().message();
    for (size_t e = 0; e < tiny->plans.size(); ++e) {
      for (ThunkKind kind : {ThunkKind::kKernel, ThunkKind::kGemm}) {
        for (const Group& g : Groups(tiny->plans[e], kind)) {
          StatusOr<GroupRun> run = RunGroup(**harness, *tiny, e, g, Inputs::kNormal);
          ASSERT_TRUE(run.ok()) << TestBackendName(backend) << ": " << run.status().message();
          out[fmt::format("{} {} {}", tiny->plans[e].name(), ThunkKindName(kind), g.instruction)] =
              std::move(run).value();
        }
      }
    }
  };
  Runs gpu, emu;
  collect(TestBackend::kGpu, gpu);
  collect(TestBackend::kEmu, emu);
  ASSERT_EQ(gpu.size(), emu.size());
  int failed = 0;
  for (const auto& [key, g] : gpu) {
    const GroupRun& m = emu.at(key);
    std::string line = key;
    for (size_t r = 0; r < g.results.size(); ++r) {
      const ir::DType dtype = g.shapes[r].dtype();
      const bool gemm = key.find(" gemm ") != std::string::npos;
      double rtol = dtype == ir::DType::kF32 ? 1e-5 : dtype == ir::DType::kBF16 ? 8e-3 : 0;
      if (gemm) {
        rtol = dtype == ir::DType::kF32 && Touches16Bit(*g.inst) ? DefaultRtol(ir::DType::kBF16)
                                                                 : DefaultRtol(dtype);
      } else if (dtype == ir::DType::kF32 && Touches16Bit(*g.inst)) {
        // A kernel that rounds an intermediate to bf16 (the tensor-core
        // attention's p and ds): the GPU's ex2.approx and mma accumulation
        // can put it on the neighbouring bf16 value, and a whole row of the
        // result moves with it (the first GPU run: 16 elements of one dk row
        // of grad.h.0.attn.attention.11 3.3e-3 apart, the rest within 3e-7).
        rtol = DefaultRtol(ir::DType::kBF16);
      }
      Comparison c = Compare(g.results[r], m.results[r], rtol);
      line += fmt::format(" | out{} worst {:.2e} (gpu {:.6g} emu {:.6g} at {}) tol {:.0e}{}", r,
                          c.worst, c.gpu, c.ref, c.worst_index, rtol,
                          c.ok() ? "" : fmt::format(" FAIL: {} elements", c.failures));
      if (!c.ok()) ++failed;
    }
    std::printf("  %s\n", line.c_str());
  }
  EXPECT_EQ(failed, 0) << "results where the GPU and the emulator differ (lines above)";
  std::printf("%zu instructions compared, GPU against emulator\n", gpu.size());
}

INSTANTIATE_TEST_SUITE_P(Devices, ThunkTest,
                         ::testing::Values(TestBackend::kEmu, TestBackend::kGpu),
                         [](const auto& info) { return TestBackendName(info.param); });

}  // namespace
}  // namespace gptc::rt::gpu::testing
