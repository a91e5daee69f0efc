// Split column reductions (Note [split column reductions] in
// compiler/codegen/column_reduction_plan.h): NAME_partials (chunk totals to
// scratch) then NAME (the totals of the chunks, the outputs), run on the
// emulated device with its memory and race checks against the evaluator, at
// shapes that stress the chunking: rows not a multiple of the chunk, reduces
// of fewer rows than a chunk, column counts not a multiple of 32, full
// reductions, max reductions, outputs computed from the totals, and the
// column part of a mixed row/column (layer-norm backward) fusion.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/column_reduction_plan.h"
#include "tests/compiler/codegen/codegen_test_util.h"
#include "tests/compiler/codegen/emu_kernel_runner.h"

namespace gptc::codegen {
namespace {

constexpr std::string_view kSplitModule = R"(module split_test

%grads {
  %dy = f32[9,457,64] parameter(0)
  %x = f32[9,457,64] parameter(1)
  %w = f32[64] parameter(2)
  %db = f32[64] reduce(%dy), dimensions={0,1}, kind=sum
  %m = f32[9,457,64] mul(%dy, %x)
  %dg = f32[64] reduce(%m), dimensions={0,1}, kind=sum
  %mx = f32[64] reduce(%x), dimensions={0,1}, kind=max
  %dgw = f32[64] mul(%dg, %w)
  %db16 = bf16[64] convert(%db)
  ROOT %t = (f32[64], f32[64], bf16[64], f32[64], f32[64]) tuple(%db, %dgw, %db16, %mx, %w)
}

%few_rows {
  %a = f32[4100,64] parameter(0)
  %b = f32[3,64] parameter(1)
  %sa = f32[64] reduce(%a), dimensions={0}, kind=sum
  %sb = f32[64] reduce(%b), dimensions={0}, kind=max
  %s = f32[64] add(%sa, %sb)
  ROOT %t = (f32[64], f32[64]) tuple(%s, %sb)
}

%odd_columns {
  %x = bf16[4100,5,8] parameter(0)
  %y = f32[4100,5,8] parameter(1)
  %xf = f32[4100,5,8] convert(%x)
  %p = f32[4100,5,8] mul(%xf, %y)
  %s = f32[5,8] reduce(%p), dimensions={0}, kind=sum
  ROOT %n = f32[5,8] neg(%s)
}

%narrow {
  %x = f32[17000,5] parameter(0)
  ROOT %s = f32[5] reduce(%x), dimensions={0}, kind=sum
}

%full {
  %x = f32[300001] parameter(0)
  %y = f32[7,11] parameter(1)
  %x2 = f32[300001] mul(%x, %x)
  %sx = f32[] reduce(%x2), dimensions={0}, kind=sum
  %sy = f32[] reduce(%y), dimensions={0,1}, kind=sum
  %s = f32[] add(%sx, %sy)
  ROOT %r = f32[] sqrt(%s)
}

ENTRY %main {
  %dy = f32[9,457,64] parameter(0)
  %x = f32[9,457,64] parameter(1)
  %w = f32[64] parameter(2)
  %a = f32[4100,64] parameter(3)
  %b = f32[3,64] parameter(4)
  %ox = bf16[4100,5,8] parameter(5)
  %oy = f32[4100,5,8] parameter(6)
  %nx = f32[17000,5] parameter(7)
  %fx = f32[300001] parameter(8)
  %fy = f32[7,11] parameter(9)
  %g = (f32[64], f32[64], bf16[64], f32[64], f32[64]) fusion(%dy, %x, %w), kind=reduction, calls=%grads
  %fr = (f32[64], f32[64]) fusion(%a, %b), kind=reduction, calls=%few_rows
  %oc = f32[5,8] fusion(%ox, %oy), kind=reduction, calls=%odd_columns
  %nr = f32[5] fusion(%nx), kind=reduction, calls=%narrow
  %fu = f32[] fusion(%fx, %fy), kind=reduction, calls=%full
  ROOT %t = ((f32[64], f32[64], bf16[64], f32[64], f32[64]), (f32[64], f32[64]), f32[5,8], f32[5], f32[]) tuple(%g, %fr, %oc, %nr, %fu)
}
)";

// The geometry of each split (Note [when a column reduction splits]): G =
// min(1024, ceil(R / (TY * 32)), ceil(1056 / tiles)) chunks of TY = 256 /
// lanes rows.
TEST(SplitColumnReductionTest, ChunksAndGrids) {
  auto module = Parse(kSplitModule);
  ASSERT_NE(module, nullptr);
  auto chunks = [&](const char* name) {
    return ColumnReductionChunks(*module->entry()->FindInstruction(name));
  };
  EXPECT_EQ(chunks("g"), 17);   // 4113 rows of 64 columns: 2 tiles, chunks of 8 x 32 rows
  EXPECT_EQ(chunks("fr"), 17);  // 4100 rows (the 3-row reduce has one in a chunk at most)
  EXPECT_EQ(chunks("oc"), 17);  // 40 columns: 2 tiles, the second of 8 live columns
  EXPECT_EQ(chunks("nr"), 17);  // 5 columns: TX = 5 (8 lanes), TY = 32, chunks of 1024 rows
  // Full reductions split by members (Note [member partials]): 300001
  // elements (odd: scalar loads) in 293 blocks of 256 threads, 4 elements a
  // thread at least; the 77 of %y in one.
  EXPECT_EQ(chunks("fu"), 293 + 1);

  const ir::Instruction& g = *module->entry()->FindInstruction("g");
  StatusOr<ColumnReductionPlan> whole = PlanColumnReduction(g, ColumnPart::kWhole, false);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole->grid, 2);
  EXPECT_EQ(whole->block(), 1024);
  EXPECT_EQ(whole->scratch_floats, 0);
  StatusOr<ColumnReductionPlan> partials = PlanColumnReduction(g, ColumnPart::kPartials, false);
  ASSERT_TRUE(partials.ok()) << partials.status().message();
  EXPECT_EQ(partials->grid, 2 * 17);
  EXPECT_EQ(partials->tx, 32);
  EXPECT_EQ(partials->ty, 8);
  EXPECT_TRUE(partials->written.empty());
  EXPECT_EQ(partials->scratch_floats, 3 * 17 * 64);  // three reduces
  StatusOr<ColumnReductionPlan> final = PlanColumnReduction(g, ColumnPart::kFinal, false);
  ASSERT_TRUE(final.ok()) << final.status().message();
  EXPECT_EQ(final->grid, 2);
  EXPECT_EQ(final->ty, 32);  // 17 partials a column
  EXPECT_EQ(final->written.size(), 5u);
  EXPECT_EQ(final->scratch_floats, partials->scratch_floats);
}

