// Malformed modules: the verifier rejects each one with a message that names
// the instruction (and, for parsed text, its file:line:col), and the parser
// rejects bad syntax with `file:line:col: expected ...`.
#include "compiler/ir/verifier.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>

#include "compiler/ir/builder.h"
#include "compiler/ir/parser.h"
#include "compiler/ir/printer.h"

namespace gptc::ir {
namespace {

constexpr std::string_view kFile = "bad.ir";

// "line:col" (1-based) of byte offset `pos` of `text`, computed independently of the parser.
std::string LineColumn(std::string_view text, size_t pos) {
  int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + pos, '\n'));
  size_t line_start = text.rfind('\n', pos == 0 ? 0 : pos - 1);
  line_start = (line_start == std::string_view::npos || pos == 0) ? 0 : line_start + 1;
  return fmt::format("{}:{}", line, pos - line_start + 1);
}

// Where `%name =` is defined in `text`.
std::string DefinitionOf(std::string_view text, std::string_view name) {
  std::string needle = fmt::format("%{} =", name);
  size_t pos = text.find(needle);
  EXPECT_NE(pos, std::string_view::npos) << needle;
  EXPECT_EQ(text.find(needle, pos + 1), std::string_view::npos) << needle << " is not unique";
  return LineColumn(text, pos);
}

std::string Entry(std::string_view body) {
  return fmt::format("module m\n\nENTRY %main {{\n{}}}\n", body);
}

// `text` parses, but VerifyModule fails at instruction `%name` with a message
// `bad.ir:LINE:COL: %name: ...` that contains `what`.
void ExpectVerifyError(std::string_view text, std::string_view name, std::string_view what) {
  SCOPED_TRACE(text);
  StatusOr<std::unique_ptr<Module>> module = ParseModule(text, kFile);
  ASSERT_TRUE(module.ok()) << "should parse: " << module.status().message();
  Status status = VerifyModule(**module);
  ASSERT_FALSE(status.ok()) << "should fail with: " << what;
  std::string subject = fmt::format("{}:{}: %{}: ", kFile, DefinitionOf(text, name), name);
  EXPECT_EQ(status.message().substr(0, subject.size()), subject) << status.message();
  EXPECT_NE(status.message().find(what), std::string::npos) << status.message();
  // ParseAndVerifyModule reports the same error.
  StatusOr<std::unique_ptr<Module>> both = ParseAndVerifyModule(text, kFile);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message(), status.message());
}

// ---------------------------------------------------------------------------
// Typing rules, from parsed text.

TEST(VerifierTest, WrongArity) {
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  ROOT %a = f32[2] add(%x)\n"),
                    "a", "add takes 2 operands, got 1");
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  ROOT %n = f32[2] neg(%x, %x)\n"),
                    "n", "neg takes 1 operand, got 2");
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  ROOT %c = f32[2] concatenate(), dimensions={0}\n"),
                    "c", "concatenate needs at least one operand");
}

TEST(VerifierTest, BinaryOperandsDiffer) {
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  %y = f32[3] parameter(1)\n"
                          "  ROOT %sum = f32[2] add(%x, %y)\n"),
                    "sum", "add operands differ: f32[2] vs f32[3]");
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  %y = bf16[2] parameter(1)\n"
                          "  ROOT %m = f32[2] mul(%x, %y)\n"),
                    "m", "mul operands differ: f32[2] vs bf16[2]");
}

TEST(VerifierTest, StatedShapeDiffersFromInferred) {
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  ROOT %a = f32[3] add(%x, %x)\n"),
                    "a", "add has shape f32[3], but its operands give f32[2]");
  ExpectVerifyError(Entry("  %x = f32[2,3] parameter(0)\n"
                          "  ROOT %t = f32[2,3] transpose(%x), dimensions={1,0}\n"),
                    "t", "transpose has shape f32[2,3], but its operands give f32[3,2]");
  ExpectVerifyError(Entry("  %x = (f32[2], s32[]) parameter(0)\n"
                          "  ROOT %g = f32[] get-tuple-element(%x), index=0\n"),
                    "g", "get-tuple-element has shape f32[], but its operands give f32[2]");
}

TEST(VerifierTest, DotDimensionMismatch) {
  ExpectVerifyError(Entry("  %a = f32[2,3] parameter(0)\n"
                          "  %b = f32[4,5] parameter(1)\n"
                          "  ROOT %d = f32[2,5] dot(%a, %b), lhs_contracting={1}, "
                          "rhs_contracting={0}\n"),
                    "d", "dot contracting dim 1 has size 3, rhs dim 0 has size 4");
  ExpectVerifyError(Entry("  %a = f32[2,3,4] parameter(0)\n"
                          "  %b = f32[3,4,5] parameter(1)\n"
                          "  ROOT %d = f32[2,3,5] dot(%a, %b), lhs_batch={0}, rhs_batch={0}, "
                          "lhs_contracting={2}, rhs_contracting={1}\n"),
                    "d", "dot batch dim 0 has size 2, rhs dim 0 has size 3");
  ExpectVerifyError(Entry("  %a = bf16[2,3] parameter(0)\n"
                          "  ROOT %d = f16[2,2] dot(%a, %a), lhs_contracting={1}, "
                          "rhs_contracting={1}\n"),
                    "d", "dot of bf16 can produce bf16 or f32, not f16");
  ExpectVerifyError(Entry("  %a = f32[2,3] parameter(0)\n"
                          "  ROOT %d = f32[2,2] dot(%a, %a), lhs_contracting={1,1}, "
                          "rhs_contracting={0,1}\n"),
                    "d", "dot lhs dim 1 repeated");
  ExpectVerifyError(Entry("  %a = s32[2,3] parameter(0)\n"
                          "  ROOT %d = s32[2,2] dot(%a, %a), lhs_contracting={1}, "
                          "rhs_contracting={1}\n"),
                    "d", "dot needs float operands, got s32[2,3]");
}

