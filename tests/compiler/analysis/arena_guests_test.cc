#include "compiler/analysis/arena_guests.h"

#include <gtest/gtest.h>

#include <utility>

#include "models/config.h"
#include "models/gpt2.h"
#include "passes/train_step.h"

namespace gptc::analysis {
namespace {

using program::EntryRole;
using program::SlotRole;

int64_t Aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// A one-layer GPT-2's train program (grad-accum `accumulate`) with its
// logits, eval and score entries, fused and scheduled as gptc compiles them.
StatusOr<program::TrainProgram> TinyProgram(int64_t grad_accum) {
  const models::GptConfig config = models::ApplyOverrides(*models::FindGptConfig("gpt2-tiny"),
                                                          {.layers = 1, .heads = 2, .width = 32});
  passes::TrainStepOptions options;
  options.precision.policy = passes::PrecisionPolicy::kBF16;
  options.optimize = true;
  options.grad_accum = grad_accum;
  ASSIGN_OR_RETURN(frontend::TracedModule traced, models::TraceGpt2Forward(config, 2, 16));
  ASSIGN_OR_RETURN(frontend::TracedModule forward, models::TraceGpt2Forward(config, 2, 16));
  ASSIGN_OR_RETURN(frontend::TracedModule logits, models::TraceGpt2Logits(config, 1, 16));
  ASSIGN_OR_RETURN(
      program::TrainProgram program,
      passes::BuildTrainProgram(std::move(traced.module), traced.params, traced.inputs, options));
  RETURN_IF_ERROR(
      passes::AddLogitsEntry(program, std::move(logits.module), logits.inputs, options));
  RETURN_IF_ERROR(
      passes::AddEvalEntry(program, std::move(forward.module), forward.inputs, options));
  return program;
}

// The slice of input `input` of `entry` in `ba`.
Slice InputSlice(const program::TrainEntry& entry, const BufferAssignment& ba, size_t input) {
  StatusOr<Slice> s = ba.GetSlice(entry.module->entry()->parameters()[input]);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : Slice{};
}

// Each guest reads every parameter at its host's slice, and puts nothing else
// over the host's parameters and AdamW moments; the host's arena is allocated
// once, as large as the largest.
TEST(ArenaGuestsTest, GuestsShareTheHostsParametersAndSpareItsState) {
  for (int64_t grad_accum : {1, 2}) {
    StatusOr<program::TrainProgram> program = TinyProgram(grad_accum);
    ASSERT_TRUE(program.ok()) << program.status().message();
    StatusOr<ProgramBuffers> buffers = AssignProgramBuffers(*program);
    ASSERT_TRUE(buffers.ok()) << buffers.status().message();
    const int host = 0;  // train_step, or accumulate
    const program::TrainEntry& h = program->entries[host];
    EXPECT_EQ(h.role, grad_accum > 1 ? EntryRole::kAccumulate : EntryRole::kTrainStep);
    const BufferAssignment& hb = buffers->assignments[host];
    int guests = 0;
    int64_t largest = hb.arena_size();
    for (size_t g = 0; g < program->entries.size(); ++g) {
      const program::TrainEntry& guest = program->entries[g];
      const bool is_guest = program::RunsBetweenSteps(guest.role);
      EXPECT_EQ(buffers->hosts[g], is_guest ? host : -1) << guest.name();
      if (!is_guest) continue;
      ++guests;
      const BufferAssignment& gb = buffers->assignments[g];
      largest = std::max(largest, gb.arena_size());
      // Where the host keeps state that outlives its runs.
      std::vector<std::pair<int64_t, int64_t>> state;
      for (size_t i = 0; i < h.signature.inputs.size(); ++i) {
        const SlotRole r = h.signature.inputs[i].role;
        if (r != SlotRole::kParam && r != SlotRole::kAdamM && r != SlotRole::kAdamV) continue;
        const Slice s = InputSlice(h, hb, i);
        state.emplace_back(s.offset, s.offset + Aligned(s.size));
      }
      ASSERT_FALSE(state.empty());
      for (size_t i = 0; i < guest.signature.inputs.size(); ++i) {
        const program::Slot& slot = guest.signature.inputs[i];
        if (slot.role != SlotRole::kParam) continue;
        const int64_t at = h.signature.FindInput(SlotRole::kParam, slot.index);
        ASSERT_GE(at, 0);
        EXPECT_EQ(InputSlice(guest, gb, i), InputSlice(h, hb, at))
            << guest.name() << " " << slot.name;
      }
      for (const BufferAssignment::Buffer& b : gb.buffers()) {
        if (b.parameter >= 0 && guest.signature.inputs[b.parameter].role == SlotRole::kParam) {
          continue;
        }
        for (auto [begin, end] : state) {
          EXPECT_TRUE(b.slice.offset + Aligned(b.bytes) <= begin || end <= b.slice.offset)
              << guest.name() << " buffer " << b.id << " at " << b.slice.offset;
        }
      }
    }
    EXPECT_EQ(guests, 2);
    int64_t others = 0;
    for (size_t e = 0; e < program->entries.size(); ++e) {
      if (buffers->hosts[e] < 0 && static_cast<int>(e) != host) {
        others += buffers->assignments[e].arena_size();
      }
    }
    EXPECT_EQ(buffers->ArenaBytes(), largest + others);

    // Without guests each entry has its own arena, and they add up.
    StatusOr<ProgramBuffers> own = AssignProgramBuffers(*program, /*guests=*/false);
    ASSERT_TRUE(own.ok()) << own.status().message();
    int64_t sum = 0;
    for (const BufferAssignment& a : own->assignments) sum += a.arena_size();
    EXPECT_EQ(own->ArenaBytes(), sum);
    EXPECT_LT(buffers->ArenaBytes(), sum);
  }
}

TEST(ArenaGuestsTest, AGuestsParameterTheHostLacksIsNamed) {
  StatusOr<program::TrainProgram> program = TinyProgram(1);
  ASSERT_TRUE(program.ok()) << program.status().message();
  const program::TrainEntry* host = program->Find(EntryRole::kTrainStep);
  const program::TrainEntry* eval = program->Find(EntryRole::kEval);
  ASSERT_NE(host, nullptr);
  ASSERT_NE(eval, nullptr);
  StatusOr<BufferAssignment> hb = AssignBuffers(*host->module, DonationOptions(host->signature));
  ASSERT_TRUE(hb.ok()) << hb.status().message();
  program::TrainEntry renumbered{
      .role = EntryRole::kEval, .module = eval->module->Clone(), .signature = eval->signature};
  for (program::Slot& s : renumbered.signature.inputs) {
    if (s.role == SlotRole::kParam && s.index == 0) s.index = 999;
  }
  StatusOr<BufferAssignmentOptions> options = GuestOptions(renumbered, *host, *hb);
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(options.status().message(),
            "entry eval: parameter %wte.weight is not an input of train_step in the shape "
            "f32[50304,32]");
}

}  // namespace
}  // namespace gptc::analysis