// Just short of each condition, the whole kernel stays: too few rows for
// each of its threads, or enough column tiles to stream at full speed.
TEST(SplitColumnReductionTest, WholeKernelWhereSplittingDoesNotPay) {
  auto module = Parse(R"(module whole

%rows {
  %x = f32[4095,64] parameter(0)
  ROOT %s = f32[64] reduce(%x), dimensions={0}, kind=sum
}

%tiles {
  %x = bf16[16384,2304] parameter(0)
  ROOT %s = f32[2304] reduce(%x), dimensions={0}, kind=sum
}

%full {
  %x = f32[131071] parameter(0)
  ROOT %s = f32[] reduce(%x), dimensions={0}, kind=sum
}

%dependent {
  %x = f32[8192,64] parameter(0)
  %m = f32[64] reduce(%x), dimensions={0}, kind=max
  %mb = f32[8192,64] broadcast(%m), dimensions={1}
  %d = f32[8192,64] sub(%x, %mb)
  ROOT %s = f32[64] reduce(%d), dimensions={0}, kind=sum
}

ENTRY %main {
  %a = f32[4095,64] parameter(0)
  %b = bf16[16384,2304] parameter(1)
  %c = f32[131071] parameter(2)
  %d = f32[8192,64] parameter(3)
  %r = f32[64] fusion(%a), kind=reduction, calls=%rows
  %t = f32[2304] fusion(%b), kind=reduction, calls=%tiles
  %f = f32[] fusion(%c), kind=reduction, calls=%full
  %p = f32[64] fusion(%d), kind=reduction, calls=%dependent
  ROOT %out = (f32[64], f32[2304], f32[], f32[64]) tuple(%r, %t, %f, %p)
}
)");
  ASSERT_NE(module, nullptr);
  for (const char* name : {"r", "t", "f", "p"}) {
    const ir::Instruction& inst = *module->entry()->FindInstruction(name);
    EXPECT_EQ(ColumnReductionChunks(inst), 1) << name;
    StatusOr<ColumnReductionPlan> partials =
        PlanColumnReduction(inst, ColumnPart::kPartials, false);
    EXPECT_FALSE(partials.ok()) << name;
  }
}