TEST(VerifierTest, BroadcastDimensionsWrong) {
  ExpectVerifyError(Entry("  %v = f32[3] parameter(0)\n"
                          "  ROOT %b = f32[2,3] broadcast(%v), dimensions={0}\n"),
                    "b", "broadcast operand dim 0 (size 3) maps to result dim 0 of size 2");
  ExpectVerifyError(Entry("  %v = f32[3] parameter(0)\n"
                          "  ROOT %b = f32[2,3] broadcast(%v), dimensions={}\n"),
                    "b", "broadcast dimensions {} must have one entry per operand dim (1)");
  ExpectVerifyError(Entry("  %v = f32[3] parameter(0)\n"
                          "  ROOT %b = f32[2,3] broadcast(%v), dimensions={2}\n"),
                    "b", "broadcast dimension 2 out of range for rank 2");
}

TEST(VerifierTest, TransposeNotAPermutation) {
  ExpectVerifyError(Entry("  %x = f32[2,3] parameter(0)\n"
                          "  ROOT %t = f32[2,2] transpose(%x), dimensions={0,0}\n"),
                    "t", "transpose dimension 0 repeated");
  ExpectVerifyError(Entry("  %x = f32[2,3] parameter(0)\n"
                          "  ROOT %t = f32[2] transpose(%x), dimensions={0}\n"),
                    "t", "transpose dimensions {0} is not a permutation of rank 2");
}

TEST(VerifierTest, ReshapeChangesElementCount) {
  ExpectVerifyError(Entry("  %x = f32[2,3] parameter(0)\n"
                          "  ROOT %r = f32[5] reshape(%x)\n"),
                    "r", "reshape of f32[2,3] to f32[5] changes the element count");
}

TEST(VerifierTest, SliceOutOfBounds) {
  ExpectVerifyError(Entry("  %x = f32[4] parameter(0)\n"
                          "  ROOT %s = f32[4] slice(%x), slice={[1:5]}\n"),
                    "s", "slice range [1:5] of dim 0 out of bounds for size 4");
  ExpectVerifyError(Entry("  %x = f32[4] parameter(0)\n"
                          "  ROOT %s = f32[0] slice(%x), slice={[3:2]}\n"),
                    "s", "slice range [3:2] of dim 0 out of bounds for size 4");
  ExpectVerifyError(Entry("  %x = f32[4] parameter(0)\n"
                          "  ROOT %s = f32[4] slice(%x), slice={[0:4:0]}\n"),
                    "s", "slice stride 0 of dim 0 must be >= 1");
  ExpectVerifyError(Entry("  %x = f32[4,2] parameter(0)\n"
                          "  ROOT %s = f32[4] slice(%x), slice={[0:4]}\n"),
                    "s", "slice needs 2 [start:limit:stride] ranges for f32[4,2]");
}

TEST(VerifierTest, SliceWithHugeStrideHasOneElement) {
  // ceil(3 / stride) must not overflow for the largest stride.
  StatusOr<std::unique_ptr<Module>> module = ParseAndVerifyModule(
      Entry("  %x = f32[3] parameter(0)\n"
            "  ROOT %s = f32[1] slice(%x), slice={[0:3:9223372036854775807]}\n"));
  ASSERT_TRUE(module.ok()) << module.status().message();
  EXPECT_EQ((*module)->entry()->root()->shape(), Shape(DType::kF32, {1}));
}

TEST(VerifierTest, PadNegativeOrOverflowing) {
  ExpectVerifyError(Entry("  %x = f32[4] parameter(0)\n"
                          "  %z = f32[] constant(0)\n"
                          "  ROOT %p = f32[3] pad(%x, %z), low={-1}, high={0}\n"),
                    "p", "pad of dim 0 is negative");
  ExpectVerifyError(Entry("  %x = f32[4] parameter(0)\n"
                          "  %z = f32[] constant(0)\n"
                          "  ROOT %p = f32[4] pad(%x, %z), low={9223372036854775807}, "
                          "high={9223372036854775807}\n"),
                    "p", "pad of dim 0 overflows");
  ExpectVerifyError(Entry("  %x = f32[4] parameter(0)\n"
                          "  %z = f32[1] constant({0})\n"
                          "  ROOT %p = f32[5] pad(%x, %z), low={1}, high={0}\n"),
                    "p", "pad value must be a f32 scalar, got f32[1]");
}

TEST(VerifierTest, ReduceDimensionOrDTypeWrong) {
  ExpectVerifyError(Entry("  %x = f32[2,3] parameter(0)\n"
                          "  ROOT %r = f32[2] reduce(%x), dimensions={2}, kind=sum\n"),
                    "r", "reduce dimension 2 out of range for rank 2");
  ExpectVerifyError(Entry("  %x = bf16[2,3] parameter(0)\n"
                          "  ROOT %r = f16[2] reduce(%x), dimensions={1}, kind=sum\n"),
                    "r", "reduce of bf16 can produce bf16 or f32, not f16");
  ExpectVerifyError(Entry("  %x = s32[2,3] parameter(0)\n"
                          "  ROOT %r = f32[2] reduce(%x), dimensions={1}, kind=max\n"),
                    "r", "reduce of s32 can only produce s32, not f32");
  ExpectVerifyError(Entry("  %x = pred[2,3] parameter(0)\n"
                          "  ROOT %r = pred[2] reduce(%x), dimensions={1}, kind=max\n"),
                    "r", "reduce of pred is undefined");
}

