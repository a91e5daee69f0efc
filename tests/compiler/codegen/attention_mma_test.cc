// The attention kernels of a bf16 train step (Note [bf16 attention] in
// passes/autodiff_attention.h) on the emulated device against the
// evaluator, kernel by kernel: the forward (with its lse) on tensor cores
// where the head dim allows (Note [tensor-core attention forward]), and the
// flash backward's dk + dv and dq kernels. Shapes cover T not a multiple of
// the 64-row tile, T = 1, keys != queries, and head dims 16 to 128.
#include <fmt/format.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <regex>
#include <string>
#include <vector>

#include "compiler/codegen/attention_plan.h"
#include "compiler/codegen/lowering.h"
#include "passes/autodiff.h"
#include "passes/dce.h"
#include "passes/fusion.h"
#include "passes/mixed_precision.h"
#include "passes/simplify.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"

namespace gptc::codegen {
namespace {

struct Case {
  int64_t batch, heads, t, s, dim;
  bool causal;
  // GPT-2's layout: the output goes through [B, T, H*D] into a projection, so
  // do comes out of its bf16 dx gemm and delta sums rows of that layout
  // (Note [delta in the stored layout]); the backward kernels read do through
  // the transpose (Note [vector tile fill]).
  bool projected = false;
  // q, k, v sliced out of a [B, T, 3 H D] projection x w + b, which the
  // kernels read in bf16 with the bias added by its gemm (Note [bf16
  // attention projection] in passes/mixed_precision.h).
  bool packed = false;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << fmt::format("B{} H{} T{} S{} D{}{}{}{}", c.batch, c.heads, c.t, c.s, c.dim,
                     c.causal ? " causal" : "", c.projected ? " projected" : "",
                     c.packed ? " packed" : "");
}

// The loss of attention output %y: sum(y * w), or, projected, sum((y in
// [B, T, H*D]) . w * m).
std::string Loss(const Case& c) {
  const std::string y = fmt::format("f32[{},{},{},{}]", c.batch, c.heads, c.t, c.dim);
  if (!c.projected) {
    return fmt::format(R"(
  %w = {0} parameter(3)
  %yw = {0} mul(%y, %w)
  ROOT %loss = f32[] reduce(%yw), dimensions={{0,1,2,3}}, kind=sum)",
                       y);
  }
  const int64_t width = c.heads * c.dim;
  return fmt::format(R"(
  %yt = f32[{0},{1},{2},{3}] transpose(%y), dimensions={{0,2,1,3}}
  %yr = f32[{0},{1},{4}] reshape(%yt)
  %w = f32[{4},{4}] parameter(3)
  %z = f32[{0},{1},{4}] dot(%yr, %w), lhs_contracting={{2}}, rhs_contracting={{0}}
  %m = f32[{0},{1},{4}] parameter(4)
  %zm = f32[{0},{1},{4}] mul(%z, %m)
  ROOT %loss = f32[] reduce(%zm), dimensions={{0,1,2}}, kind=sum)",
                     c.batch, c.t, c.heads, c.dim, width);
}

