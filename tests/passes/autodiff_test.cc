#include "passes/autodiff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "tests/testing/pass_harness.h"

namespace gptc::passes {
namespace {

using ::gptc::testing::ParseOrDie;
using ir::Opcode;

// Every value stays in double, 16-bit ones included, so finite differences see
// the exact function.
const eval::EvalOptions kExact{.precision = eval::Precision::kF64, .round_16bit = false};

// Wraps `body` (which defines %y of shape `y_shape` from parameters
// 0..weight_param-1) into a module whose loss is sum(%y * %w), %w a random
// weight parameter, so every element of every gradient matters.
std::string WithLoss(std::string_view prelude, std::string_view body, std::string_view y_shape,
                     int weight_param) {
  int64_t rank = 0;
  if (y_shape.find("[]") == std::string_view::npos) {
    rank = 1 + std::count(y_shape.begin(), y_shape.end(), ',');
  }
  std::string dims;
  for (int64_t d = 0; d < rank; ++d) dims += fmt::format("{}{}", d ? "," : "", d);
  return fmt::format(
      "module m\n{}\nENTRY %main {{\n{}\n  %w = {} parameter({})\n  %yw = {} mul(%y, %w)\n"
      "  ROOT %loss = f32[] reduce(%yw), dimensions={{{}}}, kind=sum\n}}\n",
      prelude, body, y_shape, weight_param, y_shape, dims);
}

// Runs autodiff, verifies the result, and compares every gradient with
// central finite differences of the original module (max-norm relative error).
void CheckGradients(const std::string& text, double tolerance = 1e-6, uint64_t seed = 7) {
  SCOPED_TRACE(text);
  std::unique_ptr<ir::Module> module = ParseOrDie(text);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<ir::Module> after = module->Clone();
  Autodiff autodiff;
  StatusOr<bool> changed = autodiff.Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_TRUE(*changed);
  Status verified = ir::VerifyModule(*after);
  ASSERT_TRUE(verified.ok()) << verified.message() << "\n" << ir::PrintModule(*after);

  std::mt19937_64 rng(seed);
  std::vector<eval::Literal> args;
  for (const ir::Instruction* p : module->entry()->parameters()) {
    args.push_back(eval::Literal::Random(p->shape(), rng));
  }
  StatusOr<eval::Literal> result = eval::Evaluate(*after, args, kExact);
  ASSERT_TRUE(result.ok()) << result.status().message() << "\n" << ir::PrintModule(*after);
  StatusOr<eval::Literal> loss = eval::Evaluate(*module, args, kExact);
  ASSERT_TRUE(loss.ok()) << loss.status().message();
  ASSERT_EQ(result->elements[0].values[0], loss->values[0]);

  constexpr double kEps = 1e-6;
  size_t output = 1;
  for (size_t p = 0; p < args.size(); ++p) {
    if (!ir::IsFloat(args[p].shape.dtype())) continue;
    ASSERT_LT(output, result->elements.size());
    const eval::Literal& grad = result->elements[output++];
    ASSERT_EQ(grad.shape, args[p].shape) << "parameter " << p;
    double max_err = 0, max_fd = 0;
    for (size_t j = 0; j < args[p].values.size(); ++j) {
      std::vector<eval::Literal> plus = args, minus = args;
      plus[p].values[j] += kEps;
      minus[p].values[j] -= kEps;
      StatusOr<eval::Literal> fp = eval::Evaluate(*module, plus, kExact);
      StatusOr<eval::Literal> fm = eval::Evaluate(*module, minus, kExact);
      ASSERT_TRUE(fp.ok() && fm.ok());
      double fd = (fp->values[0] - fm->values[0]) / (2 * kEps);
      max_err = std::max(max_err, std::abs(fd - grad.values[j]));
      max_fd = std::max(max_fd, std::abs(fd));
    }
    EXPECT_LT(max_err / std::max(max_fd, 1e-3), tolerance)
        << "parameter " << p << ": max |autodiff - finite difference| = " << max_err
        << ", max |finite difference| = " << max_fd;
  }
  EXPECT_EQ(output, result->elements.size()) << "one gradient per float parameter";
}

struct RuleCase {
  std::string name;
  std::string body;  // defines %y from parameters 0..weight_param-1
  std::string y_shape;
  int weight_param;
  std::string prelude = "";
};

void PrintTo(const RuleCase& c, std::ostream* os) { *os << c.name; }

class AutodiffRuleTest : public ::testing::TestWithParam<RuleCase> {};

TEST_P(AutodiffRuleTest, MatchesFiniteDifferences) {
  const RuleCase& c = GetParam();
  CheckGradients(WithLoss(c.prelude, c.body, c.y_shape, c.weight_param));
}

// Binary elementwise cases on f32[3,4] operands %a, %b; `positive_a` / `positive_b`
// feed exp() of the operand instead (pow's base, div's denominator).
RuleCase Binary(std::string name, std::string op, bool positive_a = false,
                bool positive_b = false) {
  std::string body = "  %a = f32[3,4] parameter(0)\n  %b = f32[3,4] parameter(1)\n";
  if (positive_a) body += "  %ae = f32[3,4] exp(%a)\n";
  if (positive_b) body += "  %be = f32[3,4] exp(%b)\n";
  body += fmt::format("  %y = f32[3,4] {}({}, {})", op, positive_a ? "%ae" : "%a",
                      positive_b ? "%be" : "%b");
  return {name, body, "f32[3,4]", 2};
}

// Unary cases on f32[2,3,2] %x; `positive` feeds exp(%x) instead.
RuleCase Unary(std::string name, std::string op, bool positive = false) {
  return {name,
          fmt::format("  %x = f32[2,3,2] parameter(0)\n{}  %y = f32[2,3,2] {}({})",
                      positive ? "  %xe = f32[2,3,2] exp(%x)\n" : "", op, positive ? "%xe" : "%x"),
          "f32[2,3,2]", 1};
}

const char kFused[] = R"(%fused {
  %p0 = f32[3,4] parameter(0)
  %p1 = f32[3,4] parameter(1)
  %m = f32[3,4] mul(%p0, %p1)
  ROOT %t = f32[3,4] tanh(%m)
})";