TEST(SplitColumnReductionTest, KernelsAssembleAndShareTheirAbi) {
  auto module = Parse(kSplitModule);
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);  // ptxas for sm_90a, limits, no spills
  ASSERT_EQ(kernels.kernels.size(), 10u);
  EXPECT_TRUE(kernels.skipped.empty());
  for (size_t i = 0; i < kernels.kernels.size(); i += 2) {
    const KernelSpec& partials = kernels.kernels[i].spec;
    const KernelSpec& final = kernels.kernels[i + 1].spec;
    EXPECT_EQ(partials.name, final.name + "_partials");
    ASSERT_EQ(partials.params.size(), final.params.size()) << final.name;
    for (size_t p = 0; p < partials.params.size(); ++p) {
      EXPECT_EQ(partials.params[p].role, final.params[p].role);
      EXPECT_EQ(partials.params[p].shape, final.params[p].shape);
    }
    EXPECT_EQ(partials.params.back().role, KernelParam::Role::kScratch);
    for (int k : {0, 1}) {  // deterministic
      EXPECT_EQ(kernels.kernels[i + k].ptx.find("atom."), std::string::npos);
    }
  }
  // The partials kernel stores no result: only f32 to scratch.
  EXPECT_EQ(kernels.kernels[0].ptx.find("st.global.b16"), std::string::npos);
  EXPECT_NE(kernels.kernels[1].ptx.find("st.global.b16"), std::string::npos);  // %db16
}

TEST(SplitColumnReductionTest, RowsNotAMultipleOfTheChunkWithOutputsOfTheTotals) {
  auto module = Parse(kSplitModule);
  ASSERT_NE(module, nullptr);
  EmuKernelRunner runner(*module);
  ASSERT_EQ(runner.Specs("g").size(), 2u);
  runner.ExpectMatchesEvaluator("g");
}

TEST(SplitColumnReductionTest, AReduceOfFewerRowsThanAChunk) {
  auto module = Parse(kSplitModule);
  ASSERT_NE(module, nullptr);
  EmuKernelRunner runner(*module);
  runner.ExpectMatchesEvaluator("fr");
}

TEST(SplitColumnReductionTest, ColumnsNotAMultipleOf32) {
  auto module = Parse(kSplitModule);
  ASSERT_NE(module, nullptr);
  EmuKernelRunner runner(*module);
  runner.ExpectMatchesEvaluator("oc");
  runner.ExpectMatchesEvaluator("nr");
}

TEST(SplitColumnReductionTest, FullReductions) {
  auto module = Parse(kSplitModule);
  ASSERT_NE(module, nullptr);
  EmuKernelRunner runner(*module);
  runner.ExpectMatchesEvaluator("fu");
}

