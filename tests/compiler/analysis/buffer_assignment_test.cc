#include "compiler/analysis/buffer_assignment.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "passes/schedule.h"
#include "tests/testing/pass_harness.h"

namespace gptc::analysis {
namespace {

using ::gptc::testing::ParseOrDie;

int64_t Aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// The invariants every assignment must hold: aligned slices inside the arena,
// and buffers whose live ranges overlap never overlap in memory.
void ExpectValid(const BufferAssignment& ba) {
  const auto& buffers = ba.buffers();
  for (const auto& b : buffers) {
    EXPECT_EQ(b.slice.offset % kBufferAlignment, 0) << ba.ToString();
    EXPECT_EQ(b.slice.size, b.bytes);
    EXPECT_LE(b.slice.offset + b.slice.size, ba.arena_size());
    EXPECT_LE(b.live.start, b.live.end);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      const auto& a = buffers[i];
      const auto& b = buffers[j];
      if (!a.live.Overlaps(b.live) || a.bytes == 0 || b.bytes == 0) continue;
      const bool disjoint = a.slice.offset + Aligned(a.bytes) <= b.slice.offset ||
                            b.slice.offset + Aligned(b.bytes) <= a.slice.offset;
      EXPECT_TRUE(disjoint) << "buffers " << i << " and " << j << "\n" << ba.ToString();
    }
  }
  EXPECT_GE(ba.arena_size(), ba.peak_bytes());
  EXPECT_EQ(ba.arena_size() % kBufferAlignment, 0);
}

BufferAssignment AssignOrDie(const ir::Module& module,
                             const BufferAssignmentOptions& options = {}) {
  StatusOr<BufferAssignment> ba = AssignBuffers(module, options);
  EXPECT_TRUE(ba.ok()) << ba.status().message();
  return std::move(ba).value();
}

Slice SliceOf(const BufferAssignment& ba, const ir::Module& m, std::string_view name,
              int64_t leaf = 0) {
  StatusOr<Slice> s = ba.GetSlice(m.entry()->FindInstruction(name), leaf);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : Slice{-1, -1, -1};
}

// A random module of `n` instructions over f32[16,16] values, with reshapes,
// reductions, broadcasts, a multi-output fusion and tuples.
std::string RandomModule(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string text =
      "module random\n%fused {\n  %a = f32[16,16] parameter(0)\n  %b = f32[16,16] parameter(1)\n"
      "  %m = f32[16,16] mul(%a, %b)\n  %e = f32[16,16] exp(%a)\n"
      "  ROOT %t = (f32[16,16], f32[16,16]) tuple(%m, %e)\n}\nENTRY %main {\n"
      "  %p0 = f32[16,16] parameter(0)\n  %p1 = f32[16,16] parameter(1)\n"
      "  %p2 = f32[16] parameter(2)\n";
  std::vector<std::string> values = {"p0", "p1"};
  auto pick = [&] { return values[rng() % values.size()]; };
  static const char* kUnary[] = {"exp", "tanh", "neg", "abs"};
  static const char* kBinary[] = {"add", "mul", "sub", "max"};
  for (int i = 0; i < n; ++i) {
    const std::string v = "v" + std::to_string(i);
    switch (rng() % 6) {
      case 0:
        text += "  %" + v + " = f32[16,16] " + kUnary[rng() % 4] + "(%" + pick() + ")\n";
        break;
      case 1:
      case 2:
        text += "  %" + v + " = f32[16,16] " + kBinary[rng() % 4] + "(%" + pick() + ", %" + pick() +
                ")\n";
        break;
      case 3:
        text += "  %" + v + "_flat = f32[256] reshape(%" + pick() + ")\n";
        text += "  %" + v + "_neg = f32[256] neg(%" + v + "_flat)\n";
        text += "  %" + v + " = f32[16,16] reshape(%" + v + "_neg)\n";
        break;
      case 4:
        text += "  %" + v + "_row = f32[16] reduce(%" + pick() + "), dimensions={1}, kind=sum\n";
        text += "  %" + v + "_sum = f32[16] add(%" + v + "_row, %p2)\n";
        text += "  %" + v + " = f32[16,16] broadcast(%" + v + "_sum), dimensions={0}\n";
        break;
      case 5:
        text += "  %" + v + "_f = (f32[16,16], f32[16,16]) fusion(%" + pick() + ", %" + pick() +
                "), kind=loop, calls=%fused\n";
        text += "  %" + v + "_t = ((f32[16,16], f32[16,16]), f32[16,16]) tuple(%" + v + "_f, %" +
                pick() + ")\n";
        text +=
            "  %" + v + "_g = (f32[16,16], f32[16,16]) get-tuple-element(%" + v + "_t), index=0\n";
        text += "  %" + v + " = f32[16,16] get-tuple-element(%" + v +
                "_g), index=" + std::to_string(rng() % 2) + "\n";
        break;
    }
    values.push_back(v);
  }
  text += "  ROOT %out = (f32[16,16], f32[16,16], f32[16,16]) tuple(%" + values[values.size() - 1] +
          ", %" + values[values.size() / 2] + ", %p0)\n}\n";
  return text;
}

TEST(BufferAssignmentTest, ChainReusesMemory) {
  std::string text = "module chain\nENTRY %main {\n  %v0 = f32[1024] parameter(0)\n";
  for (int i = 1; i <= 20; ++i) {
    text += "  %v" + std::to_string(i) + " = f32[1024] exp(%v" + std::to_string(i - 1) + ")\n";
  }
  text += "  ROOT %r = f32[1024] neg(%v20)\n}\n";
  auto module = ParseOrDie(text);
  ASSERT_NE(module, nullptr);
  BufferAssignment ba = AssignOrDie(*module);
  ExpectValid(ba);
  EXPECT_EQ(ba.buffers().size(), 22u);
  // The parameter plus two temporaries that alternate (an op never writes
  // over its operand); the output is one of them.
  EXPECT_EQ(ba.arena_size(), 3 * 4096);
  EXPECT_LT(ba.arena_size(), 22 * 4096);
  EXPECT_EQ(ba.peak_bytes(), 3 * 4096);
}

TEST(BufferAssignmentTest, RandomModulesNeverOverlapLiveBuffers) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    auto module = ParseOrDie(RandomModule(40 + 10 * static_cast<int>(seed), seed));
    ASSERT_NE(module, nullptr);
    ASSERT_GE(module->entry()->instruction_count(), 50);
    BufferAssignment ba = AssignOrDie(*module);
    ExpectValid(ba);
    int64_t sum = 0;
    for (const auto& b : ba.buffers()) sum += Aligned(b.bytes);
    EXPECT_LT(ba.arena_size(), sum);
    // Every array leaf of every instruction has a slice.
    for (const auto& inst : module->entry()->instructions()) {
      StatusOr<std::vector<Slice>> slices = ba.GetSlices(inst.get());
      ASSERT_TRUE(slices.ok()) << slices.status().message();
    }
    // And again after scheduling, which must not make the peak worse.
    passes::Schedule schedule;
    ASSERT_TRUE(schedule.Run(*module).ok());
    BufferAssignment scheduled = AssignOrDie(*module);
    ExpectValid(scheduled);
    EXPECT_LE(scheduled.peak_bytes(), ba.peak_bytes());
  }
}