// The frontend's attention decomposition (scale 0.5): q f32[1,2,T,4], k and v f32[1,2,S,4].
std::string AttentionDecomposition(int t, int s, bool causal) {
  std::string mask = causal ? fmt::format(R"(
  %row = s32[{0},{1}] iota(), iota_dimension=0
  %col = s32[{0},{1}] iota(), iota_dimension=1
  %le = pred[{0},{1}] compare(%col, %row), direction=LE
  %leb = pred[1,2,{0},{1}] broadcast(%le), dimensions={{2,3}}
  %ninf = f32[] constant(-inf)
  %ninfb = f32[1,2,{0},{1}] broadcast(%ninf), dimensions={{}}
  %masked = f32[1,2,{0},{1}] select(%leb, %ss, %ninfb))",
                                          t, s)
                            : fmt::format("\n  %masked = f32[1,2,{},{}] copy(%ss)", t, s);
  return fmt::format(R"(%attention {{
  %q = f32[1,2,{0},4] parameter(0)
  %k = f32[1,2,{1},4] parameter(1)
  %v = f32[1,2,{1},4] parameter(2)
  %s = f32[1,2,{0},{1}] dot(%q, %k), lhs_batch={{0,1}}, rhs_batch={{0,1}}, lhs_contracting={{3}}, rhs_contracting={{3}}
  %half = f32[] constant(0.5)
  %halfb = f32[1,2,{0},{1}] broadcast(%half), dimensions={{}}
  %ss = f32[1,2,{0},{1}] mul(%s, %halfb){2}
  %mx = f32[1,2,{0}] reduce(%masked), dimensions={{3}}, kind=max
  %mxb = f32[1,2,{0},{1}] broadcast(%mx), dimensions={{0,1,2}}
  %sh = f32[1,2,{0},{1}] sub(%masked, %mxb)
  %e = f32[1,2,{0},{1}] exp(%sh)
  %se = f32[1,2,{0}] reduce(%e), dimensions={{3}}, kind=sum
  %seb = f32[1,2,{0},{1}] broadcast(%se), dimensions={{0,1,2}}
  %pr = f32[1,2,{0},{1}] div(%e, %seb)
  ROOT %o = f32[1,2,{0},4] dot(%pr, %v), lhs_batch={{0,1}}, rhs_batch={{0,1}}, lhs_contracting={{3}}, rhs_contracting={{2}}
}})",
                     t, s, mask);
}