// attention(q, k, v) with the frontend's f32 decomposition, and loss =
// sum(attention * w): the forward graph gptc differentiates.
std::string ForwardModule(const Case& c) {
  const std::string q = fmt::format("f32[{},{},{},{}]", c.batch, c.heads, c.t, c.dim);
  const std::string kv = fmt::format("f32[{},{},{},{}]", c.batch, c.heads, c.s, c.dim);
  const std::string scores = fmt::format("f32[{},{},{},{}]", c.batch, c.heads, c.t, c.s);
  const std::string rows = fmt::format("f32[{},{},{}]", c.batch, c.heads, c.t);
  const std::string mask = c.causal ? fmt::format(R"(
  %row = s32[{0},{1}] iota(), iota_dimension=0
  %col = s32[{0},{1}] iota(), iota_dimension=1
  %le = pred[{0},{1}] compare(%col, %row), direction=LE
  %leb = pred[{2},{3},{0},{1}] broadcast(%le), dimensions={{2,3}}
  %ninf = f32[] constant(-inf)
  %ninfb = {4} broadcast(%ninf), dimensions={{}}
  %masked = {4} select(%leb, %ss, %ninfb))",
                                                  c.t, c.s, c.batch, c.heads, scores)
                                    : fmt::format("\n  %masked = {} copy(%ss)", scores);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dim));
  // The operands: parameters, or slices of the packed projection (T = S).
  const int64_t width = c.heads * c.dim;
  const std::string operands =
      !c.packed ? fmt::format(R"(
  %q = {0} parameter(0)
  %k = {1} parameter(1)
  %v = {1} parameter(2))",
                              q, kv)
                : fmt::format(R"(
  %x = f32[{0},{1},{2}] parameter(0)
  %wqkv = f32[{2},{3}] parameter(1)
  %bqkv = f32[{3}] parameter(2)
  %xw = f32[{0},{1},{3}] dot(%x, %wqkv), lhs_contracting={{2}}, rhs_contracting={{0}}
  %bb = f32[{0},{1},{3}] broadcast(%bqkv), dimensions={{2}}
  %qkv = f32[{0},{1},{3}] add(%xw, %bb)
  %qs = f32[{0},{1},{2}] slice(%qkv), slice={{[0:{0}],[0:{1}],[0:{2}]}}
  %ks = f32[{0},{1},{2}] slice(%qkv), slice={{[0:{0}],[0:{1}],[{2}:{4}]}}
  %vs = f32[{0},{1},{2}] slice(%qkv), slice={{[0:{0}],[0:{1}],[{4}:{3}]}}
  %qr = f32[{0},{1},{5},{6}] reshape(%qs)
  %kr = f32[{0},{1},{5},{6}] reshape(%ks)
  %vr = f32[{0},{1},{5},{6}] reshape(%vs)
  %q = {7} transpose(%qr), dimensions={{0,2,1,3}}
  %k = {7} transpose(%kr), dimensions={{0,2,1,3}}
  %v = {7} transpose(%vr), dimensions={{0,2,1,3}})",
                              c.batch, c.t, width, 3 * width, 2 * width, c.heads, c.dim, q);
  return fmt::format(R"(module attention_test
%attention {{
  %q = {0} parameter(0)
  %k = {1} parameter(1)
  %v = {1} parameter(2)
  %s = {2} dot(%q, %k), lhs_batch={{0,1}}, rhs_batch={{0,1}}, lhs_contracting={{3}}, rhs_contracting={{3}}
  %scale = f32[] constant({5})
  %scaleb = {2} broadcast(%scale), dimensions={{}}
  %ss = {2} mul(%s, %scaleb){4}
  %mx = {3} reduce(%masked), dimensions={{3}}, kind=max
  %mxb = {2} broadcast(%mx), dimensions={{0,1,2}}
  %sh = {2} sub(%masked, %mxb)
  %e = {2} exp(%sh)
  %se = {3} reduce(%e), dimensions={{3}}, kind=sum
  %seb = {2} broadcast(%se), dimensions={{0,1,2}}
  %pr = {2} div(%e, %seb)
  ROOT %o = {0} dot(%pr, %v), lhs_batch={{0,1}}, rhs_batch={{0,1}}, lhs_contracting={{3}}, rhs_contracting={{2}}
}}
ENTRY %main {{{8}
  %y = {0} attention(%q, %k, %v), causal={6}, scale={5}, calls=%attention{7}
}}
)",
                     q, kv, scores, rows, mask, static_cast<float>(scale), c.causal, Loss(c),
                     operands);
}