TEST(BufferAssignmentTest, AlignsEveryOffsetAndAliasesViews) {
  auto module = ParseOrDie(R"(module aliases
%fused {
  %a = f32[3] parameter(0)
  %e = f32[3] exp(%a)
  ROOT %t = (f32[3], f32[3]) tuple(%e, %a)
}
ENTRY %main {
  %x = f32[3] parameter(0)
  %f = (f32[3], f32[3]) fusion(%x), kind=loop, calls=%fused
  %g1 = f32[3] get-tuple-element(%f), index=1
  %r = f32[1,3] reshape(%g1)
  %c = f32[1,3] copy(%r)
  %n = f32[1,3] neg(%c)
  ROOT %out = (f32[1,3], f32[3]) tuple(%n, %x)
}
)");
  ASSERT_NE(module, nullptr);
  BufferAssignment ba = AssignOrDie(*module);
  ExpectValid(ba);
  EXPECT_EQ(SliceOf(ba, *module, "g1"), SliceOf(ba, *module, "f", 1));
  EXPECT_EQ(SliceOf(ba, *module, "r"), SliceOf(ba, *module, "g1"));
  EXPECT_NE(SliceOf(ba, *module, "c"), SliceOf(ba, *module, "r"));
  EXPECT_EQ(SliceOf(ba, *module, "out", 0), SliceOf(ba, *module, "n"));
  EXPECT_EQ(SliceOf(ba, *module, "out", 1), SliceOf(ba, *module, "x"));
  EXPECT_EQ(SliceOf(ba, *module, "x").size, 12);
  // x, f{0}, f{1}, c, n: one buffer each, 256 bytes apart at most.
  EXPECT_EQ(ba.buffers().size(), 5u);
  EXPECT_FALSE(ba.GetSlice(module->entry()->FindInstruction("x"), 1).ok());
}

