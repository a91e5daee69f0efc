// Note [chunked fusions]: a fusion evaluated a slice of rows at a time gives
// its whole evaluation's result bit for bit (in both arithmetics, with slices
// that do not divide the rows), and a body that mixes rows runs whole.
#include "compiler/eval/chunked_fusion.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/eval/evaluator.h"
#include "compiler/ir/parser.h"

namespace gptc::eval {
namespace {

// A cross-entropy-like body: an iota against broadcast targets, a select,
// exp, a row reduction, a transpose keeping the rows and a bf16 result.
constexpr char kSeparable[] = R"(module m
%body {
  %p0 = f32[7,5,9] parameter(0)
  %p1 = s32[7,5] parameter(1)
  %p2 = f32[] parameter(2)
  %p3 = f32[9] parameter(3)
  %iota = s32[7,5,9] iota(), iota_dimension=2
  %t = s32[7,5,9] broadcast(%p1), dimensions={0,1}
  %eq = pred[7,5,9] compare(%iota, %t), direction=EQ
  %s = f32[7,5,9] broadcast(%p2), dimensions={}
  %sel = f32[7,5,9] select(%eq, %p0, %s)
  %v = f32[7,5,9] broadcast(%p3), dimensions={2}
  %add = f32[7,5,9] add(%sel, %v)
  %e = f32[7,5,9] exp(%add)
  %r = f32[7,5] reduce(%e), dimensions={2}, kind=sum
  %tr = f32[7,9,5] transpose(%e), dimensions={0,2,1}
  %h = bf16[7,9,5] convert(%tr)
  %flat = bf16[7,45] reshape(%h)
  ROOT %out = (f32[7,5], bf16[7,45]) tuple(%r, %flat)
}
ENTRY %main {
  %x = f32[7,5,9] parameter(0)
  %y = s32[7,5] parameter(1)
  %z = f32[] parameter(2)
  %w = f32[9] parameter(3)
  ROOT %f = (f32[7,5], bf16[7,45]) fusion(%x, %y, %z, %w), kind=loop, calls=%body
}
)";

// The cross-entropy gradient's shape of body: [B,T,V] values, per-(b,t)
// targets and a per-(b,t) constant scale, rows over both leading dims. Its
// [B,T,V] operand is at its last use: the bf16 result is built in its buffer.
constexpr char kTwoLeadingDims[] = R"(module m
%body {
  %p0 = f32[4,6,11] parameter(0)
  %p1 = s32[4,6] parameter(1)
  %iota = s32[4,6,11] iota(), iota_dimension=2
  %t = s32[4,6,11] broadcast(%p1), dimensions={0,1}
  %eq = pred[4,6,11] compare(%iota, %t), direction=EQ
  %e = f32[4,6,11] exp(%p0)
  %sum = f32[4,6] reduce(%e), dimensions={2}, kind=sum
  %sb = f32[4,6,11] broadcast(%sum), dimensions={0,1}
  %soft = f32[4,6,11] div(%e, %sb)
  %one = f32[] constant(1)
  %ones = f32[4,6,11] broadcast(%one), dimensions={}
  %minus = f32[4,6,11] sub(%soft, %ones)
  %g = f32[4,6,11] select(%eq, %minus, %soft)
  %scale = f32[4,6] constant({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24})
  %sc = f32[4,6,11] broadcast(%scale), dimensions={0,1}
  %m = f32[4,6,11] mul(%g, %sc)
  %h = bf16[4,6,11] convert(%m)
  ROOT %out = (f32[4,6], bf16[4,6,11]) tuple(%sum, %h)
}
ENTRY %main {
  %x = f32[4,6,11] parameter(0)
  %y = s32[4,6] parameter(1)
  %xn = f32[4,6,11] neg(%x)
  ROOT %f = (f32[4,6], bf16[4,6,11]) fusion(%xn, %y), kind=loop, calls=%body
}
)";

// Row 0 feeds every row (a reduction over the rows): not separable.
constexpr char kMixing[] = R"(module m
%body {
  %p0 = f32[7,9] parameter(0)
  %r = f32[9] reduce(%p0), dimensions={0}, kind=sum
  %b = f32[7,9] broadcast(%r), dimensions={1}
  ROOT %m = f32[7,9] mul(%p0, %b)
}
ENTRY %main {
  %x = f32[7,9] parameter(0)
  ROOT %f = f32[7,9] fusion(%x), kind=loop, calls=%body
}
)";

std::vector<Literal> Inputs(const ir::Module& module) {
  std::mt19937_64 rng(3);
  std::vector<Literal> args;
  for (const ir::Instruction* p : module.entry()->parameters()) {
    Literal l = Literal::Random(p->shape(), rng);
    if (p->shape().dtype() == ir::DType::kS32) {
      for (size_t i = 0; i < l.values.size(); ++i) l.values[i] = static_cast<double>(i % 9);
    }
    args.push_back(std::move(l));
  }
  return args;
}