TEST(VerifierTest, GatherAndScatterAddOperands) {
  ExpectVerifyError(Entry("  %t = f32[10,3] parameter(0)\n"
                          "  %i = f32[5] parameter(1)\n"
                          "  ROOT %g = f32[5,3] gather(%t, %i), axis=0\n"),
                    "g", "indices must be s32 or u16, got f32[5]");
  ExpectVerifyError(Entry("  %t = f32[10,3] parameter(0)\n"
                          "  %i = s32[5] parameter(1)\n"
                          "  ROOT %g = f32[5,3] gather(%t, %i), axis=2\n"),
                    "g", "axis 2 out of range for f32[10,3]");
  ExpectVerifyError(Entry("  %t = f32[10,3] parameter(0)\n"
                          "  %i = s32[5] parameter(1)\n"
                          "  %u = f32[4,3] parameter(2)\n"
                          "  ROOT %s = f32[10,3] scatter-add(%t, %i, %u), axis=0\n"),
                    "s", "scatter-add updates f32[4,3] must be f32[5,3] for these indices");
}

TEST(VerifierTest, ParameterNumbersWithGapOrDuplicate) {
  ExpectVerifyError(Entry("  %a = f32[2] parameter(0)\n"
                          "  %b = f32[2] parameter(2)\n"
                          "  ROOT %s = f32[2] add(%a, %b)\n"),
                    "b",
                    "parameter number 2 leaves a gap: computation %main has 2 parameters "
                    "but no parameter number 1");
  ExpectVerifyError(Entry("  %a = f32[2] parameter(0)\n"
                          "  %b = f32[2] parameter(0)\n"
                          "  ROOT %s = f32[2] add(%a, %b)\n"),
                    "b", "parameter number 0 already used by %a");
  ExpectVerifyError(Entry("  %a = f32[2] parameter(-1)\n"
                          "  ROOT %s = f32[2] neg(%a)\n"),
                    "a", "parameter number -1 is negative");
  // A huge number is a gap too, not an allocation of that many slots.
  ExpectVerifyError(Entry("  %a = f32[2] parameter(0)\n"
                          "  %b = f32[2] parameter(9223372036854775807)\n"
                          "  ROOT %s = f32[2] add(%a, %b)\n"),
                    "b", "no parameter number 1");
}

TEST(VerifierTest, FusionCallsComputationOfOtherParameters) {
  constexpr std::string_view kCallee =
      "module m\n\n%f {\n"
      "  %p0 = f32[2] parameter(0)\n"
      "  %p1 = f32[2] parameter(1)\n"
      "  ROOT %r = f32[2] add(%p0, %p1)\n}\n\n";
  ExpectVerifyError(fmt::format("{}ENTRY %main {{\n"
                                "  %x = f32[3] parameter(0)\n"
                                "  ROOT %fu = f32[2] fusion(%x, %x), kind=loop, calls=%f\n}}\n",
                                kCallee),
                    "fu", "operand 0 has shape f32[3] but %f parameter 0 is f32[2]");
  ExpectVerifyError(fmt::format("{}ENTRY %main {{\n"
                                "  %x = f32[2] parameter(0)\n"
                                "  ROOT %fu = f32[2] fusion(%x), kind=loop, calls=%f\n}}\n",
                                kCallee),
                    "fu", "calls %f with 2 parameters but has 1 operands");
  ExpectVerifyError(fmt::format("{}ENTRY %main {{\n"
                                "  %x = f32[2] parameter(0)\n"
                                "  ROOT %fu = f32[3] fusion(%x, %x), kind=loop, calls=%f\n}}\n",
                                kCallee),
                    "fu", "fusion has shape f32[3], but its operands give f32[2]");
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  ROOT %fu = f32[2] fusion(%x), kind=loop\n"),
                    "fu", "needs a called computation (calls=%name)");
}

// A gemm fusion of one dot, [4,8] x [8,2] + a bias, and its entry with the
// fusion's attributes `attrs` (an `epilogue={...}` or none).
std::string GemmModule(std::string_view attrs, std::string_view kind = "gemm") {
  return fmt::format(
      "module m\n\n%f {{\n"
      "  %a = f32[4,8] parameter(0)\n"
      "  %w = f32[8,2] parameter(1)\n"
      "  %b = f32[2] parameter(2)\n"
      "  %d = f32[4,2] dot(%a, %w), lhs_contracting={{1}}, rhs_contracting={{0}}\n"
      "  %bb = f32[4,2] broadcast(%b), dimensions={{1}}\n"
      "  ROOT %r = f32[4,2] add(%d, %bb)\n}}\n\n"
      "ENTRY %main {{\n"
      "  %x = f32[4,8] parameter(0)\n"
      "  %y = f32[8,2] parameter(1)\n"
      "  %z = f32[2] parameter(2)\n"
      "  ROOT %fu = f32[4,2] fusion(%x, %y, %z), kind={}{}, calls=%f\n}}\n",
      kind, attrs);
}

// Note [roles]: values flow forward -> remat -> gradient -> optimizer; a
// fusion may mix phases, so its edges are not checked.
TEST(VerifierTest, RolesFollowTheTrainStepsFlow) {
  StatusOr<std::unique_ptr<Module>> ok = ParseAndVerifyModule(
      Entry("  %x = f32[2] parameter(0), phase=forward, layer=0\n"
            "  %w = f32[2] convert(%x), phase=param_cast, layer=0\n"
            "  %r = f32[2] exp(%w), phase=remat, layer=0\n"
            "  %g = f32[2] mul(%r, %x), phase=gradient, layer=0\n"
            "  %u = f32[2] sub(%x, %g), phase=update, layer=0\n"
            "  %n = f32[] reduce(%u), dimensions={0}, kind=sum, phase=optimizer\n"
            "  %plain = f32[2] neg(%g)\n"
            "  ROOT %t = (f32[2], f32[], f32[2]) tuple(%u, %n, %plain)\n"),
      kFile);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  %g = f32[2] neg(%x), phase=gradient\n"
                          "  ROOT %y = f32[2] add(%x, %g), phase=forward\n"),
                    "y", "a forward value reads %g, a gradient value");
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  %u = f32[2] neg(%x), phase=update\n"
                          "  ROOT %r = f32[2] exp(%u), phase=remat\n"),
                    "r", "a remat value reads %u, a update value");
  ExpectVerifyError(Entry("  ROOT %x = f32[2] parameter(0), layer=3\n"), "x",
                    "has layer=3 but no phase");
}