constexpr char kSgd[] = R"(module sgd
ENTRY %main {
  %w = f32[64,64] parameter(0), meta="h.0.mlp.w"
  %g = f32[64,64] parameter(1)
  %lr = f32[] parameter(2)
  %lr_b = f32[64,64] broadcast(%lr), dimensions={}
  %step = f32[64,64] mul(%g, %lr_b)
  %w_new = f32[64,64] sub(%w, %step), meta="h.0.mlp.w.update"
  %sq = f32[64,64] mul(%g, %g)
  %norm = f32[] reduce(%sq), dimensions={0,1}, kind=sum
  ROOT %out = (f32[], f32[64,64]) tuple(%norm, %w_new)
}
)";

TEST(BufferAssignmentTest, DonatedParameterIsUpdatedInPlace) {
  auto module = ParseOrDie(kSgd);
  ASSERT_NE(module, nullptr);
  BufferAssignmentOptions options;
  options.donated_parameters = {0};
  options.output_to_parameter = {{1, 0}};
  BufferAssignment ba = AssignOrDie(*module, options);
  ExpectValid(ba);
  EXPECT_EQ(SliceOf(ba, *module, "w_new"), SliceOf(ba, *module, "w"));
  EXPECT_EQ(SliceOf(ba, *module, "out", 1), SliceOf(ba, *module, "w"));
  EXPECT_TRUE(ba.copies().empty());
  EXPECT_NE(ba.ToString().find("in place: %w_new"), std::string::npos) << ba.ToString();

  BufferAssignment plain = AssignOrDie(*module);
  EXPECT_NE(SliceOf(plain, *module, "w_new"), SliceOf(plain, *module, "w"));
  EXPECT_LT(ba.arena_size(), plain.arena_size());
}

TEST(BufferAssignmentTest, DonationIsACopyWhenTheParameterIsReadLater) {
  auto module = ParseOrDie(R"(module read_after
ENTRY %main {
  %w = f32[64,64] parameter(0)
  %g = f32[64,64] parameter(1)
  %w_new = f32[64,64] sub(%w, %g)
  %sq = f32[64,64] mul(%w, %w)
  %norm = f32[] reduce(%sq), dimensions={0,1}, kind=sum
  ROOT %out = (f32[], f32[64,64]) tuple(%norm, %w_new)
}
)");
  ASSERT_NE(module, nullptr);
  BufferAssignmentOptions options;
  options.donated_parameters = {0};
  options.output_to_parameter = {{1, 0}};
  BufferAssignment ba = AssignOrDie(*module, options);
  ExpectValid(ba);
  EXPECT_NE(SliceOf(ba, *module, "w_new"), SliceOf(ba, *module, "w"));
  ASSERT_EQ(ba.copies().size(), 1u);
  EXPECT_EQ(ba.copies()[0].output, 1);
  EXPECT_EQ(ba.copies()[0].parameter, 0);
  EXPECT_NE(ba.copies()[0].reason.find("%sq reads the parameter after %w_new"), std::string::npos)
      << ba.copies()[0].reason;
  EXPECT_NE(ba.ToString().find("copy: output 1 -> parameter 0"), std::string::npos);
}