// The frontend's softmax-cross-entropy decomposition, logits f32[2,3,5], 4 real classes.
const char kCrossEntropy[] = R"(%sce {
  %x = f32[2,3,5] parameter(0)
  %t = s32[2,3] parameter(1)
  %cls = s32[2,3,5] iota(), iota_dimension=2
  %n = s32[] constant(4)
  %nb = s32[2,3,5] broadcast(%n), dimensions={}
  %real = pred[2,3,5] compare(%cls, %nb), direction=LT
  %ninf = f32[] constant(-inf)
  %ninfb = f32[2,3,5] broadcast(%ninf), dimensions={}
  %xm = f32[2,3,5] select(%real, %x, %ninfb)
  %mx = f32[2,3] reduce(%xm), dimensions={2}, kind=max
  %mxb = f32[2,3,5] broadcast(%mx), dimensions={0,1}
  %sh = f32[2,3,5] sub(%xm, %mxb)
  %e = f32[2,3,5] exp(%sh)
  %se = f32[2,3] reduce(%e), dimensions={2}, kind=sum
  %lse0 = f32[2,3] log(%se)
  %lse = f32[2,3] add(%lse0, %mx)
  %tb = s32[2,3,5] broadcast(%t), dimensions={0,1}
  %is = pred[2,3,5] compare(%cls, %tb), direction=EQ
  %zero = f32[] constant(0)
  %zerob = f32[2,3,5] broadcast(%zero), dimensions={}
  %tl = f32[2,3,5] select(%is, %xm, %zerob)
  %tls = f32[2,3] reduce(%tl), dimensions={2}, kind=sum
  ROOT %l = f32[2,3] sub(%lse, %tls)
})";