TEST(VerifierTest, AFusionMayMixPhases) {
  StatusOr<std::unique_ptr<Module>> ok = ParseAndVerifyModule(R"(module m

%fused {
  %p0 = f32[2] parameter(0)
  %l = f32[2] exp(%p0), phase=forward
  %d = f32[2] neg(%l), phase=gradient
  ROOT %t = (f32[2], f32[2]) tuple(%l, %d)
}

ENTRY %main {
  %x = f32[2] parameter(0), phase=forward
  %f = (f32[2], f32[2]) fusion(%x), kind=loop, calls=%fused, phase=forward
  %l = f32[2] get-tuple-element(%f), index=0, phase=forward
  %d = f32[2] get-tuple-element(%f), index=1, phase=gradient
  %y = f32[2] add(%l, %x), phase=forward
  ROOT %t = (f32[2], f32[2]) tuple(%y, %d), phase=optimizer
}
)",
                                                              kFile);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
}

TEST(VerifierTest, GemmEpilogueRecordFitsTheFusion) {
  StatusOr<std::unique_ptr<Module>> ok =
      ParseAndVerifyModule(GemmModule(", epilogue={d=0, bias=2}"), kFile);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ExpectVerifyError(GemmModule(""), "fu", "kind=gemm fusion without its epilogue record");
  ExpectVerifyError(GemmModule(", epilogue={d=0}", "loop"), "fu",
                    "only a kind=gemm fusion has an epilogue record");
  ExpectVerifyError(GemmModule(", epilogue={d=1}"), "fu",
                    "epilogue d=1 is not one of the 1 outputs");
  ExpectVerifyError(GemmModule(", epilogue={d=0, bias=3}"), "fu",
                    "epilogue bias=3 is not an operand");
  ExpectVerifyError(GemmModule(", epilogue={d=0, bias=0}"), "fu",
                    "epilogue bias %x is f32[4,8], not a vector of D's last dim (f32[4,2])");
  ExpectVerifyError(GemmModule(", epilogue={d=0, residual=2}"), "fu",
                    "epilogue residual %z is f32[2], D is f32[4,2]");
  ExpectVerifyError(GemmModule(", epilogue={d=0, aux_out=0, activation=gelu}"), "fu",
                    "epilogue names 2 outputs of the fusion's 1");
  ExpectVerifyError(GemmModule(", epilogue={d=0, activation=gelu_grad}"), "fu",
                    "an activation's backward and only it reads an aux operand");
  ExpectVerifyError(GemmModule(", epilogue={d=0, activation=gelu_grad, aux_in=2}"), "fu",
                    "epilogue aux_in=2 is not an operand of D's dims");
  ExpectVerifyError(GemmModule(", epilogue={d=0, bias_grad_of=1}"), "fu",
                    "bias_grad_out and bias_grad_of go together");
}

TEST(VerifierTest, CallsTheEntryOrItself) {
  ExpectVerifyError(
      "module m\n\nENTRY %main {\n"
      "  ROOT %x = f32[2] parameter(0)\n}\n\n"
      "%g {\n"
      "  %y = f32[2] parameter(0)\n"
      "  ROOT %fu = f32[2] fusion(%y), kind=loop, calls=%main\n}\n",
      "fu", "calls the entry computation");
  ExpectVerifyError(
      "module m\n\n%g {\n"
      "  %y = f32[2] parameter(0)\n"
      "  ROOT %fu = f32[2] fusion(%y), kind=loop, calls=%g\n}\n\n"
      "ENTRY %main {\n"
      "  ROOT %x = f32[2] parameter(0)\n}\n",
      "fu", "calls %g, which must be defined before %g");
}

TEST(VerifierTest, ConstantValuesNotExactOrWrongCount) {
  ExpectVerifyError(Entry("  ROOT %c = s32[] constant(0.1)\n"), "c",
                    "constant value 0.1 at index 0 is not exact in s32");
  ExpectVerifyError(Entry("  ROOT %c = s32[2] constant({1, 2147483648})\n"), "c",
                    "constant value 2147483648 at index 1 is not exact in s32");
  ExpectVerifyError(Entry("  ROOT %c = u16[3] constant({0, 1, -1})\n"), "c",
                    "constant value -1 at index 2 is not exact in u16");
  ExpectVerifyError(Entry("  ROOT %c = u16[] constant(65536)\n"), "c",
                    "constant value 65536 at index 0 is not exact in u16");
  ExpectVerifyError(Entry("  ROOT %c = pred[2] constant({true, 2})\n"), "c",
                    "constant value 2 at index 1 is not exact in pred");
  ExpectVerifyError(Entry("  ROOT %c = s32[] constant(nan)\n"), "c", "is not exact in s32");
  ExpectVerifyError(Entry("  ROOT %c = f32[3] constant({1, 2})\n"), "c",
                    "constant has 2 values but f32[3] holds 3");
  ExpectVerifyError(Entry("  ROOT %c = f32[] constant({})\n"), "c",
                    "constant has 0 values but f32[] holds 1");
  ExpectVerifyError(Entry("  ROOT %c = (f32[]) constant(1)\n"), "c",
                    "result must be an array, got tuple (f32[])");
}