void ExpectSameLiteral(const Literal& a, const Literal& b) {
  ASSERT_EQ(a.shape, b.shape);
  ASSERT_EQ(a.elements.size(), b.elements.size());
  for (size_t i = 0; i < a.elements.size(); ++i) ExpectSameLiteral(a.elements[i], b.elements[i]);
  ASSERT_EQ(a.values.size(), b.values.size());
  for (size_t i = 0; i < a.values.size(); ++i) {
    ASSERT_EQ(a.values[i], b.values[i]) << "element " << i;
  }
}

TEST(ChunkedFusionTest, SlicesOfRowsGiveTheWholeResult) {
  // The first body's transpose keeps only its leading dim: its rows are [5,9]
  // (limits 40, 90, 135: slices of 1, 2 and 3 rows, the last one shorter).
  // The second's rows can be [11] (limits 11, 30, 50: slices of 1, 2 and 4
  // of each run of 6) or [6,11] (limits 70 and 200: 1 and 3).
  for (const auto& [text, limits] :
       {std::pair{kSeparable, std::vector<int64_t>{40, 90, 135}},
        std::pair{kTwoLeadingDims, std::vector<int64_t>{11, 30, 50, 70, 200}}}) {
    StatusOr<std::unique_ptr<ir::Module>> module = ir::ParseAndVerifyModule(text, "t.ir");
    ASSERT_TRUE(module.ok()) << module.status().message();
    const std::vector<Literal> args = Inputs(**module);
    for (Precision precision : {Precision::kF32, Precision::kF64}) {
      EvalOptions whole;
      whole.precision = precision;
      whole.chunk_elements = 0;
      StatusOr<Literal> want = Evaluate(**module, args, whole);
      ASSERT_TRUE(want.ok()) << want.status().message();
      for (int64_t limit : limits) {
        EvalOptions sliced = whole;
        sliced.chunk_elements = limit;
        StatusOr<Literal> got = Evaluate(**module, args, sliced);
        ASSERT_TRUE(got.ok()) << got.status().message();
        ExpectSameLiteral(*got, *want);
      }
    }
  }
}

// The slices themselves: how many runs, of how many rows.
TEST(ChunkedFusionTest, SlicesAreAboutTheLimitAndOnlyForSeparableBodies) {
  for (const char* text : {kSeparable, kTwoLeadingDims, kMixing}) {
    StatusOr<std::unique_ptr<ir::Module>> module = ir::ParseAndVerifyModule(text, "t.ir");
    ASSERT_TRUE(module.ok()) << module.status().message();
    EvalOptions options;
    options.chunk_elements = 90;  // two rows of the separable body's [7,5,9]
    internal::Context ctx{options};
    std::vector<internal::ValuePtr> args;
    for (const Literal& l : Inputs(**module)) {
      StatusOr<internal::ValuePtr> v = internal::FromLiteral(ctx, l);
      ASSERT_TRUE(v.ok());
      args.push_back(*v);
    }
    std::vector<int64_t> slice_rows;
    const ir::Instruction& fusion = *(*module)->entry()->root();
    std::optional<StatusOr<internal::ValuePtr>> out = internal::EvalFusionByRows(
        ctx, fusion, args,
        [&](const ir::Computation& body,
            std::span<const internal::ValuePtr> a) -> StatusOr<internal::ValuePtr> {
          slice_rows = a[0]->shape.dims();
          return Error("stop after recording");
        });
    if (text == kMixing) {
      EXPECT_FALSE(out.has_value());
      continue;
    }
    ASSERT_TRUE(out.has_value());
    EXPECT_FALSE(out->ok());
    // Two rows of [5,9] (45 elements); one row of [6,11] (66).
    const std::vector<int64_t> want =
        text == kSeparable ? std::vector<int64_t>{2, 5, 9} : std::vector<int64_t>{1, 6, 11};
    EXPECT_EQ(slice_rows, want);
  }
}

TEST(ChunkedFusionTest, ABodyMixingRowsRunsWhole) {
  StatusOr<std::unique_ptr<ir::Module>> module = ir::ParseAndVerifyModule(kMixing, "t.ir");
  ASSERT_TRUE(module.ok()) << module.status().message();
  const std::vector<Literal> args = Inputs(**module);
  EvalOptions whole, sliced;
  whole.chunk_elements = 0;
  sliced.chunk_elements = 9;
  StatusOr<Literal> want = Evaluate(**module, args, whole);
  StatusOr<Literal> got = Evaluate(**module, args, sliced);
  ASSERT_TRUE(want.ok() && got.ok());
  ExpectSameLiteral(*got, *want);
  // The column sums: a sliced evaluation would have summed one row.
  double column0 = 0;
  for (int r = 0; r < 7; ++r) column0 += args[0].values[r * 9];
  EXPECT_FLOAT_EQ(static_cast<float>(got->values[0]),
                  static_cast<float>(args[0].values[0] * column0));
}

}  // namespace
}  // namespace gptc::eval