INSTANTIATE_TEST_SUITE_P(
    Rules, AutodiffRuleTest,
    ::testing::Values(Binary("add", "add"), Binary("sub", "sub"), Binary("mul", "mul"),
                      Binary("div", "div", false, /*positive_b=*/true), Binary("max", "max"),
                      Binary("min", "min"), Binary("pow", "pow", /*positive_a=*/true),
                      Unary("neg", "neg"), Unary("exp", "exp"),
                      Unary("log", "log", /*positive=*/true), Unary("tanh", "tanh"),
                      Unary("sqrt", "sqrt", true), Unary("rsqrt", "rsqrt", true),
                      Unary("erf", "erf"), Unary("abs", "abs"), Unary("copy", "copy"),
                      RuleCase{"convert", R"(  %x = bf16[3,4] parameter(0)
  %y = f32[3,4] convert(%x))",
                               "f32[3,4]", 1},
                      RuleCase{"broadcast", R"(  %x = f32[3,4] parameter(0)
  %y = f32[4,5,3] broadcast(%x), dimensions={2,0})",
                               "f32[4,5,3]", 1},
                      RuleCase{"reshape", R"(  %x = f32[3,4] parameter(0)
  %y = f32[2,6] reshape(%x))",
                               "f32[2,6]", 1},
                      RuleCase{"transpose", R"(  %x = f32[2,3,4] parameter(0)
  %y = f32[4,2,3] transpose(%x), dimensions={2,0,1})",
                               "f32[4,2,3]", 1},
                      RuleCase{"slice", R"(  %x = f32[4,5] parameter(0)
  %y = f32[2,3] slice(%x), slice={[1:3],[0:3]})",
                               "f32[2,3]", 1},
                      RuleCase{"pad", R"(  %x = f32[2,3] parameter(0)
  %v = f32[] parameter(1)
  %y = f32[5,4] pad(%x, %v), low={1,0}, high={2,1})",
                               "f32[5,4]", 2},
                      RuleCase{"concatenate", R"(  %a = f32[2,3] parameter(0)
  %b = f32[2,1] parameter(1)
  %c = f32[2,2] parameter(2)
  %y = f32[2,6] concatenate(%a, %b, %c), dimensions={1})",
                               "f32[2,6]", 3},
                      RuleCase{"select", R"(  %a = f32[3,4] parameter(0)
  %b = f32[3,4] parameter(1)
  %p = pred[3,4] compare(%a, %b), direction=LT
  %y = f32[3,4] select(%p, %a, %b))",
                               "f32[3,4]", 2},
                      RuleCase{"reduce_sum", R"(  %x = f32[2,3,4] parameter(0)
  %y = f32[3] reduce(%x), dimensions={0,2}, kind=sum)",
                               "f32[3]", 1},
                      RuleCase{"reduce_max", R"(  %x = f32[2,3,4] parameter(0)
  %y = f32[2,4] reduce(%x), dimensions={1}, kind=max)",
                               "f32[2,4]", 1},
                      RuleCase{"dot_matmul", R"(  %a = f32[3,4] parameter(0)
  %b = f32[4,5] parameter(1)
  %y = f32[3,5] dot(%a, %b), lhs_contracting={1}, rhs_contracting={0})",
                               "f32[3,5]", 2},
                      RuleCase{"dot_batched", R"(  %a = f32[2,3,4] parameter(0)
  %b = f32[2,5,4] parameter(1)
  %y = f32[2,3,5] dot(%a, %b), lhs_batch={0}, rhs_batch={0}, lhs_contracting={2}, rhs_contracting={2})",
                               "f32[2,3,5]", 2},
                      RuleCase{"dot_general", R"(  %a = f32[4,2,3,2] parameter(0)
  %b = f32[2,5,3,4] parameter(1)
  %y = f32[2,2,5] dot(%a, %b), lhs_batch={1}, rhs_batch={0}, lhs_contracting={0,2}, rhs_contracting={3,2})",
                               "f32[2,2,5]", 2},
                      RuleCase{"dot_bf16_into_f32", R"(  %a = bf16[3,4] parameter(0)
  %b = bf16[4,2] parameter(1)
  %y = f32[3,2] dot(%a, %b), lhs_contracting={1}, rhs_contracting={0})",
                               "f32[3,2]", 2},
                      RuleCase{"reduce_bf16_into_f32", R"(  %x = bf16[2,3,4] parameter(0)
  %s = f32[2,3] reduce(%x), dimensions={2}, kind=sum
  %m = f32[2,3] reduce(%x), dimensions={2}, kind=max
  %y = f32[2,3] add(%s, %m))",
                               "f32[2,3]", 1},
                      RuleCase{"gather", R"(  %t = f32[6,3] parameter(0)
  %i = s32[2,2] constant({0, 5, 2, 0})
  %y = f32[2,2,3] gather(%t, %i), axis=0)",
                               "f32[2,2,3]", 1},
                      RuleCase{"gather_axis1", R"(  %t = f32[3,6] parameter(0)
  %i = s32[4] constant({1, 1, 4, 0})
  %y = f32[3,4] gather(%t, %i), axis=1)",
                               "f32[3,4]", 1},
                      RuleCase{"scatter_add", R"(  %x = f32[6,3] parameter(0)
  %u = f32[4,3] parameter(1)
  %i = s32[4] constant({1, 3, 1, 0})
  %y = f32[6,3] scatter-add(%x, %i, %u), axis=0)",
                               "f32[6,3]", 2},
                      RuleCase{"tuple", R"(  %a = f32[3,4] parameter(0)
  %b = f32[3,4] parameter(1)
  %t = (f32[3,4], f32[3,4]) tuple(%a, %b)
  %t0 = f32[3,4] get-tuple-element(%t), index=0
  %t1 = f32[3,4] get-tuple-element(%t), index=1
  %t0b = f32[3,4] get-tuple-element(%t), index=0
  %m = f32[3,4] mul(%t0, %t1)
  %y = f32[3,4] mul(%m, %t0b))",
                               "f32[3,4]", 2},
                      RuleCase{"fusion", R"(  %a = f32[3,4] parameter(0)
  %b = f32[3,4] parameter(1)
  %y = f32[3,4] fusion(%a, %b), kind=loop, calls=%fused)",
                               "f32[3,4]", 2, kFused},
                      RuleCase{"fusion_repeated_operand", R"(  %a = f32[3,4] parameter(0)
  %y = f32[3,4] fusion(%a, %a), kind=loop, calls=%fused)",
                               "f32[3,4]", 1, kFused},
                      RuleCase{"attention", R"(  %q = f32[1,2,3,4] parameter(0)
  %k = f32[1,2,3,4] parameter(1)
  %v = f32[1,2,3,4] parameter(2)
  %y = f32[1,2,3,4] attention(%q, %k, %v), causal=true, scale=0.5, calls=%attention)",
                               "f32[1,2,3,4]", 3, AttentionDecomposition(3, 3, true)},
                      RuleCase{"attention_noncausal", R"(  %q = f32[1,2,3,4] parameter(0)
  %k = f32[1,2,5,4] parameter(1)
  %v = f32[1,2,5,4] parameter(2)
  %y = f32[1,2,3,4] attention(%q, %k, %v), causal=false, scale=0.5, calls=%attention)",
                               "f32[1,2,3,4]", 3, AttentionDecomposition(3, 5, false)},
                      // Exact evaluation keeps bf16 values in double: the narrowed
                      // matmuls must still give the exact gradient.
                      RuleCase{"attention_grad_bf16", R"(  %q = f32[1,2,3,4] parameter(0)
  %k = f32[1,2,3,4] parameter(1)
  %v = f32[1,2,3,4] parameter(2)
  %y = f32[1,2,3,4] attention(%q, %k, %v), causal=true, scale=0.5, grad_dtype=bf16, calls=%attention)",
                               "f32[1,2,3,4]", 3, AttentionDecomposition(3, 3, true)},
                      RuleCase{"softmax_cross_entropy", R"(  %x = f32[2,3,5] parameter(0)
  %t = s32[2,3] constant({0, 3, 1, 2, 2, 0})
  %y = f32[2,3] softmax-cross-entropy(%x, %t), num_classes=4, calls=%sce)",
                               "f32[2,3]", 1, kCrossEntropy}),
    [](const ::testing::TestParamInfo<RuleCase>& info) { return info.param.name; });