// Note [warp totals] (column_reduction_emitter.cc): a grad-norm-like fusion
// of `n` sums of squares of parameters of three shapes in turn (and one of
// `big` elements first), added up. Its batches are sorted by shape, so the
// reduces' numbering follows the batches, not the reduce order.
std::string SumOfSquaresModule(int n, int64_t big) {
  const char* shapes[] = {"f32[700]", "f32[40,50]", "f32[333]"};
  std::string params, body, operands, entry;
  std::string prev;
  for (int i = 0; i < n; ++i) {
    std::string shape = i == 0 ? fmt::format("f32[{}]", big) : shapes[i % 3];
    params += fmt::format("  %x{} = {} parameter({})\n", i, shape, i);
    entry += fmt::format("  %x{} = {} parameter({})\n", i, shape, i);
    const std::string dims = shape.find(',') != std::string::npos ? "{0,1}" : "{0}";
    body += fmt::format("  %q{} = {} mul(%x{}, %x{})\n", i, shape, i, i);
    body += fmt::format("  %r{} = f32[] reduce(%q{}), dimensions={}, kind=sum\n", i, i, dims);
    if (i > 0) body += fmt::format("  %a{} = f32[] add({}, %r{})\n", i, prev, i);
    prev = i == 0 ? "%r0" : fmt::format("%a{}", i);
    operands += fmt::format("{}%x{}", i ? ", " : "", i);
  }
  return fmt::format(
      "module sum_of_squares\n\n%norm {{\n{}{}  %s = f32[] sqrt({})\n"
      "  ROOT %t = (f32[], f32[]) tuple(%s, {})\n}}\n\n"
      "ENTRY %main {{\n{}  ROOT %gn = (f32[], f32[]) fusion({}), kind=reduction, calls=%norm\n}}\n",
      params, body, prev, prev, entry, operands);
}

// Note [member partials]: 60 sums of squares of four shapes split by
// members, a class per shape: the partials kernel's code has four loops and
// no tree; each block reduces one member's rows.
TEST(SplitColumnReductionTest, SixtySumsOfSquaresSplitByMembers) {
  auto module = Parse(SumOfSquaresModule(60, 300000));
  ASSERT_NE(module, nullptr);
  const ir::Instruction& gn = *module->entry()->root();
  StatusOr<ColumnReductionPlan> partials = PlanColumnReduction(gn, ColumnPart::kPartials, false);
  ASSERT_TRUE(partials.ok()) << partials.status().message();
  EXPECT_TRUE(partials->batches.empty());
  ASSERT_EQ(partials->classes.size(), 4u);
  struct Want {
    int64_t members, elements, width, blocks_per_member;
  };
  const Want want[] = {{1, 300000, 4, 74}, {20, 2000, 4, 1}, {20, 333, 1, 1}, {19, 700, 4, 1}};
  int64_t block = 0, member = 0;
  for (size_t c = 0; c < 4; ++c) {
    const ReduceClass& rc = partials->classes[c];
    EXPECT_EQ(static_cast<int64_t>(rc.members.size()), want[c].members) << c;
    EXPECT_EQ(rc.elements, want[c].elements) << c;
    EXPECT_EQ(rc.width, want[c].width) << c;
    EXPECT_EQ(rc.blocks_per_member, want[c].blocks_per_member) << c;
    EXPECT_EQ(rc.first_block, block) << c;
    EXPECT_EQ(rc.first_member, member) << c;
    block += rc.blocks();
    member += want[c].members;
  }
  EXPECT_EQ(partials->grid, block);
  EXPECT_EQ(partials->block(), 256);
  EXPECT_EQ(partials->shared_floats, 8);  // a sum for each warp
  EXPECT_EQ(partials->scratch_floats, block);
  EXPECT_EQ(ColumnReductionChunks(gn), block);
  StatusOr<ColumnReductionPlan> final = PlanColumnReduction(gn, ColumnPart::kFinal, false);
  ASSERT_TRUE(final.ok()) << final.status().message();
  EXPECT_EQ(final->grid, 1);
  EXPECT_EQ(final->block(), 1024);  // a warp for each member, 32 at most
  EXPECT_EQ(final->shared_floats, 60);
  EXPECT_EQ(final->scratch_floats, partials->scratch_floats);
  EmuKernelRunner runner(*module);
  ASSERT_EQ(runner.Specs("gn").size(), 2u);
  runner.ExpectMatchesEvaluator("gn");
}