// The forward module through mixed precision (bf16), autodiff and fusion.
std::unique_ptr<ir::Module> TrainStep(const Case& c) {
  std::unique_ptr<ir::Module> module = Parse(ForwardModule(c));
  if (module == nullptr) return nullptr;
  std::vector<std::unique_ptr<pass::Pass>> pipeline;
  pipeline.push_back(std::make_unique<passes::MixedPrecision>());  // bf16 by default
  pipeline.push_back(std::make_unique<passes::Autodiff>());
  pipeline.push_back(std::make_unique<passes::Simplify>());
  pipeline.push_back(std::make_unique<passes::Dce>());
  pipeline.push_back(std::make_unique<passes::Fusion>());
  for (const auto& p : pipeline) {
    StatusOr<bool> ran = p->Run(*module);
    EXPECT_TRUE(ran.ok()) << ran.status().message();
    if (!ran.ok()) return nullptr;
  }
  return module;
}

// The kind=attention fusions of the step: forward first, then the backward's.
std::vector<std::string> AttentionFusions(const ir::Module& module) {
  std::vector<std::string> names;
  for (const auto& inst : module.entry()->instructions()) {
    if (inst->opcode() == ir::Opcode::kFusion &&
        inst->attrs().fusion_kind == ir::FusionKind::kAttention) {
      names.push_back(inst->name());
    }
  }
  return names;
}

// Each shape on mma.sync and on wgmma (--attention-mma: attention_wgmma.h).
class AttentionKernelTest : public testing::TestWithParam<std::tuple<Case, AttentionMma>> {};

TEST_P(AttentionKernelTest, EveryAttentionKernelMatchesTheEvaluator) {
  const auto& [c, mma] = GetParam();
  std::unique_ptr<ir::Module> module = TrainStep(c);
  ASSERT_NE(module, nullptr);
  const std::vector<std::string> fusions = AttentionFusions(*module);
  // Out of a projection, dq, dk and dv are one fusion of two kernels writing
  // the packed gradient (Note [packed attention gradient]).
  ASSERT_EQ(fusions.size(), c.packed ? 2u : 3u) << "forward + lse, dk + dv, dq";
  if (c.packed) {
    // Every attention kernel reads the bf16 projection itself, no copy of it.
    for (const std::string& name : fusions) {
      const ir::Instruction* f = module->entry()->FindInstruction(name);
      const bool reads = std::any_of(f->operands().begin(), f->operands().end(), [&](auto* op) {
        return op->shape().ToString() ==
               fmt::format("bf16[{},{},{}]", c.batch, c.t, 3 * c.heads * c.dim);
      });
      EXPECT_TRUE(reads) << name;
    }
  }
  EmuKernelRunner runner(*module, {}, mma);
  // A kernel is the tensor-core one exactly when the head dim is a multiple
  // of 16 up to 128 (forward) or 64 (the backward's two), on the
  // instructions asked for.
  const bool wgmma = mma == AttentionMma::kWgmma;
  for (const CompiledKernel& k : runner.kernels().kernels) {
    const auto at = std::find(fusions.begin(), fusions.end(), k.spec.fusion);
    if (at == fusions.end() || k.code_of >= 0) continue;
    const bool tensor_cores = c.dim % 16 == 0 && c.dim <= (at == fusions.begin() ? 128 : 64);
    EXPECT_EQ(k.ptx.find("mma.sync.aligned.m16n8k16") != std::string::npos, tensor_cores && !wgmma)
        << k.spec.name;
    EXPECT_EQ(k.ptx.find("wgmma.mma_async.sync.aligned.m64n") != std::string::npos,
              tensor_cores && wgmma)
        << k.spec.name;
    EXPECT_EQ(k.spec.static_shared_bytes > 0, tensor_cores) << k.spec.name;
    // Note [overlapped wgmma forward]: where the forward's k and v tiles come
    // by cp.async, a softmax after the first key block's runs while a wgmma
    // group is in flight.
    if (at == fusions.begin() && wgmma && tensor_cores) {
      EXPECT_EQ(k.ptx.find("wgmma.wait_group.sync.aligned 1;") != std::string::npos,
                k.ptx.find("cp.async.cg.shared.global") != std::string::npos && c.s > 64)
          << k.spec.name;
    }
  }
  // The forward rounds its probabilities to bf16 before dividing by the row
  // sum, the decomposition after it: each side is off by up to 2^-9 of
  // sum_j p_j |v_j|, so an output may differ by 2^-8 max |v| (0.004 for the
  // random v in [-1, 1]), about 3% of the outputs' rms at these lengths. A
  // wrong fragment index or mask moves outputs by whole probabilities.
  for (size_t i = 0; i < fusions.size(); ++i) {
    SCOPED_TRACE(fusions[i]);
    runner.ExpectMatchesEvaluator(fusions[i], i == 0 ? 3e-2 : 1e-2);
  }
}

