// Round trips of the IR text format: print(parse(s)) == s for canonical text
// covering every opcode and attribute, print(parse(print(m))) == print(m) for
// modules built in memory, and bit-exact constants.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/builder.h"
#include "compiler/ir/module.h"
#include "compiler/ir/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "compiler/support/float_bits.h"

namespace gptc::ir {
namespace {

// Parses and verifies `text`; records a test failure and returns nullptr on error.
std::unique_ptr<Module> ParseVerified(std::string_view text) {
  StatusOr<std::unique_ptr<Module>> module = ParseAndVerifyModule(text);
  EXPECT_TRUE(module.ok()) << module.status().message();
  if (!module.ok()) return nullptr;
  return std::move(module).value();
}

// print(parse(text)) == text, and a clone prints the same.
void ExpectCanonical(std::string_view text) {
  std::unique_ptr<Module> module = ParseVerified(text);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(PrintModule(*module), text);
  std::unique_ptr<Module> clone = module->Clone();
  EXPECT_TRUE(VerifyModule(*clone).ok());
  EXPECT_EQ(PrintModule(*clone), text);
}

// print(parse(print(m))) == print(m), and the reparsed module verifies.
void ExpectStablePrint(const Module& module) {
  ASSERT_TRUE(VerifyModule(module).ok()) << VerifyModule(module).message();
  std::string text = PrintModule(module);
  std::unique_ptr<Module> reparsed = ParseVerified(text);
  ASSERT_NE(reparsed, nullptr) << text;
  EXPECT_EQ(PrintModule(*reparsed), text);
  EXPECT_EQ(PrintModule(*module.Clone()), text);
}

const Instruction& Find(const Module& module, std::string_view computation, std::string_view name) {
  const Computation* c = module.FindComputation(computation);
  EXPECT_NE(c, nullptr) << computation;
  const Instruction* inst = c->FindInstruction(name);
  EXPECT_NE(inst, nullptr) << name;
  return *inst;
}

// Every opcode, every attribute, every comparison direction and fusion kind.
constexpr std::string_view kEveryOpcode = R"(module everything

%fused.add {
  %p0 = f32[2,3] parameter(0)
  %p1 = f32[2,3] parameter(1)
  ROOT %sum = f32[2,3] add(%p0, %p1)
}

%fused.gemm {
  %a = f32[2,3] parameter(0)
  %w = f32[2,3] parameter(1)
  %b = f32[3] parameter(2)
  %d = f32[3,3] dot(%a, %w), lhs_contracting={0}, rhs_contracting={0}
  %bb = f32[3,3] broadcast(%b), dimensions={1}
  %pre = f32[3,3] add(%d, %bb)
  %act = f32[3,3] tanh(%pre)
  %db = f32[3] reduce(%w), dimensions={0}, kind=sum
  ROOT %o = (f32[3,3], f32[3,3], f32[3]) tuple(%act, %pre, %db)
}

%attention.decomposition {
  %q = f32[1,2,4,8] parameter(0)
  %k = f32[1,2,4,8] parameter(1)
  %v = f32[1,2,4,8] parameter(2)
  %s = f32[1,2,4,4] dot(%q, %k), lhs_batch={0,1}, rhs_batch={0,1}, lhs_contracting={3}, rhs_contracting={3}
  %m = f32[1,2,4] reduce(%s), dimensions={3}, kind=max
  %mb = f32[1,2,4,4] broadcast(%m), dimensions={0,1,2}
  %z = f32[1,2,4,4] sub(%s, %mb)
  %e = f32[1,2,4,4] exp(%z)
  %l = f32[1,2,4] reduce(%e), dimensions={3}, kind=sum
  %lb = f32[1,2,4,4] broadcast(%l), dimensions={0,1,2}
  %p = f32[1,2,4,4] div(%e, %lb)
  ROOT %o = f32[1,2,4,8] dot(%p, %v), lhs_batch={0,1}, rhs_batch={0,1}, lhs_contracting={3}, rhs_contracting={2}
}

%lse.decomposition {
  %q = f32[1,2,4,8] parameter(0)
  %k = f32[1,2,4,8] parameter(1)
  %s = f32[1,2,4,4] dot(%q, %k), lhs_batch={0,1}, rhs_batch={0,1}, lhs_contracting={3}, rhs_contracting={3}
  ROOT %m = f32[1,2,4] reduce(%s), dimensions={3}, kind=max
}

%grad.decomposition {
  %q = f32[1,2,4,8] parameter(0)
  %k = f32[1,2,4,8] parameter(1)
  %v = f32[1,2,4,8] parameter(2)
  %do = f32[1,2,4,8] parameter(3)
  %lse = f32[1,2,4] parameter(4)
  %delta = f32[1,2,4] parameter(5)
  ROOT %r = f32[1,2,4,8] add(%k, %do)
}

%sce.decomposition {
  %logits = f32[4,10] parameter(0)
  %targets = s32[4] parameter(1)
  %lmax = f32[4] reduce(%logits), dimensions={1}, kind=max
  %tf = f32[4] convert(%targets)
  ROOT %loss = f32[4] sub(%lmax, %tf)
}

ENTRY %main {
  %x = f32[2,3] parameter(0), meta="x in"
  %y = f32[2,3] parameter(1)
  %h = bf16[2,3] parameter(2)
  %ids = s32[5] parameter(3)
  %table = f32[10,3] parameter(4)
  %q = f32[1,2,4,8] parameter(5)
  %logits = f32[4,10] parameter(6)
  %targets = s32[4] parameter(7)
  %c = f32[] constant(0.1)
  %cb = bf16[3] constant({1, 2.5, -inf})
  %io = s32[2,3] iota(), iota_dimension=1
  %cv = f32[2,3] convert(%io)
  %hv = bf16[2,3] convert(%x)
  %cp = f32[2,3] copy(%x)
  %b = f32[2,3] broadcast(%c), dimensions={}
  %b3 = f32[4,2,3] broadcast(%x), dimensions={1,2}
  %rs = f32[3,2] reshape(%x)
  %tr = f32[3,2] transpose(%x), dimensions={1,0}
  %sl = f32[1,3] slice(%x), slice={[0:2:2],[0:3]}
  %sl2 = f32[2,2] slice(%x), slice={[0:2],[1:3]}
  %pd = f32[3,6] pad(%x, %c), low={0,1}, high={1,2}
  %cc = f32[4,3] concatenate(%x, %y), dimensions={0}
  %cc3 = f32[2,9] concatenate(%x, %y, %cp), dimensions={1}
  %eq = pred[2,3] compare(%x, %y), direction=EQ
  %ne = pred[2,3] compare(%x, %y), direction=NE
  %lt = pred[2,3] compare(%x, %y), direction=LT
  %le = pred[2,3] compare(%x, %y), direction=LE
  %gt = pred[2,3] compare(%x, %y), direction=GT
  %ge = pred[2,3] compare(%x, %y), direction=GE
  %sel = f32[2,3] select(%lt, %x, %y)
  %neg = f32[2,3] neg(%x)
  %exp = f32[2,3] exp(%x)
  %log = f32[2,3] log(%x)
  %tanh = f32[2,3] tanh(%x)
  %sqrt = f32[2,3] sqrt(%x)
  %rsqrt = f32[2,3] rsqrt(%x)
  %erf = f32[2,3] erf(%x)
  %abs = f32[2,3] abs(%x)
  %ineg = s32[2,3] neg(%io)
  %add = f32[2,3] add(%x, %y)
  %sub = f32[2,3] sub(%x, %y)
  %mul = f32[2,3] mul(%x, %y)
  %div = f32[2,3] div(%x, %y)
  %max = f32[2,3] max(%x, %y)
  %min = f32[2,3] min(%x, %y)
  %pow = f32[2,3] pow(%x, %y)
  %iadd = s32[2,3] add(%io, %io)
  %rsum = f32[2] reduce(%x), dimensions={1}, kind=sum
  %rmax = f32[] reduce(%x), dimensions={0,1}, kind=max
  %rh = f32[3] reduce(%h), dimensions={0}, kind=sum
  %rhh = bf16[2] reduce(%h), dimensions={1}, kind=max
  %dot = f32[2,2] dot(%x, %y), lhs_contracting={1}, rhs_contracting={1}
  %doth = f32[2,2] dot(%h, %hv), lhs_contracting={1}, rhs_contracting={1}
  %outer = f32[2,3,2,3] dot(%x, %y), lhs_contracting={}, rhs_contracting={}
  %g = f32[5,3] gather(%table, %ids), axis=0, phase=forward, layer=0
  %g1 = f32[10,5] gather(%table, %ids), axis=1, phase=param_cast, layer=1
  %sa = f32[10,3] scatter-add(%table, %ids, %g), axis=0, phase=remat, layer=2, meta="remat.h.2"
  %ar = f32[2,3] all-reduce(%x), kind=sum, phase=gradient
  %arm = f32[2,3] all-reduce(%x), kind=max, phase=optimizer
  %rsc = f32[1] reduce-scatter(%rh), kind=sum, replicas=3, phase=gradient
  %rsm = bf16[1] reduce-scatter(%rhh), kind=max, replicas=2
  %ag = bf16[4] all-gather(%rhh), replicas=2, phase=optimizer, layer=3
  %f.loop = f32[2,3] fusion(%x, %y), kind=loop, calls=%fused.add
  %f.red = f32[2,3] fusion(%x, %y), kind=reduction, calls=%fused.add
  %f.gemm = f32[2,3] fusion(%x, %y), kind=gemm, epilogue={d=0, residual=1, activation=gelu_grad, aux_in=0, transposed=true}, calls=%fused.add
  %f.gelu = (f32[3,3], f32[3,3], f32[3]) fusion(%x, %y, %rh), kind=gemm, epilogue={d=0, bias=2, activation=gelu, aux_out=1, bias_grad_out=2, bias_grad_of=1}, calls=%fused.gemm
  %f.att = f32[2,3] fusion(%x, %y), kind=attention, calls=%fused.add
  %f.ce = f32[2,3] fusion(%x, %y), kind=cross_entropy, calls=%fused.add, meta="h.11.loss"
  %f.opt = f32[2,3] fusion(%x, %y), kind=optimizer, calls=%fused.add, phase=update, layer=32767
  %att = f32[1,2,4,8] attention(%q, %q, %q), causal=true, scale=0.125, calls=%attention.decomposition
  %att2 = f32[1,2,4,8] attention(%q, %q, %q), causal=false, scale=0.35355339059327373, calls=%attention.decomposition
  %att3 = f32[1,2,4,8] attention(%q, %q, %q), causal=true, scale=0.125, grad_dtype=bf16, calls=%attention.decomposition
  %lse = f32[1,2,4] attention-lse(%q, %q), causal=true, scale=0.125, calls=%lse.decomposition
  %dk = f32[1,2,4,8] attention-grad(%q, %q, %q, %q, %lse, %lse), causal=true, scale=0.125, wrt=k, calls=%grad.decomposition
  %sce = f32[4] softmax-cross-entropy(%logits, %targets), num_classes=9, calls=%sce.decomposition
  %sce.all = f32[4] softmax-cross-entropy(%logits, %targets), calls=%sce.decomposition
  %inner = (f32[], s32[5]) tuple(%rmax, %ids)
  %tup = (f32[2,3], f32[4], (f32[], s32[5])) tuple(%f.loop, %sce, %inner)
  %gte = f32[4] get-tuple-element(%tup), index=1
  %gte2 = (f32[], s32[5]) get-tuple-element(%tup), index=2
  %empty = () tuple()
  ROOT %out = (f32[4], f32[1,2,4,8], f32[2,3]) tuple(%gte, %att, %sel), meta="outputs"
}
)";

TEST(RoundTripTest, EveryOpcodePrintsBackIdentically) { ExpectCanonical(kEveryOpcode); }

TEST(RoundTripTest, CanonicalTextCoversEveryOpcodeAndEnum) {
  std::unique_ptr<Module> module = ParseVerified(kEveryOpcode);
  ASSERT_NE(module, nullptr);
  std::set<Opcode> opcodes;
  std::set<CompareDirection> directions;
  std::set<FusionKind> fusion_kinds;
  std::set<ReduceKind> reduce_kinds;
  for (const auto& c : module->computations()) {
    for (const auto& inst : c->instructions()) {
      opcodes.insert(inst->opcode());
      if (inst->opcode() == Opcode::kCompare) directions.insert(inst->attrs().direction);
      if (inst->opcode() == Opcode::kFusion) fusion_kinds.insert(inst->attrs().fusion_kind);
      if (inst->opcode() == Opcode::kReduce || inst->opcode() == Opcode::kAllReduce ||
          inst->opcode() == Opcode::kReduceScatter) {
        reduce_kinds.insert(inst->attrs().reduce_kind);
      }
    }
  }
  EXPECT_EQ(static_cast<int>(opcodes.size()), kNumOpcodes);
  EXPECT_EQ(directions.size(), 6u);
  EXPECT_EQ(fusion_kinds.size(), 6u);
  EXPECT_EQ(reduce_kinds.size(), 2u);
}

TEST(RoundTripTest, ParsedAttributesHoldTheirValues) {
  std::unique_ptr<Module> module = ParseVerified(kEveryOpcode);
  ASSERT_NE(module, nullptr);
  const Module& m = *module;

  const Instruction& sl = Find(m, "main", "sl");
  EXPECT_EQ(sl.attrs().slice, (SliceSpec{{0, 0}, {2, 3}, {2, 1}}));
  EXPECT_EQ(sl.shape(), Shape(DType::kF32, {1, 3}));

  const Instruction& pd = Find(m, "main", "pd");
  EXPECT_EQ(pd.attrs().pad_low, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(pd.attrs().pad_high, (std::vector<int64_t>{1, 2}));

  const Instruction& s = Find(m, "attention.decomposition", "s");
  EXPECT_EQ(s.attrs().dot, (DotDimensions{{0, 1}, {0, 1}, {3}, {3}}));
  const Instruction& dot = Find(m, "main", "dot");
  EXPECT_EQ(dot.attrs().dot, (DotDimensions{{}, {}, {1}, {1}}));

  EXPECT_EQ(Find(m, "main", "io").attrs().index, 1);
  EXPECT_EQ(Find(m, "main", "g1").attrs().index, 1);
  EXPECT_EQ(Find(m, "main", "gte2").attrs().index, 2);
  EXPECT_EQ(Find(m, "main", "targets").attrs().index, 7);
  EXPECT_EQ(Find(m, "main", "ge").attrs().direction, CompareDirection::kGe);
  EXPECT_EQ(Find(m, "main", "tr").attrs().dimensions, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(Find(m, "main", "rmax").attrs().reduce_kind, ReduceKind::kMax);
  EXPECT_EQ(Find(m, "main", "rh").shape(), Shape(DType::kF32, {3}));
  EXPECT_EQ(Find(m, "main", "f.opt").attrs().fusion_kind, FusionKind::kOptimizer);
  EXPECT_FALSE(Find(m, "main", "f.opt").attrs().gemm_epilogue.has_value());
  EXPECT_EQ(Find(m, "main", "f.gelu").attrs().gemm_epilogue,
            (GemmEpilogue{.d = 0,
                          .bias = 2,
                          .activation = GemmActivation::kGelu,
                          .aux_out = 1,
                          .bias_grad_out = 2,
                          .bias_grad_of = 1}));
  EXPECT_EQ(Find(m, "main", "f.gemm").attrs().gemm_epilogue,
            (GemmEpilogue{.residual = 1,
                          .activation = GemmActivation::kGeluGrad,
                          .aux_in = 0,
                          .transposed = true}));
  EXPECT_EQ(Find(m, "main", "f.ce").metadata(), "h.11.loss");
  EXPECT_EQ(Find(m, "main", "x").metadata(), "x in");

  const Instruction& att = Find(m, "main", "att");
  EXPECT_TRUE(att.attrs().causal);
  EXPECT_EQ(att.attrs().scale, 0.125);
  EXPECT_EQ(att.called_computation(), m.FindComputation("attention.decomposition"));
  EXPECT_EQ(Find(m, "main", "att2").attrs().scale, 1.0 / std::sqrt(8.0));
  EXPECT_FALSE(Find(m, "main", "att2").attrs().causal);
  EXPECT_FALSE(att.attrs().grad_dtype.has_value());
  EXPECT_EQ(Find(m, "main", "att3").attrs().grad_dtype, DType::kBF16);

  EXPECT_EQ(Find(m, "main", "sce").attrs().num_classes, 9);
  EXPECT_EQ(Find(m, "main", "sce.all").attrs().num_classes, 0);

  const Instruction& tup = Find(m, "main", "tup");
  ASSERT_TRUE(tup.shape().is_tuple());
  ASSERT_EQ(tup.shape().tuple_elements().size(), 3u);
  EXPECT_EQ(tup.shape().tuple_elements()[2],
            Shape::Tuple({Shape::Scalar(DType::kF32), Shape(DType::kS32, {5})}));
  EXPECT_EQ(m.entry()->root()->name(), "out");
  EXPECT_EQ(m.entry()->parameters().size(), 8u);

  const Instruction& cb = Find(m, "main", "cb");
  ASSERT_EQ(cb.attrs().literal.size(), 3u);
  EXPECT_EQ(cb.attrs().literal[1], 2.5);
  EXPECT_EQ(cb.attrs().literal[2], -std::numeric_limits<double>::infinity());

  // Users mirror operands: %x feeds many instructions but lists each user once.
  const Instruction& x = Find(m, "main", "x");
  std::set<const Instruction*> users(x.users().begin(), x.users().end());
  EXPECT_EQ(users.size(), x.users().size());
  EXPECT_TRUE(users.contains(&Find(m, "main", "outer")));
}

constexpr std::string_view kConstants = R"(module constants

ENTRY %main {
  %f0 = f32[] constant(0.1)
  %f1 = f32[8] constant({0, -0, 1e-38, 1e-45, inf, -inf, nan, 3.4028235e+38})
  %f2 = f32[5] constant({1.1754944e-38, 1.1754942e-38, -2.5, 16777216, 1e+10})
  %f3 = f32[2,2] constant({1, 2, 3, 4})
  %b0 = bf16[5] constant({1, 1.0078125, -3.3895314e+38, 9.1835e-41, nan})
  %h0 = f16[6] constant({65504, -65504, 6.1035156e-05, 5.9604645e-08, 0.33325195, -inf})
  %s0 = s32[4] constant({-2147483648, -1, 0, 2147483647})
  %u0 = u16[3] constant({0, 1, 65535})
  %p0 = pred[2] constant({true, false})
  %p1 = pred[] constant(true)
  %e = f32[0] constant({})
  %e2 = s32[3,0] constant({})
  ROOT %t = (f32[], pred[]) tuple(%f0, %p1)
}
)";

TEST(RoundTripTest, ConstantsOfEveryDType) {
  ExpectCanonical(kConstants);
  std::unique_ptr<Module> module = ParseVerified(kConstants);
  ASSERT_NE(module, nullptr);
  const Module& m = *module;
  auto bits = [](double v) { return std::bit_cast<uint32_t>(static_cast<float>(v)); };

  const std::vector<double>& f1 = Find(m, "main", "f1").attrs().literal;
  ASSERT_EQ(f1.size(), 8u);
  EXPECT_EQ(bits(f1[0]), 0x00000000u);
  EXPECT_EQ(bits(f1[1]), 0x80000000u);  // -0 keeps its sign
  EXPECT_EQ(bits(f1[2]), std::bit_cast<uint32_t>(1e-38f));
  EXPECT_EQ(bits(f1[3]), 0x00000001u);  // smallest denormal
  EXPECT_EQ(bits(f1[4]), 0x7f800000u);
  EXPECT_EQ(bits(f1[5]), 0xff800000u);
  EXPECT_TRUE(std::isnan(f1[6]));
  EXPECT_EQ(bits(f1[7]), 0x7f7fffffu);
  EXPECT_EQ(bits(Find(m, "main", "f0").attrs().literal[0]), std::bit_cast<uint32_t>(0.1f));

  const std::vector<double>& f2 = Find(m, "main", "f2").attrs().literal;
  EXPECT_EQ(bits(f2[0]), 0x00800000u);  // smallest normal
  EXPECT_EQ(bits(f2[1]), 0x007fffffu);  // largest denormal

  const std::vector<double>& b0 = Find(m, "main", "b0").attrs().literal;
  EXPECT_EQ(F32ToBF16Bits(static_cast<float>(b0[1])), 0x3f81);
  EXPECT_EQ(F32ToBF16Bits(static_cast<float>(b0[2])), 0xff7f);  // lowest finite bf16
  EXPECT_EQ(F32ToBF16Bits(static_cast<float>(b0[3])), 0x0001);  // smallest bf16 denormal
  EXPECT_TRUE(std::isnan(b0[4]));

  const std::vector<double>& h0 = Find(m, "main", "h0").attrs().literal;
  EXPECT_EQ(F32ToF16Bits(static_cast<float>(h0[0])), 0x7bff);  // largest f16
  EXPECT_EQ(F32ToF16Bits(static_cast<float>(h0[1])), 0xfbff);
  EXPECT_EQ(F32ToF16Bits(static_cast<float>(h0[2])), 0x0400);  // smallest normal
  EXPECT_EQ(F32ToF16Bits(static_cast<float>(h0[3])), 0x0001);  // smallest denormal
  EXPECT_EQ(F32ToF16Bits(static_cast<float>(h0[4])), 0x3555);
  EXPECT_EQ(F32ToF16Bits(static_cast<float>(h0[5])), 0xfc00);

  EXPECT_EQ(Find(m, "main", "s0").attrs().literal,
            (std::vector<double>{-2147483648.0, -1, 0, 2147483647.0}));
  EXPECT_EQ(Find(m, "main", "u0").attrs().literal, (std::vector<double>{0, 1, 65535}));
  EXPECT_EQ(Find(m, "main", "p0").attrs().literal, (std::vector<double>{1, 0}));
  EXPECT_TRUE(Find(m, "main", "e2").attrs().literal.empty());
}

TEST(RoundTripTest, ParserRoundsFloatLiteralsToTheirDType) {
  // A decimal that is not exact in the dtype parses to the nearest value of
  // the dtype and prints as that value.
  std::unique_ptr<Module> module = ParseVerified(R"(module m
ENTRY %main {
  %a = bf16[3] constant({1.001, 3.14159, 3.3895e38})
  %b = f16[3] constant({65519, -65519, 1e-8})
  %c = f32[2] constant({0.1000000000000000055511151231257827, 3.4028235e38})
  ROOT %t = (bf16[3], f16[3], f32[2]) tuple(%a, %b, %c)
}
)");
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(PrintInstruction(Find(*module, "main", "a")),
            "%a = bf16[3] constant({1, 3.140625, 3.3895314e+38})");
  EXPECT_EQ(PrintInstruction(Find(*module, "main", "b")),
            "%b = f16[3] constant({65504, -65504, 0})");
  EXPECT_EQ(PrintInstruction(Find(*module, "main", "c")),
            "%c = f32[2] constant({0.1, 3.4028235e+38})");
  ExpectStablePrint(*module);
}

TEST(RoundTripTest, DecimalsBeyondTheDTypeAreRefused) {
  // The nearest value of a finite decimal beyond the range would be
  // infinity: the text means something else, so it is an error naming the
  // value (infinity is written inf).
  for (const char* text : {"bf16[1] constant({1e39})", "f16[1] constant({65520})",
                           "f32[1] constant({-1e39})", "f32[1] constant({1e400})"}) {
    const std::string ir = std::string("module m\nENTRY %main {\n  ROOT %c = ") + text + "\n}\n";
    StatusOr<std::unique_ptr<Module>> module = ParseModule(ir, "t.ir");
    ASSERT_FALSE(module.ok()) << text;
    EXPECT_NE(module.status().message().find("is beyond the range of"), std::string::npos)
        << module.status().message();
  }
}

TEST(RoundTripTest, OutOfRangeDecimalsSaturateWithTheirSign) {
  // Decimals below the range of a double are zeros of their sign, and an
  // attribute beyond it the infinity of its sign, never a silent 0 in place
  // of an infinity (a constant beyond the range is refused, above).
  std::unique_ptr<Module> module = ParseVerified(R"(module m
%d {
  %q = f32[1,1,2,4] parameter(0)
  %k = f32[1,1,2,4] parameter(1)
  %v = f32[1,1,2,4] parameter(2)
  ROOT %o = f32[1,1,2,4] copy(%v)
}
ENTRY %main {
  %c = f32[4] constant({inf, -inf, 1e-400, -1e-400})
  %q = f32[1,1,2,4] parameter(0)
  ROOT %a = f32[1,1,2,4] attention(%q, %q, %q), causal=false, scale=-1e999, calls=%d
}
)");
  ASSERT_NE(module, nullptr);
  const Instruction& c = Find(*module, "main", "c");
  ASSERT_EQ(c.attrs().literal.size(), 4u);
  EXPECT_EQ(c.attrs().literal[0], std::numeric_limits<double>::infinity());
  EXPECT_EQ(c.attrs().literal[1], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(std::bit_cast<uint64_t>(c.attrs().literal[2]), 0u);
  EXPECT_EQ(std::bit_cast<uint64_t>(c.attrs().literal[3]), uint64_t{1} << 63);
  EXPECT_EQ(PrintInstruction(c), "%c = f32[4] constant({inf, -inf, 0, -0})");
  EXPECT_EQ(Find(*module, "main", "a").attrs().scale, -std::numeric_limits<double>::infinity());
  ExpectStablePrint(*module);
}

TEST(RoundTripTest, MetadataWithQuotesBackslashesAndNewlines) {
  constexpr std::string_view kText = R"(module m

ENTRY %main {
  %x = f32[2] parameter(0), meta="say \"hi\" to C:\\path\\ and\nnext line"
  ROOT %y = f32[2] neg(%x), meta="\\\"\\"
}
)";
  ExpectCanonical(kText);
  std::unique_ptr<Module> module = ParseVerified(kText);
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(Find(*module, "main", "x").metadata(), "say \"hi\" to C:\\path\\ and\nnext line");
  EXPECT_EQ(Find(*module, "main", "y").metadata(), "\\\"\\");
}

TEST(RoundTripTest, NonCanonicalTextPrintsCanonically) {
  std::unique_ptr<Module> module = ParseVerified(R"(// leading comment
module   m   // the name
%f {   %p = f32[] parameter( 0 )
  ROOT %r = f32[] neg(%p)}
ENTRY %main{
  %x=f32[ 2 , 3 ]parameter(0)// trailing comment
  %c = f32[] constant({+1.50})
  %one = f32[1] constant(7)
  %s = f32[2,3] slice(%x), slice={[0:2:1], [0:3]}
  %u = f32[] fusion(%c), calls=%f
  ROOT %t = (f32[2,3],f32[],f32[1]) tuple(%s,%u,%one)
})");
  ASSERT_NE(module, nullptr);
  EXPECT_EQ(PrintModule(*module), R"(module m

%f {
  %p = f32[] parameter(0)
  ROOT %r = f32[] neg(%p)
}

ENTRY %main {
  %x = f32[2,3] parameter(0)
  %c = f32[] constant(1.5)
  %one = f32[1] constant({7})
  %s = f32[2,3] slice(%x), slice={[0:2],[0:3]}
  %u = f32[] fusion(%c), kind=loop, calls=%f
  ROOT %t = (f32[2,3], f32[], f32[1]) tuple(%s, %u, %one)
}
)");
  ExpectStablePrint(*module);
}

TEST(RoundTripTest, EntryMayComeFirstAndCalleesKeepTheirOrder) {
  ExpectCanonical(R"(module order

ENTRY %main {
  ROOT %x = f32[] parameter(0)
}

%unused {
  ROOT %c = s32[] constant(3)
}
)");
}

TEST(RoundTripTest, ShapesPrintAndParseBack) {
  for (std::string_view text : {"f32[]", "bf16[16,1024,768]", "pred[0]", "u16[1,1,1]", "()",
                                "(f32[], s32[4])", "((f16[2]), (), (pred[], (bf16[3,3])))"}) {
    StatusOr<Shape> shape = ParseShape(text);
    ASSERT_TRUE(shape.ok()) << shape.status().message();
    EXPECT_EQ(shape->ToString(), text);
  }
  StatusOr<Shape> shape = ParseShape("(f32[2,3], s32[])");
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(*shape, Shape::Tuple({Shape(DType::kF32, {2, 3}), Shape::Scalar(DType::kS32)}));
  EXPECT_EQ(shape->byte_size(), 28);
}

// A module that uses every Builder method, as a model front end would.
std::unique_ptr<Module> BuildEverything() {
  auto module = std::make_unique<Module>("built");
  auto ok = [](StatusOr<Instruction*> s) {
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? *s : nullptr;
  };

  Computation* fused = module->AddComputation("fused");
  Builder fb(fused);
  Instruction* fp0 = ok(fb.Parameter(0, Shape(DType::kF32, {2, 3}), "p0"));
  Instruction* fp1 = ok(fb.Parameter(1, Shape(DType::kF32, {2, 3}), "p1"));
  fused->set_root(ok(fb.Binary(Opcode::kMul, fp0, fp1)));

  Computation* attn = module->AddComputation("attn");
  Builder ab(attn);
  Shape qkv(DType::kBF16, {2, 4, 8, 16});
  Instruction* q = ok(ab.Parameter(0, qkv, "q"));
  Instruction* k = ok(ab.Parameter(1, qkv, "k"));
  Instruction* v = ok(ab.Parameter(2, qkv, "v"));
  Instruction* s = ok(ab.Dot(q, k, {{0, 1}, {0, 1}, {3}, {3}}, DType::kF32));
  Instruction* sm = ok(ab.Convert(ok(ab.Unary(Opcode::kExp, s)), DType::kBF16));
  attn->set_root(ok(ab.Dot(sm, v, {{0, 1}, {0, 1}, {3}, {2}}, DType::kBF16)));

  Computation* sce = module->AddComputation("sce");
  Builder sb(sce);
  Instruction* logits = ok(sb.Parameter(0, Shape(DType::kF32, {6, 50}), "logits"));
  ok(sb.Parameter(1, Shape(DType::kS32, {6}), "targets"));
  sce->set_root(ok(sb.Reduce(logits, {1}, ReduceKind::kMax, DType::kF32)));

  Computation* main = module->AddComputation("main");
  module->set_entry(main);
  Builder b(main);
  b.set_metadata("h.0.\"attn\"\\x");
  Instruction* x = ok(b.Parameter(0, Shape(DType::kF32, {2, 3}), "x"));
  Instruction* ids = ok(b.Parameter(1, Shape(DType::kU16, {4}), "ids"));
  Instruction* qp = ok(b.Parameter(2, qkv, "q"));
  Instruction* lg = ok(b.Parameter(3, Shape(DType::kF32, {6, 50}), "logits"));
  Instruction* tg = ok(b.Parameter(4, Shape(DType::kS32, {6}), "targets"));
  b.set_metadata("");
  Instruction* c = ok(b.ScalarConstant(DType::kF32, 0.1f));
  ok(b.Constant(Shape(DType::kBF16, {3}), {1.0, -0.0, RoundToBF16(1e-39f)}));
  ok(b.Constant(Shape(DType::kF16, {2}), {RoundToF16(0.1f), 65504}));
  ok(b.Constant(Shape(DType::kS32, {2}), {-2147483648.0, 2147483647.0}));
  ok(b.Constant(Shape(DType::kU16, {}), {65535}));
  Instruction* pt = ok(b.ScalarConstant(DType::kPred, 1));
  Instruction* iota = ok(b.Iota(Shape(DType::kF32, {2, 3}), 0));
  Instruction* cv = ok(b.Convert(x, DType::kBF16));
  Instruction* cp = ok(b.Unary(Opcode::kCopy, x));
  Instruction* bc = ok(b.Broadcast(c, {2, 3}, {}));
  Instruction* b3 = ok(b.Broadcast(x, {2, 5, 3}, {0, 2}));
  Instruction* rs = ok(b.Reshape(x, {3, 2}));
  Instruction* tr = ok(b.Transpose(x, {1, 0}));
  Instruction* sl = ok(b.Slice(x, {0, 1}, {2, 3}));
  Instruction* sls = ok(b.Slice(x, {1, 0}, {2, 3}, {1, 2}));
  Instruction* pd = ok(b.Pad(x, c, {1, 0}, {0, 2}));
  Instruction* cc = ok(b.Concatenate({x, iota, cp}, 0));
  std::vector<Instruction*> cmps;
  for (CompareDirection d : {CompareDirection::kEq, CompareDirection::kNe, CompareDirection::kLt,
                             CompareDirection::kLe, CompareDirection::kGt, CompareDirection::kGe}) {
    cmps.push_back(ok(b.Compare(x, bc, d)));
  }
  Instruction* sel = ok(b.Select(cmps[2], x, bc));
  Instruction* acc = sel;
  for (Opcode op : {Opcode::kNeg, Opcode::kExp, Opcode::kLog, Opcode::kTanh, Opcode::kSqrt,
                    Opcode::kRsqrt, Opcode::kErf, Opcode::kAbs}) {
    acc = ok(b.Unary(op, acc));
  }
  for (Opcode op : {Opcode::kAdd, Opcode::kSub, Opcode::kMul, Opcode::kDiv, Opcode::kMax,
                    Opcode::kMin, Opcode::kPow}) {
    acc = ok(b.Binary(op, acc, x));
  }
  Instruction* red = ok(b.Reduce(cv, {0}, ReduceKind::kSum, DType::kF32));
  Instruction* dot = ok(b.Dot(x, tr, {{}, {}, {1}, {0}}, DType::kF32));
  Instruction* table = ok(b.Transpose(b3, {1, 0, 2}));
  Instruction* g = ok(b.Gather(table, ids, 0));
  Instruction* sa = ok(b.ScatterAdd(table, ids, g, 0));
  Instruction* ar = ok(b.AllReduce(acc, ReduceKind::kSum));
  std::vector<Instruction*> fusions;
  for (FusionKind kind :
       {FusionKind::kLoop, FusionKind::kReduction, FusionKind::kGemm, FusionKind::kAttention,
        FusionKind::kCrossEntropy, FusionKind::kOptimizer}) {
    Instruction* f = ok(b.Fusion({ar, x}, fused, kind));
    if (kind == FusionKind::kGemm) f->mutable_attrs().gemm_epilogue = GemmEpilogue{.residual = 1};
    fusions.push_back(f);
  }
  b.set_metadata("h.1.attn");
  Instruction* at = ok(b.Attention(qp, qp, qp, true, 0.25, attn));
  b.set_metadata("loss");
  Instruction* ce = ok(b.SoftmaxCrossEntropy(lg, tg, 49, sce));
  b.set_metadata("");
  Instruction* tup = ok(b.Tuple({fusions.back(), at, ce, red, dot, sa, rs, sl, sls, pd, cc, pt}));
  Instruction* gte = ok(b.GetTupleElement(tup, 2));
  main->set_root(ok(b.Tuple({gte, tup, cmps[5]})));
  return module;
}

TEST(RoundTripTest, BuiltModulePrintsStably) {
  std::unique_ptr<Module> module = BuildEverything();
  ASSERT_FALSE(::testing::Test::HasFailure());
  ExpectStablePrint(*module);
  std::string text = PrintModule(*module);
  // Spot-check the builder's names and the printed attributes.
  EXPECT_NE(text.find("  %x = f32[2,3] parameter(0), meta=\"h.0.\\\"attn\\\"\\\\x\"\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("%slice.1 = f32[1,2] slice(%x), slice={[1:2],[0:3:2]}\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%attention = bf16[2,4,8,16] attention(%q, %q, %q), causal=true, "
                      "scale=0.25, calls=%attn, meta=\"h.1.attn\"\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("%softmax-cross-entropy = f32[6] softmax-cross-entropy(%logits, "
                      "%targets), num_classes=49, calls=%sce, meta=\"loss\"\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("%constant.1 = bf16[3] constant({1, -0, 1.01019e-39})\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%fusion.5 = f32[2,3] fusion(%all-reduce, %x), kind=optimizer, "
                      "calls=%fused\n"),
            std::string::npos)
      << text;
}

TEST(RoundTripTest, CloneIsDeepAndIndependent) {
  std::unique_ptr<Module> module = ParseVerified(kEveryOpcode);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<Module> clone = module->Clone();
  ASSERT_EQ(PrintModule(*clone), kEveryOpcode);
  // The clone shares no instruction or computation with the original.
  for (size_t i = 0; i < module->computations().size(); ++i) {
    const Computation& a = *module->computations()[i];
    const Computation& b = *clone->computations()[i];
    EXPECT_NE(&a, &b);
    EXPECT_EQ(b.parent(), clone.get());
    for (int64_t j = 0; j < a.instruction_count(); ++j) {
      const Instruction& ia = *a.instructions()[j];
      const Instruction& ib = *b.instructions()[j];
      EXPECT_NE(&ia, &ib);
      EXPECT_EQ(ib.parent(), &b);
      EXPECT_EQ(ia.line(), ib.line());
      if (ia.called_computation() != nullptr) {
        EXPECT_EQ(ib.called_computation(), clone->FindComputation(ia.called_computation()->name()));
      }
    }
  }
  // Editing the clone leaves the original alone.
  Instruction* neg = clone->entry()->FindInstruction("neg");
  clone->entry()->FindInstruction("sel")->ReplaceAllUsesWith(neg);
  neg->set_metadata("edited");
  EXPECT_NE(PrintModule(*clone), kEveryOpcode);
  EXPECT_TRUE(VerifyModule(*clone).ok()) << VerifyModule(*clone).message();
  EXPECT_EQ(PrintModule(*module), kEveryOpcode);
}

// Prints `values` as one constant of `dtype`, parses it back and returns the values read.
std::vector<double> ReparseConstant(DType dtype, const std::vector<double>& values) {
  Module module("bits");
  Computation* main = module.AddComputation("main");
  module.set_entry(main);
  Builder b(main);
  StatusOr<Instruction*> c =
      b.Constant(Shape(dtype, {static_cast<int64_t>(values.size())}), values);
  EXPECT_TRUE(c.ok()) << c.status().message();
  if (!c.ok()) return {};
  main->set_root(*c);
  std::string text = PrintModule(module);
  std::unique_ptr<Module> reparsed = ParseVerified(text);
  if (reparsed == nullptr) return {};
  EXPECT_EQ(PrintModule(*reparsed), text);
  return reparsed->entry()->root()->attrs().literal;
}

TEST(RoundTripTest, F32ConstantsAreBitExact) {
  std::vector<float> floats = {0.1f,
                               -0.1f,
                               1e-38f,
                               0.0f,
                               -0.0f,
                               1.0f / 3.0f,
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::lowest(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               -std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::epsilon(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               16777217.0f,
                               3.14159265f};
  // Every power of two and its neighbours, then random bit patterns.
  for (uint32_t e = 0; e < 255; ++e) {
    for (uint32_t m : {0u, 1u, 0x7fffffu, 0x400000u})
      floats.push_back(std::bit_cast<float>(e << 23 | m));
  }
  std::mt19937 rng(20240531);
  while (floats.size() < 100000) {
    float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isnan(f)) floats.push_back(f);
  }
  std::vector<double> values(floats.begin(), floats.end());
  std::vector<double> back = ReparseConstant(DType::kF32, values);
  ASSERT_EQ(back.size(), floats.size());
  int mismatches = 0;
  for (size_t i = 0; i < floats.size(); ++i) {
    uint32_t want = std::bit_cast<uint32_t>(floats[i]);
    uint32_t got = std::bit_cast<uint32_t>(static_cast<float>(back[i]));
    if (want != got && ++mismatches <= 5) {
      ADD_FAILURE() << std::hex << "f32 bits 0x" << want << " came back as 0x" << got;
    }
    // The parser stores the exact f32 value, not a nearby double.
    if (back[i] != static_cast<double>(floats[i]) && ++mismatches <= 5) {
      ADD_FAILURE() << "f32 " << floats[i] << " came back as the double " << back[i];
    }
  }
  EXPECT_EQ(mismatches, 0);

  std::vector<double> nan = ReparseConstant(DType::kF32, {std::nan(""), -std::nan("")});
  ASSERT_EQ(nan.size(), 2u);
  EXPECT_TRUE(std::isnan(nan[0]));
  EXPECT_TRUE(std::isnan(nan[1]));
}

TEST(RoundTripTest, Every16BitFloatIsBitExact) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    std::vector<double> values;
    std::vector<uint16_t> patterns;
    for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
      float f = dtype == DType::kBF16 ? BF16BitsToF32(static_cast<uint16_t>(bits))
                                      : F16BitsToF32(static_cast<uint16_t>(bits));
      if (std::isnan(f)) continue;
      values.push_back(f);
      patterns.push_back(static_cast<uint16_t>(bits));
    }
    std::vector<double> back = ReparseConstant(dtype, values);
    ASSERT_EQ(back.size(), values.size()) << DTypeName(dtype);
    int mismatches = 0;
    for (size_t i = 0; i < back.size(); ++i) {
      float f = static_cast<float>(back[i]);
      uint16_t got = dtype == DType::kBF16 ? F32ToBF16Bits(f) : F32ToF16Bits(f);
      if (got != patterns[i] && ++mismatches <= 5) {
        ADD_FAILURE() << DTypeName(dtype) << std::hex << " bits 0x" << patterns[i]
                      << " came back as 0x" << got;
      }
    }
    EXPECT_EQ(mismatches, 0) << DTypeName(dtype);
  }
}

TEST(RoundTripTest, FormatLiteralValueIsShortest) {
  EXPECT_EQ(FormatLiteralValue(DType::kF32, 0.1f), "0.1");
  EXPECT_EQ(FormatLiteralValue(DType::kF32, -0.0), "-0");
  EXPECT_EQ(FormatLiteralValue(DType::kF32, std::numeric_limits<float>::denorm_min()), "1e-45");
  EXPECT_EQ(FormatLiteralValue(DType::kBF16, RoundToBF16(3.14159f)), "3.140625");
  EXPECT_EQ(FormatLiteralValue(DType::kF16, 65504), "65504");
  EXPECT_EQ(FormatLiteralValue(DType::kS32, -2147483648.0), "-2147483648");
  EXPECT_EQ(FormatLiteralValue(DType::kU16, 65535), "65535");
  EXPECT_EQ(FormatLiteralValue(DType::kPred, 1), "true");
  EXPECT_EQ(FormatLiteralValue(DType::kPred, 0), "false");
  EXPECT_EQ(FormatLiteralValue(DType::kF16, -std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(FormatLiteralValue(DType::kBF16, std::nan("")), "nan");
}

}  // namespace
}  // namespace gptc::ir