// The grad norm of a GPT-2 of `layers` layers at width 768: the sum of
// squares of each parameter gradient, in parameter order, added up.
std::string GradNormModule(int layers) {
  std::vector<std::vector<int64_t>> shapes = {{50304, 768}, {1024, 768}};
  for (int l = 0; l < layers; ++l) {
    for (std::vector<int64_t> s : std::vector<std::vector<int64_t>>{{768},
                                                                     {768},
                                                                     {768, 2304},
                                                                     {2304},
                                                                     {768, 768},
                                                                     {768},
                                                                     {768},
                                                                     {768},
                                                                     {768, 3072},
                                                                     {3072},
                                                                     {3072, 768},
                                                                     {768}}) {
      shapes.push_back(s);
    }
  }
  shapes.push_back({768});
  shapes.push_back({768});
  std::string params, body, operands, prev;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string shape = fmt::format("f32[{}]", fmt::join(shapes[i], ","));
    params += fmt::format("  %g{} = {} parameter({})\n", i, shape, i);
    body += fmt::format("  %q{} = {} mul(%g{}, %g{})\n", i, shape, i, i);
    body += fmt::format("  %r{} = f32[] reduce(%q{}), dimensions={}, kind=sum\n", i, i,
                        shapes[i].size() == 2 ? "{0,1}" : "{0}");
    if (i > 0) body += fmt::format("  %a{} = f32[] add({}, %r{})\n", i, prev, i);
    prev = i == 0 ? "%r0" : fmt::format("%a{}", i);
    operands += fmt::format("{}%g{}", i ? ", " : "", i);
  }
  return fmt::format(
      "module grad_norm\n\n%norm {{\n{}{}  ROOT %s = f32[] sqrt({})\n}}\n\n"
      "ENTRY %main {{\n{}  ROOT %gn = f32[] fusion({}), kind=reduction, calls=%norm\n}}\n",
      params, body, prev, params, operands);
}

// Note [member partials] at gpt2-124m's parameters: nine classes (one per
// gradient shape) whatever the layers, the partials kernel's blocks small
// enough for 8 on an SM, and every class filling the GPU or streaming at
// least 4 vectors a thread.
TEST(SplitColumnReductionTest, Gpt2GradNormHasAClassPerGradientShape) {
  for (int layers : {2, 12}) {
    auto module = Parse(GradNormModule(layers));
    ASSERT_NE(module, nullptr);
    const ir::Instruction& gn = *module->entry()->root();
    StatusOr<ColumnReductionPlan> partials =
        PlanColumnReduction(gn, ColumnPart::kPartials, false);
    ASSERT_TRUE(partials.ok()) << partials.status().message();
    EXPECT_EQ(partials->classes.size(), 9u) << layers;
    EXPECT_EQ(partials->reduces.size(), 12u * layers + 4) << layers;
    EXPECT_EQ(partials->shared_floats * 4, 32);
    if (layers == 12) {
      // wte 2112, wpe 192, 74 [768]; a layer's matrices 176 + 144 + 176 + 176
      // blocks and 1 for each of its two wider biases.
      EXPECT_EQ(partials->grid, 2112 + 192 + 74 + 12 * (176 + 144 + 176 + 176 + 2));
    }
  }
  auto module = Parse(GradNormModule(12));
  ASSERT_NE(module, nullptr);
  CompiledKernels kernels = CompileAll(*module);  // ptxas for sm_90a, limits, no spills
  ASSERT_EQ(kernels.kernels.size(), 2u);
  for (const CompiledKernel& k : kernels.kernels) {
    EXPECT_EQ(k.ptx.find("atom."), std::string::npos) << k.spec.name;
  }
}

