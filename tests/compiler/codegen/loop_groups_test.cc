// Multi-shape loop fusions and the horizontal optimizer fusion (Note [loop
// groups]), and the cross-entropy fusion through the row-reduction emitter.
#include <gtest/gtest.h>

#include "compiler/codegen/codegen.h"
#include "tests/compiler/codegen/codegen_test_util.h"

namespace gptc::codegen {
namespace {

// AdamW over two parameters of different shapes, reading scalar lr / step /
// clip scale, writing new params, m and v.
constexpr std::string_view kOptimizerModule = R"(module optimizer_test

%adamw {
  %w = f32[768,2304] parameter(0)
  %gw = f32[768,2304] parameter(1)
  %mw = f32[768,2304] parameter(2)
  %b = f32[2304] parameter(3)
  %gb = f32[2304] parameter(4)
  %mb = f32[2304] parameter(5)
  %lr = f32[] parameter(6)
  %clip = f32[] parameter(7)
  %beta = f32[] constant(0.9)
  %one_minus = f32[] constant(0.1)
  %lrw = f32[768,2304] broadcast(%lr), dimensions={}
  %cw = f32[768,2304] broadcast(%clip), dimensions={}
  %betaw = f32[768,2304] broadcast(%beta), dimensions={}
  %omw = f32[768,2304] broadcast(%one_minus), dimensions={}
  %gcw = f32[768,2304] mul(%gw, %cw)
  %m0 = f32[768,2304] mul(%mw, %betaw)
  %m1 = f32[768,2304] mul(%gcw, %omw)
  %mw2 = f32[768,2304] add(%m0, %m1)
  %stepw = f32[768,2304] mul(%mw2, %lrw)
  %w2 = f32[768,2304] sub(%w, %stepw)
  %w2h = bf16[768,2304] convert(%w2)
  %lrb = f32[2304] broadcast(%lr), dimensions={}
  %cb = f32[2304] broadcast(%clip), dimensions={}
  %betab = f32[2304] broadcast(%beta), dimensions={}
  %omb = f32[2304] broadcast(%one_minus), dimensions={}
  %gcb = f32[2304] mul(%gb, %cb)
  %n0 = f32[2304] mul(%mb, %betab)
  %n1 = f32[2304] mul(%gcb, %omb)
  %mb2 = f32[2304] add(%n0, %n1)
  %stepb = f32[2304] mul(%mb2, %lrb)
  %b2 = f32[2304] sub(%b, %stepb)
  ROOT %t = (f32[768,2304], f32[768,2304], bf16[768,2304], f32[2304], f32[2304]) tuple(%w2, %mw2, %w2h, %b2, %mb2)
}

%scalar_and_vector {
  %x = f32[] parameter(0)
  %y = f32[3,5] parameter(1)
  %two = f32[] constant(2)
  %x2 = f32[] mul(%x, %two)
  %xb = f32[3,5] broadcast(%x2), dimensions={}
  %z = f32[3,5] add(%y, %xb)
  ROOT %t = (f32[], f32[3,5]) tuple(%x2, %z)
}

ENTRY %main {
  %w = f32[768,2304] parameter(0)
  %gw = f32[768,2304] parameter(1)
  %mw = f32[768,2304] parameter(2)
  %b = f32[2304] parameter(3)
  %gb = f32[2304] parameter(4)
  %mb = f32[2304] parameter(5)
  %lr = f32[] parameter(6)
  %clip = f32[] parameter(7)
  %y = f32[3,5] parameter(8)
  %opt = (f32[768,2304], f32[768,2304], bf16[768,2304], f32[2304], f32[2304]) fusion(%w, %gw, %mw, %b, %gb, %mb, %lr, %clip), kind=optimizer, calls=%adamw
  %sv = (f32[], f32[3,5]) fusion(%lr, %y), kind=loop, calls=%scalar_and_vector
  ROOT %t = ((f32[768,2304], f32[768,2304], bf16[768,2304], f32[2304], f32[2304]), (f32[], f32[3,5])) tuple(%opt, %sv)
}
)";

TEST(LoopGroupsTest, OptimizerFusionPartitionsBlocksAmongShapes) {
  auto module = Parse(kOptimizerModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  EXPECT_TRUE(kernels.skipped.empty());
  ASSERT_EQ(kernels.kernels.size(), 2u);
  const KernelSpec& opt = kernels.kernels[0].spec;
  EXPECT_EQ(opt.kind, ir::FusionKind::kOptimizer);
  EXPECT_EQ(opt.block.x, 256);
  // Group [768,2304]: 442,368 vectors of 4 -> 1728 blocks of 256;
  // group [2304]: 576 vectors of 4 -> 3 blocks.
  EXPECT_EQ(opt.grid.x, 1728 + 3);
  ASSERT_EQ(opt.params.size(), 13u);
  EXPECT_EQ(opt.params[6].shape.ToString(), "f32[]");
  EXPECT_EQ(opt.params[6].min_alignment, 4);  // a scalar: read one element
  EXPECT_EQ(opt.params[0].min_alignment, 16);
  EXPECT_NE(kernels.kernels[0].ptx.find("st.global.v4.f32"), std::string::npos);

  const KernelSpec& sv = kernels.kernels[1].spec;  // a scalar group and a [3,5] group
  EXPECT_EQ(sv.grid.x, 2);
}

// The cross-entropy fusion: the softmax-cross-entropy composite (inlined)
// with its gradient, rows of 50304 logits.
constexpr std::string_view kCrossEntropyModule = R"(module ce_test

%softmax_cross_entropy {
  %p0 = f32[2,16,50304] parameter(0)
  %p1 = s32[2,16] parameter(1)
  %iota = s32[2,16,50304] iota(), iota_dimension=2
  %nc = s32[] constant(50257)
  %ncb = s32[2,16,50304] broadcast(%nc), dimensions={}
  %valid = pred[2,16,50304] compare(%iota, %ncb), direction=LT
  %ninf = f32[] constant(-inf)
  %ninfb = f32[2,16,50304] broadcast(%ninf), dimensions={}
  %x = f32[2,16,50304] select(%valid, %p0, %ninfb)
  %max = f32[2,16] reduce(%x), dimensions={2}, kind=max
  %maxb = f32[2,16,50304] broadcast(%max), dimensions={0,1}
  %d = f32[2,16,50304] sub(%x, %maxb)
  %e = f32[2,16,50304] exp(%d)
  %sum = f32[2,16] reduce(%e), dimensions={2}, kind=sum
  %log = f32[2,16] log(%sum)
  %lse = f32[2,16] add(%log, %max)
  %tb = s32[2,16,50304] broadcast(%p1), dimensions={0,1}
  %hit = pred[2,16,50304] compare(%iota, %tb), direction=EQ
  %zero = f32[] constant(0)
  %zb = f32[2,16,50304] broadcast(%zero), dimensions={}
  %xt = f32[2,16,50304] select(%hit, %x, %zb)
  %picked = f32[2,16] reduce(%xt), dimensions={2}, kind=sum
  ROOT %loss = f32[2,16] sub(%lse, %picked)
}

%ce {
  %logits = f32[2,16,50304] parameter(0)
  %targets = s32[2,16] parameter(1)
  %loss = f32[2,16] softmax-cross-entropy(%logits, %targets), num_classes=50257, calls=%softmax_cross_entropy
  %m = f32[2,16] reduce(%logits), dimensions={2}, kind=max
  %mb = f32[2,16,50304] broadcast(%m), dimensions={0,1}
  %d = f32[2,16,50304] sub(%logits, %mb)
  %e = f32[2,16,50304] exp(%d)
  %s = f32[2,16] reduce(%e), dimensions={2}, kind=sum
  %sb = f32[2,16,50304] broadcast(%s), dimensions={0,1}
  %p = f32[2,16,50304] div(%e, %sb)
  %dl = bf16[2,16,50304] convert(%p)
  ROOT %t = (f32[2,16], bf16[2,16,50304]) tuple(%loss, %dl)
}

ENTRY %main {
  %logits = f32[2,16,50304] parameter(0)
  %targets = s32[2,16] parameter(1)
  ROOT %f = (f32[2,16], bf16[2,16,50304]) fusion(%logits, %targets), kind=cross_entropy, calls=%ce
}
)";

TEST(CrossEntropyTest, RowReductionEmitterInlinesTheComposite) {
  auto module = Parse(kCrossEntropyModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);
  EXPECT_TRUE(kernels.skipped.empty());
  ASSERT_EQ(kernels.kernels.size(), 1u);
  const KernelSpec& ce = kernels.kernels[0].spec;
  EXPECT_EQ(ce.kind, ir::FusionKind::kCrossEntropy);
  EXPECT_EQ(ce.grid.x, 32);    // a block per row
  EXPECT_EQ(ce.block.x, 512);  // rows of 50304
  EXPECT_GT(ce.static_shared_bytes, 0);
}

}  // namespace
}  // namespace gptc::codegen