TEST(VerifierTest, GetTupleElementIndex) {
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  %t = (f32[2], f32[2]) tuple(%x, %x)\n"
                          "  ROOT %g = f32[2] get-tuple-element(%t), index=2\n"),
                    "g", "tuple index 2 out of range for (f32[2], f32[2])");
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  %t = (f32[2], f32[2]) tuple(%x, %x)\n"
                          "  ROOT %g = f32[2] get-tuple-element(%t), index=-1\n"),
                    "g", "tuple index -1 out of range");
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  ROOT %g = f32[2] get-tuple-element(%x), index=0\n"),
                    "g", "get-tuple-element of non-tuple f32[2]");
}

TEST(VerifierTest, SelectAndCompareTypes) {
  ExpectVerifyError(Entry("  %p = f32[2] parameter(0)\n"
                          "  %x = f32[2] parameter(1)\n"
                          "  ROOT %s = f32[2] select(%p, %x, %x)\n"),
                    "s", "select predicate must be pred, got f32[2]");
  ExpectVerifyError(Entry("  %p = pred[3] parameter(0)\n"
                          "  %x = f32[2] parameter(1)\n"
                          "  ROOT %s = f32[2] select(%p, %x, %x)\n"),
                    "s", "select predicate pred[3] does not match branches f32[2]");
  ExpectVerifyError(Entry("  %p = pred[2] parameter(0)\n"
                          "  %x = f32[2] parameter(1)\n"
                          "  %y = s32[2] parameter(2)\n"
                          "  ROOT %s = f32[2] select(%p, %x, %y)\n"),
                    "s", "select branches differ: f32[2] vs s32[2]");
  ExpectVerifyError(Entry("  %x = f32[2] parameter(0)\n"
                          "  ROOT %c = f32[2] compare(%x, %x), direction=LT\n"),
                    "c", "compare has shape f32[2], but its operands give pred[2]");
}

TEST(VerifierTest, ConcatenateMismatch) {
  ExpectVerifyError(Entry("  %a = f32[2,3] parameter(0)\n"
                          "  %b = f32[2,4] parameter(1)\n"
                          "  ROOT %c = f32[4,3] concatenate(%a, %b), dimensions={0}\n"),
                    "c", "concatenate operand 1 f32[2,4] does not match f32[2,3] outside dim 0");
  ExpectVerifyError(Entry("  %a = f32[2,3] parameter(0)\n"
                          "  ROOT %c = f32[4,3] concatenate(%a, %a), dimensions={2}\n"),
                    "c", "concatenate dimension 2 out of range for f32[2,3]");
}

TEST(VerifierTest, IotaDimensionOutOfRange) {
  ExpectVerifyError(Entry("  ROOT %i = s32[2,3] iota(), iota_dimension=2\n"), "i",
                    "iota_dimension 2 out of range for s32[2,3]");
  ExpectVerifyError(Entry("  ROOT %i = pred[2] iota(), iota_dimension=0\n"), "i",
                    "iota of pred is undefined");
}

TEST(VerifierTest, UnaryOpsOnWrongDTypes) {
  ExpectVerifyError(Entry("  %x = s32[2] parameter(0)\n"
                          "  ROOT %e = s32[2] exp(%x)\n"),
                    "e", "exp needs a float operand, got s32[2]");
  ExpectVerifyError(Entry("  %x = pred[2] parameter(0)\n"
                          "  ROOT %n = pred[2] neg(%x)\n"),
                    "n", "neg of pred is undefined");
  ExpectVerifyError(Entry("  %x = pred[2] parameter(0)\n"
                          "  ROOT %a = pred[2] add(%x, %x)\n"),
                    "a", "add of pred is undefined");
  ExpectVerifyError(Entry("  %x = s32[2] parameter(0)\n"
                          "  ROOT %p = s32[2] pow(%x, %x)\n"),
                    "p", "pow needs float operands, got s32[2]");
  ExpectVerifyError(Entry("  %x = s32[2] parameter(0)\n"
                          "  ROOT %a = s32[2] all-reduce(%x), kind=sum\n"),
                    "a", "all-reduce needs a float operand");
  ExpectVerifyError(Entry("  %x = (f32[2]) parameter(0)\n"
                          "  ROOT %n = (f32[2]) neg(%x)\n"),
                    "n", "operand 0 must be an array, got tuple (f32[2])");
}