TEST(BufferAssignmentTest, DonationThroughFusions) {
  auto module = ParseOrDie(R"(module fused_update
%adam {
  %w = f32[8,8] parameter(0)
  %g = f32[8,8] parameter(1)
  %m = f32[8,8] parameter(2)
  %m_new = f32[8,8] add(%m, %g)
  %w_new = f32[8,8] sub(%w, %m_new)
  ROOT %t = (f32[8,8], f32[8,8]) tuple(%w_new, %m_new)
}
%transposed {
  %w = f32[8,8] parameter(0)
  %g = f32[8,8] parameter(1)
  %wt = f32[8,8] transpose(%w), dimensions={1,0}
  ROOT %u = f32[8,8] add(%wt, %g)
}
ENTRY %main {
  %w = f32[8,8] parameter(0)
  %g = f32[8,8] parameter(1)
  %m = f32[8,8] parameter(2)
  %v = f32[8,8] parameter(3)
  %opt = (f32[8,8], f32[8,8]) fusion(%w, %g, %m), kind=optimizer, calls=%adam
  %w_new = f32[8,8] get-tuple-element(%opt), index=0
  %m_new = f32[8,8] get-tuple-element(%opt), index=1
  %v_new = f32[8,8] fusion(%v, %g), kind=loop, calls=%transposed
  ROOT %out = (f32[8,8], f32[8,8], f32[8,8]) tuple(%w_new, %m_new, %v_new)
}
)");
  ASSERT_NE(module, nullptr);
  BufferAssignmentOptions options;
  options.donated_parameters = {0, 2, 3};
  options.output_to_parameter = {{0, 0}, {1, 2}, {2, 3}};
  BufferAssignment ba = AssignOrDie(*module, options);
  ExpectValid(ba);
  EXPECT_EQ(SliceOf(ba, *module, "w_new"), SliceOf(ba, *module, "w"));
  EXPECT_EQ(SliceOf(ba, *module, "m_new"), SliceOf(ba, *module, "m"));
  // A transpose reads %v at other indices than it writes: not in place.
  EXPECT_NE(SliceOf(ba, *module, "v_new"), SliceOf(ba, *module, "v"));
  ASSERT_EQ(ba.copies().size(), 1u);
  EXPECT_EQ(ba.copies()[0].parameter, 3);
  EXPECT_NE(ba.copies()[0].reason.find("other than elementwise"), std::string::npos);
}

TEST(BufferAssignmentTest, DonatedInputIsReusedAfterItsLastRead) {
  auto module = ParseOrDie(R"(module donated_input
ENTRY %main {
  %batch = f32[1024] parameter(0)
  %a = f32[1024] exp(%batch)
  %b = f32[1024] neg(%a)
  %c = f32[1024] tanh(%b)
  ROOT %r = f32[] reduce(%c), dimensions={0}, kind=sum
}
)");
  ASSERT_NE(module, nullptr);
  BufferAssignmentOptions options;
  options.donated_parameters = {0};
  BufferAssignment ba = AssignOrDie(*module, options);
  ExpectValid(ba);
  EXPECT_EQ(ba.GetBuffer(module->entry()->FindInstruction("batch"))->live.end, 1);
  EXPECT_EQ(SliceOf(ba, *module, "b"), SliceOf(ba, *module, "batch"));
  // batch/b/r and a/c share two 4 KiB slots.
  EXPECT_EQ(ba.arena_size(), 2 * 4096);
}

TEST(BufferAssignmentTest, RejectsBadDonationOptions) {
  auto module = ParseOrDie(kSgd);
  ASSERT_NE(module, nullptr);
  BufferAssignmentOptions not_donated;
  not_donated.output_to_parameter = {{1, 0}};
  StatusOr<BufferAssignment> ba = AssignBuffers(*module, not_donated);
  ASSERT_FALSE(ba.ok());
  EXPECT_EQ(ba.status().message(),
            "buffer assignment: output 1 updates parameter 0, which is not donated");
  BufferAssignmentOptions out_of_range;
  out_of_range.donated_parameters = {0};
  out_of_range.output_to_parameter = {{5, 0}};
  EXPECT_FALSE(AssignBuffers(*module, out_of_range).ok());
  BufferAssignmentOptions no_such_parameter;
  no_such_parameter.donated_parameters = {7};
  EXPECT_FALSE(AssignBuffers(*module, no_such_parameter).ok());
}