TEST(AutodiffTest, SumsGradientsOfSeveralUsers) {
  CheckGradients(WithLoss("", R"(  %x = f32[3,4] parameter(0)
  %e = f32[3,4] exp(%x)
  %m = f32[3,4] mul(%x, %x)
  %s = f32[3,4] add(%e, %m)
  %y = f32[3,4] mul(%s, %x))",
                          "f32[3,4]", 1));
}

TEST(AutodiffTest, IntegerParametersGetNoGradient) {
  // Parameters: table (float), indices (s32), weight (float): two gradients.
  CheckGradients(WithLoss("", R"(  %t = f32[16,3] parameter(0)
  %i = s32[2,3] parameter(1)
  %y = f32[2,3,3] gather(%t, %i), axis=0)",
                          "f32[2,3,3]", 2));
}

TEST(AutodiffTest, UnusedParameterGetsZeros) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[3] parameter(0)
  %unused = f32[2,2] parameter(1)
  ROOT %l = f32[] reduce(%x), dimensions={0}, kind=sum
}
)");
  ASSERT_NE(module, nullptr);
  CheckGradients(ir::PrintModule(*module));
}

TEST(AutodiffTest, NamesAndMetadataPointAtTheForwardValue) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[2,3] parameter(0)
  %w = f32[3,4] parameter(1)
  %h = f32[2,4] dot(%x, %w), lhs_contracting={1}, rhs_contracting={0}, meta="h.3.mlp.c_fc"
  ROOT %l = f32[] reduce(%h), dimensions={0,1}, kind=sum, meta="loss"
}
)");
  ASSERT_NE(module, nullptr);
  Autodiff autodiff;
  StatusOr<bool> changed = autodiff.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  ASSERT_TRUE(ir::VerifyModule(*module).ok());
  const ir::Instruction* root = module->entry()->root();
  ASSERT_EQ(root->opcode(), ir::Opcode::kTuple);
  ASSERT_EQ(root->operand_count(), 3);
  EXPECT_EQ(root->operand(0)->name(), "l");
  // Both gradients come out of the dot's rule.
  for (int i = 1; i < 3; ++i) {
    EXPECT_TRUE(root->operand(i)->name().starts_with("grad.h")) << root->operand(i)->name();
    EXPECT_EQ(root->operand(i)->metadata(), "grad.h.3.mlp.c_fc");
  }
  for (const auto& inst : module->entry()->instructions()) {
    if (inst->name() == "x" || inst->name() == "w" || inst->name() == "h" || inst->name() == "l") {
      continue;
    }
    EXPECT_TRUE(inst->name().starts_with("grad.")) << inst->name();
    EXPECT_TRUE(inst->metadata().starts_with("grad.")) << inst->name();
  }
}