TEST(VerifierTest, CompositeOpsCheckTheirOperands) {
  constexpr std::string_view kAttention =
      "module m\n\n%d {\n"
      "  %q = f32[1,2,4,8] parameter(0)\n"
      "  %k = f32[1,2,6,8] parameter(1)\n"
      "  %v = f32[1,2,6,8] parameter(2)\n"
      "  ROOT %o = f32[1,2,4,8] copy(%q)\n}\n\n";
  ExpectVerifyError(fmt::format("{}ENTRY %main {{\n"
                                "  %q = f32[1,2,4,8] parameter(0)\n"
                                "  %k = f32[1,2,6,8] parameter(1)\n"
                                "  ROOT %a = f32[1,2,4,8] attention(%q, %k, %k), causal=true, "
                                "scale=0.5, calls=%d\n}}\n",
                                kAttention),
                    "a", "causal attention needs equal query and key lengths");
  ExpectVerifyError(fmt::format("{}ENTRY %main {{\n"
                                "  %q = f32[1,2,4,8] parameter(0)\n"
                                "  %k = f32[1,2,6,8] parameter(1)\n"
                                "  %v = f32[1,2,6,7] parameter(2)\n"
                                "  ROOT %a = f32[1,2,4,8] attention(%q, %k, %v), causal=false, "
                                "scale=0.5, calls=%d\n}}\n",
                                kAttention),
                    "a", "attention q f32[1,2,4,8] does not match k f32[1,2,6,8]");
  constexpr std::string_view kSce =
      "module m\n\n%d {\n"
      "  %l = f32[4,10] parameter(0)\n"
      "  %t = s32[4] parameter(1)\n"
      "  ROOT %r = f32[4] reduce(%l), dimensions={1}, kind=max\n}\n\n";
  ExpectVerifyError(fmt::format("{}ENTRY %main {{\n"
                                "  %l = f32[4,10] parameter(0)\n"
                                "  %t = s32[4] parameter(1)\n"
                                "  ROOT %x = f32[4] softmax-cross-entropy(%l, %t), "
                                "num_classes=11, calls=%d\n}}\n",
                                kSce),
                    "x", "num_classes 11 out of range for 10 classes");
  ExpectVerifyError(fmt::format("{}ENTRY %main {{\n"
                                "  %l = f32[4,10] parameter(0)\n"
                                "  %t = u16[4] parameter(1)\n"
                                "  ROOT %x = f32[4] softmax-cross-entropy(%l, %t), calls=%d\n}}\n",
                                kSce),
                    "x", "targets must be s32{4} for logits f32[4,10], got u16[4]");
}

TEST(VerifierTest, LocationUsesSourceFileAndRootColumn) {
  // The location is the `%name` after ROOT, on the right line of a longer file.
  std::string text = Entry(
      "  %x = s32[2] parameter(0)\n\n  // a comment line\n"
      "  ROOT %bad = s32[2] exp(%x)\n");
  StatusOr<std::unique_ptr<Module>> module = ParseModule(text, "dir/model.ir");
  ASSERT_TRUE(module.ok()) << module.status().message();
  Status status = VerifyModule(**module);
  EXPECT_EQ(status.message(), "dir/model.ir:7:8: %bad: exp needs a float operand, got s32[2]");
  // Without a file name the location still reads <input>:line:col.
  module = ParseModule(text);
  ASSERT_TRUE(module.ok());
  EXPECT_EQ(VerifyModule(**module).message(),
            "<input>:7:8: %bad: exp needs a float operand, got s32[2]");
}

// ---------------------------------------------------------------------------
// Modules built in memory: the message names the instruction, without a location.

TEST(VerifierTest, BuiltModuleErrorsNameTheInstruction) {
  Module module("m");
  Computation* main = module.AddComputation("main");
  module.set_entry(main);
  Builder b(main);
  StatusOr<Instruction*> x = b.Parameter(0, Shape(DType::kF32, {2, 3}), "x");
  ASSERT_TRUE(x.ok());
  StatusOr<Instruction*> t = b.Transpose(*x, {1, 0});
  ASSERT_TRUE(t.ok());
  main->set_root(*t);
  ASSERT_TRUE(VerifyModule(module).ok()) << VerifyModule(module).message();

  // A pass that edits attributes without fixing the shape is caught.
  (*t)->mutable_attrs().dimensions = {0, 1};
  EXPECT_EQ(VerifyModule(module).message(),
            "%transpose: transpose has shape f32[3,2], but its operands give f32[2,3]");
  (*t)->mutable_attrs().dimensions = {1, 0};
  ASSERT_TRUE(VerifyModule(module).ok());

  // An instruction inserted before its operand breaks SSA order.
  b.set_insertion_point(*t);
  StatusOr<Instruction*> early = b.Unary(Opcode::kNeg, *t);
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(VerifyModule(module).message(),
            "%neg: operand 0 %transpose is used before it is defined");
}

TEST(VerifierTest, BuiltModuleStructuralErrors) {
  Module module("m");
  Computation* main = module.AddComputation("main");
  EXPECT_EQ(VerifyModule(module).message(), "module m has no entry computation");
  module.set_entry(main);
  EXPECT_EQ(VerifyModule(module).message(), "computation %main has no root");

  Builder b(main);
  StatusOr<Instruction*> x = b.Parameter(0, Shape(DType::kF32, {2}), "bad name");
  ASSERT_TRUE(x.ok());
  main->set_root(*x);
  EXPECT_EQ(VerifyModule(module).message(),
            "%bad name: instruction name is not valid in the text format");

  // An operand from another computation.
  Module other("m2");
  Computation* c2 = other.AddComputation("main");
  other.set_entry(c2);
  Builder b2(c2);
  StatusOr<Instruction*> y = b2.Parameter(0, Shape(DType::kF32, {2}), "y");
  ASSERT_TRUE(y.ok());
  Computation* side = other.AddComputation("side");
  Builder bs(side);
  StatusOr<Instruction*> n = bs.Unary(Opcode::kNeg, *y);
  ASSERT_TRUE(n.ok());
  side->set_root(*n);
  c2->set_root(*y);
  // %side comes after %main, so it is verified second.
  EXPECT_EQ(VerifyModule(other).message(), "%neg: operand 0 %y is not in computation %side");

  // A non-calling op with a called computation, and a callee from another module.
  Module third("m3");
  Computation* c3 = third.AddComputation("main");
  third.set_entry(c3);
  Builder b3(c3);
  StatusOr<Instruction*> z = b3.Parameter(0, Shape(DType::kF32, {2}), "z");
  ASSERT_TRUE(z.ok());
  StatusOr<Instruction*> e = b3.Unary(Opcode::kExp, *z);
  ASSERT_TRUE(e.ok());
  c3->set_root(*e);
  (*e)->set_called_computation(side);
  EXPECT_EQ(VerifyModule(third).message(), "%exp: exp cannot call a computation");
  (*e)->set_called_computation(nullptr);
  Computation* callee = other.AddComputation("callee");
  Builder bc(callee);
  StatusOr<Instruction*> p = bc.Parameter(0, Shape(DType::kF32, {2}), "p");
  ASSERT_TRUE(p.ok());
  callee->set_root(*p);
  StatusOr<Instruction*> f = b3.Fusion({*z}, callee, FusionKind::kLoop);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(VerifyModule(third).message(),
            "%fusion: calls %callee, which must be defined before %main");
}