// The plans of the step's three attention fusions (attention_plan.h): the
// forward's attention and lse ops, the backward's dk + dv by key rows and dq
// by query rows, their sizes, and which run on tensor cores (a head dim that
// is a multiple of 16: 16 does, 24 does not).
TEST(AttentionPlanTest, PlansTheForwardAndBothBackwardFusions) {
  for (int64_t dim : {16, 24}) {
    SCOPED_TRACE(dim);
    std::unique_ptr<ir::Module> module = TrainStep(Case{1, 2, 64, 48, dim, false});
    ASSERT_NE(module, nullptr);
    const std::vector<std::string> fusions = AttentionFusions(*module);
    ASSERT_EQ(fusions.size(), 3u);
    StatusOr<AttentionForward> forward =
        PlanAttentionForward(*module->entry()->FindInstruction(fusions[0]));
    ASSERT_TRUE(forward.ok()) << forward.status().message();
    EXPECT_NE(forward->attn, nullptr);
    EXPECT_NE(forward->lse, nullptr);
    EXPECT_EQ(forward->roots.size(), 2u);
    EXPECT_EQ(forward->batch, 1);
    EXPECT_EQ(forward->heads, 2);
    EXPECT_EQ(forward->tq, 64);
    EXPECT_EQ(forward->tk, 48);
    EXPECT_EQ(forward->dim, dim);
    EXPECT_FALSE(forward->causal);
    EXPECT_TRUE(forward->matmul == ir::DType::kBF16);
    EXPECT_EQ(forward->tensor_cores, dim == 16);
    ASSERT_EQ(forward->chains.size(), forward->outputs.size());
    for (size_t b = 1; b < fusions.size(); ++b) {
      StatusOr<AttentionBackward> backward =
          PlanAttentionBackward(*module->entry()->FindInstruction(fusions[b]));
      ASSERT_TRUE(backward.ok()) << backward.status().message();
      // dq alone, or dk with dv.
      if (backward->by_query()) {
        EXPECT_EQ(backward->grads[1], nullptr);
        EXPECT_EQ(backward->roots.size(), 1u);
      } else {
        EXPECT_NE(backward->grads[1], nullptr);
        EXPECT_NE(backward->grads[2], nullptr);
      }
      EXPECT_EQ(backward->tq, 64);
      EXPECT_EQ(backward->tk, 48);
      EXPECT_EQ(backward->tensor_cores, dim == 16);
      for (const OutputChain& chain : backward->chains) EXPECT_GE(chain.root, 0);
    }
  }
}

// Seeded defects in the new paths of the tensor-core kernels, each written
// into a kernel's emitted MLIR and lowered again for the emulated device:
// the comparison with the evaluator or the emulator's own checks must fail.
//   - "no diagonal mask" (Note [diagonal masks]): the branch that masks the
//     blocks crossing the diagonal never taken;
//   - "a missing barrier" (Note [pipelined tile fill], Note [staged row
//     statistics]): the block's first barrier gone, so the next block's
//     copies overwrite a stage that other warps still read.
struct Defect {
  const char* what;
  std::string (*mutate)(const std::string& mlir);
  const char* finding;  // in one of the failures it causes
};

