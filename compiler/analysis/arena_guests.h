// Buffer assignment of a whole program, the logits and eval entries placed
// in the arena of the entry that runs each micro-batch (Note [arena guests]
// in compiler/program/plan.h).
#ifndef GPTC_COMPILER_ANALYSIS_ARENA_GUESTS_H_
#define GPTC_COMPILER_ANALYSIS_ARENA_GUESTS_H_

#include <cstdint>
#include <vector>

#include "compiler/analysis/buffer_assignment.h"
#include "compiler/program/program.h"
#include "compiler/support/status.h"

namespace gptc::analysis {

// The options that place `guest`'s buffers in `host`'s arena, given the
// host's assignment: each parameter input of the guest at the host's slice
// of that parameter, its other buffers clear of the host's parameters and
// AdamW moments (what persists from one run of the host to the next).
// Errors name a parameter the host lacks or holds in another shape.
StatusOr<BufferAssignmentOptions> GuestOptions(const program::TrainEntry& guest,
                                               const program::TrainEntry& host,
                                               const BufferAssignment& host_assignment);

// Every entry's buffer assignment, in the program's order, and which entry's
// arena each runs in.
struct ProgramBuffers {
  std::vector<BufferAssignment> assignments;
  std::vector<int> hosts;  // entry index, or -1: its own arena

  // The bytes of the arenas the runtime allocates (guests inside their hosts').
  int64_t ArenaBytes() const;
};
// With `guests` false, every entry gets an arena of its own.
StatusOr<ProgramBuffers> AssignProgramBuffers(const program::TrainProgram& program,
                                              bool guests = true);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_ARENA_GUESTS_H_