// ---------------------------------------------------------------------------
// Parser errors: `file:line:col: message`, the location pointing at `at`.

void ExpectParseError(std::string_view text, std::string_view at, std::string_view message) {
  SCOPED_TRACE(text);
  StatusOr<std::unique_ptr<Module>> module = ParseModule(text, kFile);
  ASSERT_FALSE(module.ok()) << "should fail with: " << message;
  size_t pos = at.empty() ? text.size() : text.find(at);
  ASSERT_NE(pos, std::string_view::npos) << at;
  if (!at.empty()) {
    ASSERT_EQ(text.find(at, pos + 1), std::string_view::npos) << at << " is not unique";
  }
  EXPECT_EQ(module.status().message(),
            fmt::format("{}:{}: {}", kFile, LineColumn(text, pos), message));
}

TEST(ParserErrorTest, MissingBracket) {
  ExpectParseError(Entry("  ROOT %x = f32[2,3 parameter(0)\n"), "parameter(0)",
                   "expected ']' after dimensions");
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[2] broadcast(%x), dimensions={0 1}\n"),
                   "1}", "expected '}' after dimensions");
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(0\n"), "}\n",
                   "expected ')' after parameter number");
  ExpectParseError(Entry("  %x = f32[4] parameter(0)\n"
                         "  ROOT %s = f32[2] slice(%x), slice={[0:2}\n"),
                   "}\n}", "expected ']' after slice range");
  ExpectParseError(Entry("  ROOT %t = (f32[2], s32[] tuple()\n"), "tuple()",
                   "expected ')' after tuple shape");
}

TEST(ParserErrorTest, AttentionGradDtypeMustBeAFloatDtype) {
  const std::string text =
      "module m\n%d {\n  %q = f32[1,1,2,4] parameter(0)\n  %k = f32[1,1,2,4] parameter(1)\n"
      "  %v = f32[1,1,2,4] parameter(2)\n  ROOT %o = f32[1,1,2,4] copy(%v)\n}\n"
      "ENTRY %main {\n  %q = f32[1,1,2,4] parameter(0)\n"
      "  ROOT %a = f32[1,1,2,4] attention(%q, %q, %q), causal=true, scale=0.5, grad_dtype=s32, "
      "calls=%d\n}\n";
  ExpectParseError(text, "s32,", "grad_dtype must be a float dtype, got 's32'");
}

TEST(ParserErrorTest, UnknownOpcode) {
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[2] frobnicate(%x)\n"),
                   "frobnicate", "unknown opcode 'frobnicate'");
  ExpectParseError(Entry("  ROOT %y = f32[2] (%x)\n"), "(%x)", "expected an opcode");
}

TEST(ParserErrorTest, UndefinedOperand) {
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[2] add(%x, %zz)\n"),
                   "%zz", "use of undefined value %zz");
  // Operands must be defined earlier, not later, in the same computation.
  ExpectParseError(Entry("  %y = f32[2] neg(%x)\n"
                         "  ROOT %x = f32[2] parameter(0)\n"),
                   "%x)", "use of undefined value %x");
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %f = f32[2] fusion(%x), kind=loop, calls=%nowhere\n"),
                   "%nowhere",
                   "calls undefined computation %nowhere (define it before its callers)");
}

TEST(ParserErrorTest, Redefinition) {
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %x = f32[2] neg(%x)\n"),
                   "%x = f32[2] neg", "redefinition of %x");
  ExpectParseError(
      "module m\n%a {\n  ROOT %x = f32[] parameter(0)\n}\n"
      "ENTRY %a {\n  ROOT %y = f32[] parameter(0)\n}\n",
      "%a {\n  ROOT %y", "redefinition of computation %a");
}

TEST(ParserErrorTest, MissingRootAndEntry) {
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"), "}\n",
                   "computation %main has no ROOT instruction");
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[2] neg(%x)\n"),
                   "%y", "second ROOT in computation %main");
  ExpectParseError("module m\n\n%f {\n  ROOT %x = f32[2] parameter(0)\n}\n", "",
                   "expected an ENTRY computation");
  ExpectParseError(
      "module m\nENTRY %a {\n  ROOT %x = f32[] parameter(0)\n}\n"
      "ENTRY %b {\n  ROOT %x = f32[] parameter(0)\n}\n",
      "%b", "a module has one ENTRY computation");
  ExpectParseError("module m\nENTRY %main {\n  ROOT %x = f32[2] parameter(0)\n", "",
                   "expected '}' to close computation %main");
  ExpectParseError("ENTRY %main {\n  ROOT %x = f32[2] parameter(0)\n}\n", "ENTRY",
                   "expected 'module' at the start of the file");
}

TEST(ParserErrorTest, UnknownOrRepeatedAttribute) {
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[2] add(%x, %x), foo=1\n"),
                   "foo", "unknown attribute 'foo' for add");
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[2] neg(%x), calls=%main\n"),
                   "calls", "unknown attribute 'calls' for neg");
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[2] neg(%x), meta=\"a\", meta=\"b\"\n"),
                   "meta=\"b\"", "attribute 'meta' given twice");
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = pred[2] compare(%x, %x), direction=LTE\n"),
                   "LTE", "unknown comparison direction 'LTE'");
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[] reduce(%x), dimensions={0}, kind=min\n"),
                   "min", "unknown reduce kind 'min'");
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[2] neg(%x),\n"),
                   "}\n", "expected an attribute name after ','");
}