StatusOr<bool> RunOn(std::string_view text) {
  auto module = ParseOrDie(text);
  if (module == nullptr) return Error("parse failed");
  Autodiff autodiff;
  return autodiff.Run(*module);
}

TEST(AutodiffTest, NonScalarRootIsAnError) {
  StatusOr<bool> r = RunOn(R"(module m
ENTRY %main {
  %x = f32[3] parameter(0)
  ROOT %e = f32[3] exp(%x)
}
)");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "autodiff: root %e is f32[3], expected a scalar float loss");
}

TEST(AutodiffTest, RunningTwiceFailsCleanly) {
  auto module = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[3] parameter(0)
  ROOT %l = f32[] reduce(%x), dimensions={0}, kind=sum
}
)");
  ASSERT_NE(module, nullptr);
  Autodiff autodiff;
  ASSERT_TRUE(autodiff.Run(*module).ok());
  StatusOr<bool> again = autodiff.Run(*module);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("expected a scalar float loss"), std::string::npos)
      << again.status().message();
}

TEST(AutodiffTest, MissingRuleNamesTheOpcode) {
  StatusOr<bool> r = RunOn(R"(module m
ENTRY %main {
  %x = f32[3] parameter(0)
  %ar = f32[3] all-reduce(%x), kind=sum
  ROOT %l = f32[] reduce(%ar), dimensions={0}, kind=sum
}
)");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "autodiff: no gradient rule for opcode all-reduce (%ar)");
}

TEST(AutodiffTest, StridedSliceIsAnError) {
  StatusOr<bool> r = RunOn(R"(module m
ENTRY %main {
  %x = f32[6] parameter(0)
  %s = f32[3] slice(%x), slice={[0:6:2]}
  ROOT %l = f32[] reduce(%s), dimensions={0}, kind=sum
}
)");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("strided slice %s"), std::string::npos)
      << r.status().message();
}

TEST(AutodiffTest, OpsOffTheGradientPathNeedNoRule) {
  // The all-reduce only sees a constant, so it is never differentiated.
  CheckGradients(R"(module m
ENTRY %main {
  %x = f32[3] parameter(0)
  %c = f32[3] constant({1, 2, 3})
  %ar = f32[3] all-reduce(%c), kind=sum
  %m = f32[3] mul(%x, %ar)
  ROOT %l = f32[] reduce(%m), dimensions={0}, kind=sum
}
)");
}