// Full reductions of other kinds, dtypes and reads split by members: a sum
// and a max (each block totals its own class), bf16 read 8 lanes a vector,
// a broadcast read element by element, and two members of one class that
// share a parameter.
TEST(SplitColumnReductionTest, MembersOfMixedKindsDtypesAndReads) {
  auto module = Parse(R"(module members

%mixed {
  %a = f32[200000] parameter(0)
  %b = f32[300,500] parameter(1)
  %c = bf16[140000] parameter(2)
  %d = f32[1000,150] parameter(3)
  %w = f32[150] parameter(4)
  %e = f32[1000,150] parameter(5)
  %a2 = f32[200000] mul(%a, %a)
  %sa = f32[] reduce(%a2), dimensions={0}, kind=sum
  %mb = f32[] reduce(%b), dimensions={0,1}, kind=max
  %cf = f32[140000] convert(%c)
  %sc = f32[] reduce(%cf), dimensions={0}, kind=sum
  %wb = f32[1000,150] broadcast(%w), dimensions={1}
  %dw = f32[1000,150] mul(%d, %wb)
  %sd = f32[] reduce(%dw), dimensions={0,1}, kind=sum
  %ew = f32[1000,150] mul(%e, %wb)
  %se = f32[] reduce(%ew), dimensions={0,1}, kind=sum
  %s1 = f32[] add(%sa, %sc)
  %s2 = f32[] add(%s1, %sd)
  %s3 = f32[] sub(%s2, %se)
  ROOT %t = (f32[], f32[]) tuple(%s3, %mb)
}

ENTRY %main {
  %a = f32[200000] parameter(0)
  %b = f32[300,500] parameter(1)
  %c = bf16[140000] parameter(2)
  %d = f32[1000,150] parameter(3)
  %w = f32[150] parameter(4)
  %e = f32[1000,150] parameter(5)
  ROOT %m = (f32[], f32[]) fusion(%a, %b, %c, %d, %w, %e), kind=reduction, calls=%mixed
}
)");
  ASSERT_NE(module, nullptr);
  const ir::Instruction& m = *module->entry()->root();
  StatusOr<ColumnReductionPlan> partials = PlanColumnReduction(m, ColumnPart::kPartials, false);
  ASSERT_TRUE(partials.ok()) << partials.status().message();
  ASSERT_EQ(partials->classes.size(), 4u);
  EXPECT_EQ(partials->classes[2].width, 8);  // bf16
  ASSERT_EQ(partials->classes[3].members.size(), 2u);  // %sd and %se
  EXPECT_EQ(partials->classes[3].members[0].params.size(), 2u);
  EmuKernelRunner runner(*module);
  ASSERT_EQ(runner.Specs("m").size(), 2u);
  for (uint64_t seed : {1, 2}) runner.ExpectMatchesEvaluator("m", 1e-5, seed);
}

// Note [member partials]: every sum in a fixed order, so two runs agree to
// the bit.
TEST(SplitColumnReductionTest, MemberPartialsAreDeterministic) {
  auto module = Parse(SumOfSquaresModule(7, 400000));
  ASSERT_NE(module, nullptr);
  EmuKernelRunner runner(*module);
  const ir::Instruction& gn = *module->entry()->root();
  std::mt19937_64 rng(3);
  std::vector<eval::Literal> operands;
  for (const ir::Instruction* op : gn.operands()) {
    operands.push_back(eval::Literal::Random(op->shape(), rng));
  }
  std::vector<eval::Literal> first = runner.Run("gn", operands);
  std::vector<eval::Literal> second = runner.Run("gn", operands);
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(first[r].values, second[r].values) << r;
}

TEST(SplitColumnReductionTest, ThirtySumsOfSquaresInOneKernelOfSeveralBatches) {
  auto module = Parse(SumOfSquaresModule(30, 2000));
  ASSERT_NE(module, nullptr);
  const ir::Instruction& gn = *module->entry()->root();
  EXPECT_EQ(ColumnReductionChunks(gn), 1);
  StatusOr<ColumnReductionPlan> whole = PlanColumnReduction(gn, ColumnPart::kWhole, false);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole->block(), 1024);
  EXPECT_EQ(whole->batches.size(), 3u);  // 12 trees of 1024 floats at most
  EmuKernelRunner runner(*module);
  runner.ExpectMatchesEvaluator("gn");
}

// The layer-norm backward of Note [mixed row and column reductions] with
// 4400 rows: NAME_rows (dx), NAME_partials, NAME (dgain, dbias).
constexpr std::string_view kLayerNormBackward = R"(module ln_backward