// Note [arena guests]: a parameter at a fixed offset, the other buffers
// around the reserved ranges, in random modules too.
TEST(BufferAssignmentTest, FixedParametersAndReservedRangesAreRespected) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    auto module = ParseOrDie(RandomModule(50, seed));
    ASSERT_NE(module, nullptr);
    BufferAssignmentOptions options;
    options.parameter_offsets = {{0, 8 * 1024}};
    options.reserved = {{8 * 1024, 9 * 1024}, {0, 1024}, {20 * 1024, 24 * 1024}};
    BufferAssignment ba = AssignOrDie(*module, options);
    ExpectValid(ba);
    EXPECT_EQ(SliceOf(ba, *module, "p0").offset, 8 * 1024);
    EXPECT_GE(ba.arena_size(), 24 * 1024);
    for (const auto& b : ba.buffers()) {
      if (b.parameter == 0 || b.bytes == 0) continue;
      for (auto [begin, end] : options.reserved) {
        const bool clear = b.slice.offset + Aligned(b.bytes) <= begin || end <= b.slice.offset;
        EXPECT_TRUE(clear) << "buffer " << b.id << " at " << b.slice.offset << " in [" << begin
                           << ", " << end << ")\n"
                           << ba.ToString();
      }
    }
  }
}

TEST(BufferAssignmentTest, RejectsBadFixedOffsetsAndReservedRanges) {
  auto module = ParseOrDie(kSgd);
  ASSERT_NE(module, nullptr);
  BufferAssignmentOptions unaligned;
  unaligned.parameter_offsets = {{0, 100}};
  StatusOr<BufferAssignment> ba = AssignBuffers(*module, unaligned);
  ASSERT_FALSE(ba.ok());
  EXPECT_EQ(ba.status().message(),
            "buffer assignment: parameter 0's fixed offset 100 is not 256-byte aligned");
  BufferAssignmentOptions donated;
  donated.donated_parameters = {0};
  donated.parameter_offsets = {{0, 0}};
  ba = AssignBuffers(*module, donated);
  ASSERT_FALSE(ba.ok());
  EXPECT_EQ(ba.status().message(),
            "buffer assignment: parameter 0 of %main cannot take a fixed offset (it must exist, be "
            "an array and not be donated)");
  BufferAssignmentOptions backwards;
  backwards.reserved = {{512, 256}};
  ba = AssignBuffers(*module, backwards);
  ASSERT_FALSE(ba.ok());
  EXPECT_EQ(ba.status().message(),
            "buffer assignment: reserved range [512, 256) is empty or negative");
}

TEST(BufferAssignmentTest, MemoryReportListsTheLargestBufferFirst) {
  auto module = ParseOrDie(R"(module report
ENTRY %main {
  %x = f32[16] parameter(0), meta="input"
  %small = f32[16] exp(%x), meta="h.0.small"
  %big = f32[16,1024] broadcast(%small), dimensions={0}, meta="h.0.mlp.fc"
  %mid = f32[16,64] broadcast(%x), dimensions={0}, meta="h.0.attn.mid"
  %e = f32[16,1024] exp(%big), meta="h.0.mlp.gelu"
  %r = f32[16] reduce(%e), dimensions={1}, kind=sum
  %rm = f32[16] reduce(%mid), dimensions={1}, kind=sum
  ROOT %o = f32[16] add(%r, %rm)
}
)");
  ASSERT_NE(module, nullptr);
  BufferAssignment ba = AssignOrDie(*module);
  ExpectValid(ba);
  const std::string report = ba.MemoryReport();
  EXPECT_NE(report.find("arena size: "), std::string::npos) << report;
  EXPECT_NE(report.find("peak live: "), std::string::npos) << report;
  // At the peak (%e runs): %big and %e (64 KiB each), %mid (4 KiB), %x, %small.
  const size_t big = report.find("h.0.mlp.fc"), gelu = report.find("h.0.mlp.gelu"),
               mid = report.find("h.0.attn.mid");
  ASSERT_NE(big, std::string::npos) << report;
  ASSERT_NE(gelu, std::string::npos) << report;
  ASSERT_NE(mid, std::string::npos) << report;
  EXPECT_LT(big, gelu);
  EXPECT_LT(gelu, mid);
  EXPECT_NE(report.find("f32[16,1024]"), std::string::npos);
  EXPECT_NE(report.find("64.0 KiB"), std::string::npos);
  EXPECT_NE(report.find("running %e"), std::string::npos) << report;
  // top_n cuts the list.
  const std::string top1 = ba.MemoryReport(1);
  EXPECT_NE(top1.find("h.0.mlp.fc"), std::string::npos);
  EXPECT_EQ(top1.find("h.0.mlp.gelu"), std::string::npos);
}