std::string NoDiagonalMask(const std::string& mlir) {
  // The masking branch yields the block's 32 (masked) scores or probabilities.
  static const std::regex kBranch(R"((\n\s*)(%[\w:]+ = scf\.if )(%\w+)( -> \((?:f32, ){31}f32\)))");
  return std::regex_replace(mlir, kBranch, "$1%seeded = arith.constant false$1$2%seeded$4",
                            std::regex_constants::format_first_only);
}

std::string MissingBarrier(const std::string& mlir) {
  static const std::regex kBarrier(R"(\n\s*gpu\.barrier)");
  return std::regex_replace(mlir, kBarrier, "", std::regex_constants::format_first_only);
}

std::string MissingWgmmaWait(const std::string& mlir) {
  static const std::regex kWait(
      R"(\n\s*llvm\.inline_asm has_side_effects "wgmma\.wait_group[^\n]*)");
  return std::regex_replace(mlir, kWait, "", std::regex_constants::format_first_only);
}

std::string MissingProxyFence(const std::string& mlir) {
  static const std::regex kFence(
      R"(\n\s*llvm\.inline_asm has_side_effects "fence\.proxy\.async[^\n]*)");
  return std::regex_replace(mlir, kFence, "", std::regex_constants::format_first_only);
}

// Each defect seeded in each attention kernel of a pipelined step is caught.
void ExpectDefectsCaught(AttentionMma mma, const std::vector<Defect>& defects) {
  const Case c{1, 2, 192, 192, 64, true, true, true};  // three key blocks, pipelined
  std::unique_ptr<ir::Module> module = TrainStep(c);
  ASSERT_NE(module, nullptr);
  const std::vector<std::string> fusions = AttentionFusions(*module);
  ASSERT_EQ(fusions.size(), 2u);  // the forward; the backward's two kernels
  for (const Defect& defect : defects) {
    for (const std::string& fusion : fusions) {
      SCOPED_TRACE(fmt::format("{} in {}", defect.what, fusion));
      bool seeded = false;
      EmuKernelRunner runner(
          *module,
          [&](CompiledKernel& k) {
            if (k.spec.fusion != fusion || k.code_of >= 0) return;
            const std::string mutated = defect.mutate(k.mlir);
            ASSERT_NE(mutated, k.mlir) << "nothing to seed the defect in";
            CodegenOptions options;
            options.emit_host = true;
            options.host_symbol_prefix = "gptc_emu_test_";
            StatusOr<LoweredKernel> lowered = LowerMlirText(mutated, k.spec.name, options);
            ASSERT_TRUE(lowered.ok()) << lowered.status().message();
            k.host = lowered->host;
            seeded = true;
          },
          mma);
      ASSERT_TRUE(seeded);
      ::testing::TestPartResultArray failures;
      {
        ::testing::ScopedFakeTestPartResultReporter reporter(
            ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
        runner.ExpectMatchesEvaluator(fusion, 1e-2);
      }
      bool found = false;
      for (int i = 0; i < failures.size(); ++i) {
        found |= failures.GetTestPartResult(i).message() != nullptr &&
                 std::string(failures.GetTestPartResult(i).message()).find(defect.finding) !=
                     std::string::npos;
      }
      EXPECT_TRUE(found) << failures.size() << " failures, none naming '" << defect.finding << "'";
    }
  }
}

TEST(AttentionDefectTest, SeededDefectsAreCaught) {
  ExpectDefectsCaught(AttentionMma::kMmaSync,
                      {Defect{"no diagonal mask", NoDiagonalMask, "evaluator"},
                       Defect{"a missing barrier", MissingBarrier, "race"}});
}

// On wgmma (Note [emulated wgmma asynchrony] in runtime/emu/warpgroup.h):
// without the barrier the first wgmma reads tiles other threads stored
// since the last one; without a wait, the register fence takes accumulators
// in flight; without the proxy fence, cp.async's stores are not visible to
// wgmma.
TEST(AttentionDefectTest, SeededWgmmaDefectsAreCaught) {
  ExpectDefectsCaught(
      AttentionMma::kWgmma,
      {Defect{"no diagonal mask", NoDiagonalMask, "evaluator"},
       Defect{"a missing barrier", MissingBarrier, "after the block's last barrier"},
       Defect{"a missing wgmma wait", MissingWgmmaWait,
              "before a wgmma.wait_group retired its group"},
       Defect{"a missing proxy fence", MissingProxyFence, "no fence.proxy.async.shared::cta"}});
}

// Note [longest-first tiles]: the heads a group walks together divide
// batch * heads and keep their k and v within 8 MiB.
TEST(AttentionPlanTest, TileGroupsDivideTheHeadsAndFitTheL2Budget) {
  constexpr int64_t kHead124m = 2 * 2 * 1024 * 64;    // k and v of one gpt2-124m head, bf16
  EXPECT_EQ(TileGroupHeads(16 * 12, kHead124m), 32);  // batch 16: 192 heads, 256 KiB each
  EXPECT_EQ(TileGroupHeads(12, kHead124m), 12);       // batch 1: all of them
  EXPECT_EQ(TileGroupHeads(5 * 7, kHead124m), 7);     // 32 fit; 7 divides 35
  EXPECT_EQ(TileGroupHeads(7 * 11, 1 << 20), 7);      // 8 fit; 7 is the largest divisor
  EXPECT_EQ(TileGroupHeads(6, 64 << 20), 1);          // not even one fits: one at a time
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionKernelTest,
    testing::Combine(testing::Values(Case{1, 2, 64, 64, 16, true},  // one whole tile
                                     Case{2, 1, 100, 100, 64,
                                          true},  // T not a multiple of 64, GPT-2's dim
                                     Case{1, 2, 1, 1, 32, true},     // T = 1
                                     Case{1, 1, 70, 40, 48, false},  // keys != queries, 3 k-steps
                                     Case{1, 1, 65, 65, 128, true},  // the largest head dim
                                     Case{1, 2, 20, 20, 24, true},   // CUDA cores (24 % 16 != 0)
                                     Case{2, 2, 100, 100, 64, true, true},  // GPT-2's layout
                                     Case{1, 2, 20, 20, 24, true, true},  // the same on CUDA cores
                                     // Note [pipelined tile fill]: whole tiles of the bf16
                                     // copies, copied with cp.async into two stages.
                                     Case{1, 2, 192, 192, 64, true, true},  // three key blocks
                                     Case{1, 1, 128, 192, 32, false},  // keys != queries, no mask
                                     // Note [bf16 attention projection]: q, k, v read out of
                                     // the bf16 [B, T, 3C] projection (cp.async from offsets
                                     // C and 2C of its rows), and one partial tile.
                                     Case{2, 2, 128, 128, 32, true, true, true},
                                     Case{1, 2, 100, 100, 64, true, true, true},
                                     // One gpt2-124m layer at batch 1 (about 9 s).
                                     Case{1, 12, 1024, 1024, 64, true, true, true}),
                     testing::Values(AttentionMma::kMmaSync, AttentionMma::kWgmma)),
    [](const testing::TestParamInfo<std::tuple<Case, AttentionMma>>& info) {
      const Case& c = std::get<0>(info.param);
      return fmt::format("b{}h{}t{}s{}d{}{}{}{}_{}", c.batch, c.heads, c.t, c.s, c.dim,
                         c.causal ? "causal" : "", c.projected ? "projected" : "",
                         c.packed ? "packed" : "",
                         std::get<1>(info.param) == AttentionMma::kWgmma ? "wgmma" : "mma");
    });

}  // namespace
}  // namespace gptc::codegen