%ln_bwd {
  %dy = f32[4,1100,64] parameter(0)
  %w = f32[64] parameter(1)
  %xhat = f32[4,1100,64] parameter(2)
  %rstd = f32[4,1100] parameter(3)
  %dres = bf16[4,1100,64] parameter(4)
  %dbias = f32[64] reduce(%dy), dimensions={0,1}, kind=sum
  %wb = f32[4,1100,64] broadcast(%w), dimensions={2}
  %dxhat = f32[4,1100,64] mul(%dy, %wb)
  %dyxhat = f32[4,1100,64] mul(%dy, %xhat)
  %dgain = f32[64] reduce(%dyxhat), dimensions={0,1}, kind=sum
  %t = f32[4,1100,64] mul(%dxhat, %xhat)
  %s = f32[4,1100] reduce(%t), dimensions={2}, kind=sum
  %sb = f32[4,1100,64] broadcast(%s), dimensions={0,1}
  %u = f32[4,1100,64] mul(%sb, %xhat)
  %v = f32[4,1100,64] sub(%dxhat, %u)
  %rb = f32[4,1100,64] broadcast(%rstd), dimensions={0,1}
  %dx = f32[4,1100,64] mul(%v, %rb)
  %dr = f32[4,1100,64] convert(%dres)
  %dxr = f32[4,1100,64] add(%dx, %dr)
  %dx16 = bf16[4,1100,64] convert(%dxr)
  %dgain16 = bf16[64] convert(%dgain)
  ROOT %out = (f32[64], bf16[64], f32[4,1100,64], bf16[4,1100,64]) tuple(%dbias, %dgain16, %dx, %dx16)
}

ENTRY %main {
  %dy = f32[4,1100,64] parameter(0)
  %w = f32[64] parameter(1)
  %xhat = f32[4,1100,64] parameter(2)
  %rstd = f32[4,1100] parameter(3)
  %dres = bf16[4,1100,64] parameter(4)
  ROOT %lnb = (f32[64], bf16[64], f32[4,1100,64], bf16[4,1100,64]) fusion(%dy, %w, %xhat, %rstd, %dres), kind=reduction, calls=%ln_bwd
}
)";

TEST(SplitColumnReductionTest, ColumnPartOfALayerNormBackward) {
  auto module = Parse(kLayerNormBackward);
  ASSERT_NE(module, nullptr);
  const ir::Instruction& lnb = *module->entry()->root();
  EXPECT_EQ(ColumnReductionChunks(lnb), 18);
  StatusOr<ColumnReductionPlan> partials = PlanColumnReduction(lnb, ColumnPart::kPartials, false);
  ASSERT_TRUE(partials.ok()) << partials.status().message();
  EXPECT_TRUE(partials->mixed);
  EXPECT_EQ(partials->reduces.size(), 2u);  // dbias, dgain; not the row sum
  EmuKernelRunner runner(*module);
  std::vector<std::string> names;
  for (const KernelSpec* spec : runner.Specs("lnb")) names.push_back(spec->name);
  EXPECT_EQ(names, (std::vector<std::string>{"lnb_rows", "lnb_partials", "lnb"}));
  runner.ExpectMatchesEvaluator("lnb", 1e-5, 7);
}

// The layer-norm backward of gpt2-124m at batch 16 x 1024 (its gain and bias
// gradients, 768 columns): 24 blocks whole, 1056 split (8 blocks of 256
// threads on each of an H100's 132 SMs).
TEST(SplitColumnReductionTest, Gpt2124mLayerNormBackwardFillsAnH100) {
  std::string text(kLayerNormBackward);
  for (auto [from, to] : {std::pair<std::string, std::string>{"4,1100,64", "16,1024,768"},
                          {"4,1100", "16,1024"},
                          {"[64]", "[768]"}}) {
    for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size()) {
      text.replace(at, from.size(), to);
    }
  }
  auto module = Parse(text);
  ASSERT_NE(module, nullptr);
  const ir::Instruction& lnb = *module->entry()->root();
  StatusOr<ColumnReductionPlan> whole = PlanColumnReduction(lnb, ColumnPart::kWhole, true);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole->grid, 24);
  EXPECT_EQ(ColumnReductionChunks(lnb), 44);
  StatusOr<ColumnReductionPlan> partials = PlanColumnReduction(lnb, ColumnPart::kPartials, false);
  ASSERT_TRUE(partials.ok()) << partials.status().message();
  EXPECT_GE(partials->grid, 2 * 132);
  EXPECT_EQ(partials->grid, 1056);
  EXPECT_EQ(partials->block(), 256);
}

}  // namespace
}  // namespace gptc::codegen