TEST(ParserErrorTest, BadGemmEpilogue) {
  ExpectParseError(GemmModule(", epilogue={d=0, relu=1}"), "relu", "unknown epilogue field 'relu'");
  ExpectParseError(GemmModule(", epilogue={d=0, d=1}"), "d=1", "epilogue field 'd' given twice");
  ExpectParseError(GemmModule(", epilogue={d=0, activation=swish}"), "swish}",
                   "unknown gemm activation 'swish'");
  ExpectParseError(GemmModule(", epilogue={d=x}"), "x}",
                   "expected an integer for epilogue field 'd'");
  ExpectParseError(GemmModule(", epilogue={d=0, transposed=yes}"), "yes",
                   "expected true or false for transposed");
  ExpectParseError(GemmModule(", epilogue={d=0 bias=2}"), "bias=2",
                   "expected ',' between epilogue fields");
  ExpectParseError(GemmModule(", epilogue=d=0"), "d=0", "expected '{' to open an epilogue record");
}

TEST(ParserErrorTest, BadRole) {
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(0), phase=backward\n"), "backward",
                   "unknown phase 'backward' (forward, param_cast, remat, gradient, update or "
                   "optimizer)");
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(0), phase=none\n"), "none",
                   "unknown phase 'none' (forward, param_cast, remat, gradient, update or "
                   "optimizer)");
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(0), phase=forward, layer=-1\n"), "-1",
                   "layer must be in [0, 32767], got -1");
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(0), phase=forward, layer=40000\n"), "40000",
                   "layer must be in [0, 32767], got 40000");
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(0), phase=forward, phase=gradient\n"),
                   "phase=gradient", "attribute 'phase' given twice");
}

TEST(ParserErrorTest, BadDTypeAndShape) {
  ExpectParseError(Entry("  ROOT %x = f64[2] parameter(0)\n"), "f64", "unknown dtype 'f64'");
  ExpectParseError(Entry("  ROOT %x = [2] parameter(0)\n"), "[2]", "expected a shape");
  ExpectParseError(Entry("  ROOT %x = f32[-2] parameter(0)\n"), "-2",
                   "dimension must not be negative");
  ExpectParseError(Entry("  ROOT %x = f32[16777216,16777217] parameter(0)\n"), "16777217",
                   "shape is too large");
  // A zero dimension does not lift the limit on the others.
  ExpectParseError(Entry("  ROOT %x = f32[0,281474976710657] parameter(0)\n"), "281474976710657",
                   "shape is too large");
  ExpectParseError(Entry("  ROOT %x = f32[2,x] parameter(0)\n"), "x]",
                   "expected an integer as a dimension");
  std::string deep = std::string(40, '(') + "f32[]" + std::string(40, ')');
  ExpectParseError(Entry(fmt::format("  ROOT %x = {} parameter(0)\n", deep)),
                   std::string(8, '(') + "f32", "tuple shape nested too deeply");
}

TEST(ParserErrorTest, BadStringsAndNumbers) {
  ExpectParseError(Entry("  %x = f32[2] parameter(0), meta=\"abc\n"
                         "  ROOT %y = f32[2] neg(%x)\n"),
                   "\n  ROOT", "unterminated string");
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(0), meta=\"a\\tb\"\n"), "\\tb",
                   "unknown escape '\\t'");
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(0), meta=abc\n"), "abc",
                   "expected '\"' to open a string");
  ExpectParseError(Entry("  ROOT %c = f32[2] constant({1, 2x})\n"), "2x", "expected a number");
  ExpectParseError(Entry("  ROOT %c = f32[] constant(0x10)\n"), "0x10", "expected a number");
  ExpectParseError(Entry("  ROOT %x = f32[2] parameter(zero)\n"), "zero)",
                   "expected an integer as parameter number");
  ExpectParseError(Entry("  ROOT %i = s32[2] iota(), iota_dimension=99999999999999999999\n"),
                   "99999999999999999999", "expected an integer for iota_dimension");
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %f = f32[2] fusion(%x), kind=fast, calls=%main\n"),
                   "fast", "unknown fusion kind 'fast'");
}

TEST(ParserErrorTest, MissingPunctuation) {
  ExpectParseError(Entry("  ROOT %x f32[2] parameter(0)\n"), "f32", "expected '=' after %x");
  ExpectParseError(Entry("  ROOT x = f32[2] parameter(0)\n"),
                   "x =", "expected '%' before an instruction name");
  ExpectParseError(Entry("  ROOT % = f32[2] parameter(0)\n"), " = f32",
                   "expected an instruction name after '%'");
  ExpectParseError("module\n", "\n", "expected a module name after 'module'");
  ExpectParseError("module m\nENTRY main {\n}\n", "main", "expected '%' before a computation name");
  ExpectParseError("module m\nENTRY %main\n  ROOT %x = f32[] parameter(0)\n}\n", "ROOT",
                   "expected '{' to open computation %main");
  ExpectParseError(Entry("  %x = f32[2] parameter(0)\n"
                         "  ROOT %y = f32[2] add(%x %x)\n"),
                   "%x)", "expected ')' after operands");
}

TEST(ParserErrorTest, ParseShapeErrors) {
  StatusOr<Shape> shape = ParseShape("f32[2] junk");
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().message(), "<shape>:1:8: unexpected text after shape");
  shape = ParseShape("bf16[2");
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().message(), "<shape>:1:7: expected ']' after dimensions");
}

}  // namespace
}  // namespace gptc::ir