TEST(BufferAssignmentTest, IsDeterministic) {
  const std::string text = RandomModule(80, 42);
  auto m1 = ParseOrDie(text);
  auto m2 = ParseOrDie(text);
  ASSERT_NE(m1, nullptr);
  ASSERT_NE(m2, nullptr);
  BufferAssignmentOptions options;
  options.donated_parameters = {0, 1};
  const std::string a = AssignOrDie(*m1, options).ToString();
  EXPECT_EQ(a, AssignOrDie(*m1, options).ToString());
  EXPECT_EQ(a, AssignOrDie(*m2, options).ToString());
  EXPECT_EQ(AssignOrDie(*m1).MemoryReport(), AssignOrDie(*m2).MemoryReport());
}

}  // namespace
}  // namespace gptc::analysis

namespace gptc::analysis {
namespace {

// Note [in-place all-reduce]: a gradient nothing else reads is reduced in
// its own buffer, which stays live until the result's last reader.
TEST(BufferAssignmentTest, AllReduceOfAPrivateValueWorksInPlace) {
  auto m = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[256] parameter(0)
  %g = f32[256] exp(%x)
  %ar = f32[256] all-reduce(%g), kind=sum
  %t = f32[256] tanh(%x)
  %u = f32[256] neg(%t)
  ROOT %r = f32[256] add(%ar, %u)
}
)");
  BufferAssignment ba = AssignOrDie(*m);
  ExpectValid(ba);
  EXPECT_EQ(SliceOf(ba, *m, "ar"), SliceOf(ba, *m, "g"));
  // Live from %g (time 1) to %r (time 5): %t and %u cannot take its memory
  // while the all-reduce may still be running.
  const BufferAssignment::Buffer* b = ba.GetBuffer(m->entry()->FindInstruction("g"));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->live.start, 1);
  EXPECT_EQ(b->live.end, 5);
}

// An operand that something else reads, or a parameter, is not overwritten;
// the operand then stays live as long as the result.
TEST(BufferAssignmentTest, SharedAllReduceOperandLivesAsLongAsTheResult) {
  auto m = ParseOrDie(R"(module m
ENTRY %main {
  %x = f32[256] parameter(0)
  %g = f32[256] exp(%x)
  %ar = f32[256] all-reduce(%g), kind=sum
  %h = f32[256] neg(%g)
  %t = f32[256] tanh(%h)
  %u = f32[256] add(%ar, %t)
  %p = f32[256] all-reduce(%x), kind=sum
  ROOT %r = (f32[256], f32[256]) tuple(%u, %p)
}
)");
  BufferAssignment ba = AssignOrDie(*m);
  ExpectValid(ba);
  EXPECT_NE(SliceOf(ba, *m, "ar"), SliceOf(ba, *m, "g"));
  EXPECT_NE(SliceOf(ba, *m, "p"), SliceOf(ba, *m, "x"));
  const BufferAssignment::Buffer* g = ba.GetBuffer(m->entry()->FindInstruction("g"));
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->live.end, 5);  // %u, the last reader of %ar (not %h at 3)
}