// Note [bf16 attention backward] and Note [flash attention ops]: with
// grad_dtype=bf16 the three attention-grad ops take bf16 q, k, v, do (their
// decompositions' matmuls have bf16 operands, s and dp f32), the lse reads
// the forward's f32 q, k, and with bf16 rounding the gradients stay within
// bf16 error of the f32 ones.
TEST(AutodiffTest, AttentionGradDtypeNarrowsTheBackwardMatmuls) {
  auto differentiate = [](std::string_view grad_attr) {
    std::unique_ptr<ir::Module> m = ParseOrDie(WithLoss(
        AttentionDecomposition(8, 8, true),
        fmt::format(R"(  %q = f32[1,2,8,4] parameter(0)
  %k = f32[1,2,8,4] parameter(1)
  %v = f32[1,2,8,4] parameter(2)
  %y = f32[1,2,8,4] attention(%q, %k, %v), causal=true, scale=0.5{}, calls=%attention)",
                    grad_attr),
        "f32[1,2,8,4]", 3));
    EXPECT_TRUE(Autodiff().Run(*m).ok());
    EXPECT_TRUE(ir::VerifyModule(*m).ok()) << ir::PrintModule(*m);
    return m;
  };
  std::unique_ptr<ir::Module> narrow = differentiate(", grad_dtype=bf16");
  std::unique_ptr<ir::Module> wide = differentiate("");
  std::vector<std::string> narrow_ops, wide_ops;
  for (const auto& [module, ops] :
       {std::pair{narrow.get(), &narrow_ops}, std::pair{wide.get(), &wide_ops}}) {
    for (const auto& inst : module->entry()->instructions()) {
      if (inst->opcode() == Opcode::kDot) ops->push_back("dot");  // none: all in the ops
      if (inst->opcode() == Opcode::kAttentionLse) {
        ops->push_back(fmt::format("lse({})", ir::DTypeName(inst->operand(0)->shape().dtype())));
      }
      if (inst->opcode() != Opcode::kAttentionGrad) continue;
      ops->push_back(fmt::format("d{}({})->{}", "qkv"[inst->attrs().index],
                                 ir::DTypeName(inst->operand(0)->shape().dtype()),
                                 ir::DTypeName(inst->shape().dtype())));
    }
  }
  EXPECT_EQ(narrow_ops, (std::vector<std::string>{"lse(f32)", "dq(bf16)->f32", "dk(bf16)->f32",
                                                  "dv(bf16)->f32"}));
  EXPECT_EQ(wide_ops,
            (std::vector<std::string>{"lse(f32)", "dq(f32)->f32", "dk(f32)->f32", "dv(f32)->f32"}));

  std::mt19937_64 rng(3);
  std::vector<eval::Literal> args;
  for (const ir::Instruction* p : wide->entry()->parameters()) {
    args.push_back(eval::Literal::Random(p->shape(), rng));
  }
  StatusOr<eval::Literal> a = eval::Evaluate(*narrow, args);  // bf16 rounding on
  StatusOr<eval::Literal> b = eval::Evaluate(*wide, args);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t g = 1; g < 4; ++g) {  // dq, dk, dv
    double worst = 0, scale = 0, differ = 0;
    for (size_t j = 0; j < b->elements[g].values.size(); ++j) {
      const double d = std::abs(a->elements[g].values[j] - b->elements[g].values[j]);
      worst = std::max(worst, d);
      differ += d > 0 ? 1 : 0;
      scale = std::max(scale, std::abs(b->elements[g].values[j]));
    }
    EXPECT_LT(worst, 2e-2 * scale) << "gradient " << g;
    EXPECT_GT(differ, 0) << "gradient " << g << " was not computed in bf16";
  }
}

}  // namespace
}  // namespace gptc::passes