// Note [in-place temporaries]: a fusion writes its result over an operand it
// reads last, when it reads it elementwise (a loop of one output) or by rows
// before the final column loop (a row reduction: softmax, cross-entropy).
TEST(BufferAssignmentTest, FusionsOverwriteTemporariesTheyReadLast) {
  auto m = ParseOrDie(R"(module in_place
%scale {
  %x = f32[64,16] parameter(0)
  ROOT %y = f32[64,16] exp(%x)
}
%softmax {
  %x = f32[64,16] parameter(0)
  %max = f32[64] reduce(%x), dimensions={1}, kind=max
  %mb = f32[64,16] broadcast(%max), dimensions={0}
  %d = f32[64,16] sub(%x, %mb)
  ROOT %e = f32[64,16] exp(%d)
}
%two_outputs {
  %x = f32[64,16] parameter(0)
  %a = f32[64,16] exp(%x)
  %b = f32[64,16] neg(%x)
  ROOT %t = (f32[64,16], f32[64,16]) tuple(%a, %b)
}
%columns {
  %x = f32[64,16] parameter(0)
  %s = f32[16] reduce(%x), dimensions={0}, kind=sum
  %sb = f32[64,16] broadcast(%s), dimensions={1}
  ROOT %d = f32[64,16] sub(%x, %sb)
}
%pair {
  %x = f32[64,16] parameter(0)
  %y = f32[64,16] parameter(1)
  ROOT %s = f32[64,16] add(%x, %y)
}
ENTRY %main {
  %p = f32[64,16] parameter(0)
  %a = f32[64,16] neg(%p)
  %b = f32[64,16] fusion(%a), kind=loop, calls=%scale
  %c = f32[64,16] fusion(%b), kind=reduction, calls=%softmax
  %d = (f32[64,16], f32[64,16]) fusion(%c), kind=loop, calls=%two_outputs
  %d0 = f32[64,16] get-tuple-element(%d), index=0
  %d1 = f32[64,16] get-tuple-element(%d), index=1
  %e = f32[64,16] fusion(%d0), kind=reduction, calls=%columns
  %f = f32[64,16] fusion(%e, %e), kind=loop, calls=%pair
  %g = f32[64,16] fusion(%f), kind=loop, calls=%scale
  %h = f32[64,16] add(%g, %f)
  ROOT %r = (f32[64,16], f32[64,16]) tuple(%h, %d1)
}
)");
  ASSERT_NE(m, nullptr);
  BufferAssignment ba = AssignOrDie(*m);
  ExpectValid(ba);
  EXPECT_EQ(SliceOf(ba, *m, "b"), SliceOf(ba, *m, "a"));  // a loop of one output
  EXPECT_EQ(SliceOf(ba, *m, "c"), SliceOf(ba, *m, "a"));  // a row reduction, after it
  const BufferAssignment::Buffer* a = ba.GetBuffer(m->entry()->FindInstruction("a"));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->live.end, 4);  // %d, the last reader of %c
  EXPECT_NE(ba.ToString().find("temp (in place: %c)"), std::string::npos) << ba.ToString();
  // Two outputs: the second would read %c after the first overwrote it.
  EXPECT_NE(SliceOf(ba, *m, "d", 0), SliceOf(ba, *m, "c"));
  EXPECT_NE(SliceOf(ba, *m, "d", 1), SliceOf(ba, *m, "c"));
  // A column reduction reads every row before any is written: not in place.
  EXPECT_NE(SliceOf(ba, *m, "e"), SliceOf(ba, *m, "d", 0));
  // Read twice (by two operands), or read again later: not in place.
  EXPECT_NE(SliceOf(ba, *m, "f"), SliceOf(ba, *m, "e"));
  EXPECT_NE(SliceOf(ba, *m, "g"), SliceOf(ba, *m, "f"));
}

// Note [in-place temporaries]: a scatter-add adds into its table's buffer
// when the table dies there; not when the table is read later, nor into its
// updates.
TEST(BufferAssignmentTest, ScatterAddsUpdateTablesTheyReadLast) {
  auto m = ParseOrDie(R"(module scatter
ENTRY %main {
  %p = f32[64,16] parameter(0)
  %i = s32[8] parameter(1)
  %u = f32[8,16] parameter(2)
  %t = f32[64,16] neg(%p)
  %s = f32[64,16] scatter-add(%t, %i, %u), axis=0
  %o = f32[64,16] exp(%s)
  %t2 = f32[64,16] exp(%p)
  %s2 = f32[64,16] scatter-add(%t2, %i, %u), axis=0
  %k = f32[64,16] add(%s2, %t2)
  ROOT %r = (f32[64,16], f32[64,16]) tuple(%o, %k)
}
)");
  ASSERT_NE(m, nullptr);
  BufferAssignment ba = AssignOrDie(*m);
  ExpectValid(ba);
  EXPECT_EQ(SliceOf(ba, *m, "s"), SliceOf(ba, *m, "t")) << ba.ToString();
  EXPECT_NE(SliceOf(ba, *m, "s2"), SliceOf(ba, *m, "t2")) << ba.ToString();
}

}  // namespace
}  // namespace gptc::analysis
