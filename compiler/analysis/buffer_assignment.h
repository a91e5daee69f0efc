// Buffer assignment: where every array value of the entry computation lives
// in the device arena.
//
// An analysis, not a rewrite (as XLA's BufferAssignment): it reads the entry
// computation in its current instruction order, computes the live range of
// every logical buffer, and packs the buffers into ONE arena with reuse. The
// runtime only ever sees slices `{allocation, offset, size}`.
//
// Run it last: after fusion (a fused computation is one kernel and its values
// get no buffers) and after `schedule` (the order decides liveness). Any pass
// that reorders or rewrites the entry afterwards invalidates the assignment.
//
// Note [aliases]
// Values that are views of other values get no buffer of their own:
//   - `tuple` is its operands' buffers, `get-tuple-element` its operand's
//     element (a tuple value is never materialized as a table of pointers);
//   - `reshape` is a bitcast in the row-major layout, so it aliases its
//     operand, whatever else uses the operand (values are immutable);
//   - an `all-reduce` whose operand's buffer nothing else reads (and that is
//     neither a parameter, a constant nor an output) works in place: it
//     aliases its operand (Note [in-place all-reduce]).
// Every other instruction defines one buffer per array leaf of its shape
// (a multi-output fusion defines one per output). A `copy` always defines a
// fresh buffer: that is what it is for.
//
// Note [liveness]
// Instruction i of the order runs at time i; a buffer is live from the time
// of its defining instruction to the time of its last reader (a reader of any
// alias counts). Live ranges are closed intervals, so a result never shares
// memory with an operand the same instruction reads. Parameters are inputs:
// live the whole step [0, n]. Outputs (leaves of the root) live to n, the time
// the caller takes them. Constants are ordinary values, written by their own
// instruction. Buffers that a live range overlaps get disjoint, 256-byte
// aligned ranges of the arena.
//
// Note [in-place all-reduce]
// The runtime runs all-reduces asynchronously, on their own stream, grouped
// into buckets (passes/data_parallel.h): an all-reduce may still read its
// operand and write its result after later kernels in the order have run,
// until the first reader of its result waits for it. So the buffers it
// touches must stay reserved until then. In place (NCCL's sendbuff ==
// recvbuff), its one buffer is live up to the result's last reader anyway,
// and costs no memory; otherwise the operand's live range is extended to the
// result's last reader.
//
// Note [donated buffers]
// `donated_parameters` are inputs whose memory the caller gives up (weights
// and optimizer state updated every step). `output_to_parameter` maps an
// output (a leaf index of the root, which is the tuple index for a flat tuple)
// to the parameter it updates in place: the output is then computed straight
// into the parameter's slice. That is safe only when nothing reads the
// parameter after the producing instruction runs; the producer itself may read
// it if it does so elementwise at the same index (an elementwise op, or a loop
// or optimizer fusion that only feeds the parameter to elementwise ops), so
// each element is read before it is overwritten. Otherwise the output gets its
// own buffer and the pair is reported as a copy the runtime must perform after
// the step. A donated parameter that no output updates is live only until its
// last reader, and its memory is reused afterwards.
//
// Note [in-place temporaries]
// A fusion (or a scatter-add) may write an output over the buffer of an operand it is the last
// reader of (a temporary: neither parameter nor output; same bytes and shape;
// read by no other operand of the fusion), the way XLA shares an operand's
// buffer with its user. Safe when every element is read before it is
// overwritten, which the emitters guarantee for two kinds of kernel:
//   - a loop fusion of one output reading the operand elementwise only: each
//     thread loads its elements before it stores them;
//   - a row reduction (every reduce over the last dim: softmax, layer norm,
//     the cross-entropy) with one output of the operand's shape, reading the
//     operand through elementwise ops, row reductions and the cross-entropy
//     composite: a row belongs to one warp or block, whose reduction passes
//     read it whole before the final column loop stores the output (Note [row
//     reduction] in compiler/codegen/row_reduction_plan.h).
//   - a scatter-add over its operand 0 (the table): its kernel adds the
//     updates to the result's rows, which then already hold the operand's,
//     and the plan drops the kernel that would copy them there (Note
//     [multi-kernel instructions] in compiler/codegen/kernel_spec.h). The tied
//     embedding's gradient is scattered into the lm head's gradient (Note
//     [scatter into the addend] in passes/simplify.h): 2 x 147 MiB less to
//     move a step, and one 147 MiB table less in the arena.
// A second output of the operand's shape would read it again after the first
// overwrote it, so there is none. The buffer then lives to the output's last
// reader and may be overwritten again. gpt2-124m's cross-entropy writes the
// logits' gradient over the logits: 1.5 GiB less at batch 16.
#ifndef GPTC_COMPILER_ANALYSIS_BUFFER_ASSIGNMENT_H_
#define GPTC_COMPILER_ANALYSIS_BUFFER_ASSIGNMENT_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/program/program.h"
#include "compiler/support/status.h"

namespace gptc::analysis {

inline constexpr int64_t kBufferAlignment = 256;

// A contiguous block of device memory; gptc uses one, the arena (index 0).
struct Allocation {
  int64_t index = 0;
  int64_t size = 0;
  bool operator==(const Allocation&) const = default;
};

// Where one buffer lives: `size` bytes at `offset` in allocation `allocation`.
struct Slice {
  int64_t allocation = 0;
  int64_t offset = 0;
  int64_t size = 0;
  bool operator==(const Slice&) const = default;
};

// Which logical buffer every array leaf of every instruction lives in, per
// Note [aliases]. Independent of the instruction order. Leaves are numbered
// depth-first: the leaves of `(f32[2], (s32[], f32[4]))` are 0, 1, 2.
struct LogicalBuffers {
  struct Buffer {
    const ir::Instruction* defining = nullptr;  // the instruction that writes it
    int64_t leaf = 0;                           // leaf of `defining`'s shape
    ir::Shape shape;                            // an array shape
    int64_t bytes = 0;                          // unaligned
  };
  std::vector<Buffer> buffers;  // in definition order
  // Buffer id of each leaf of each instruction.
  std::unordered_map<const ir::Instruction*, std::vector<int64_t>> leaf_buffers;
};
LogicalBuffers ComputeLogicalBuffers(const ir::Computation& computation);

// The live range [start, end] of each logical buffer of `computation` executed
// in `order` (a permutation of its instructions), per Note [liveness]; with
// every parameter live the whole step.
struct LiveRange {
  int64_t start = 0;
  int64_t end = 0;
  bool Overlaps(const LiveRange& o) const { return start <= o.end && o.start <= end; }
};
std::vector<LiveRange> ComputeLiveRanges(const ir::Computation& computation,
                                         const LogicalBuffers& buffers,
                                         const std::vector<const ir::Instruction*>& order);

// The most bytes (each buffer rounded up to kBufferAlignment) live at once.
int64_t PeakLiveBytes(const LogicalBuffers& buffers, const std::vector<LiveRange>& ranges);

struct BufferAssignmentOptions {
  // Parameter numbers whose memory the caller gives up; see Note [donated buffers].
  std::set<int64_t> donated_parameters;
  // Output leaf index -> donated parameter number it updates in place.
  std::map<int64_t, int64_t> output_to_parameter;
  // Note [arena guests] (compiler/analysis/arena_guests.h): parameters that
  // live at a fixed offset (another entry's slice of the same value), and
  // [begin, end) ranges of the arena no other buffer of this entry may take.
  std::map<int64_t, int64_t> parameter_offsets;
  std::vector<std::pair<int64_t, int64_t>> reserved;
};

class BufferAssignment {
 public:
  // One buffer of the arena, holding one or more values (aliases, and a donated
  // parameter with the output that updates it).
  struct Buffer {
    int64_t id = 0;
    const ir::Instruction* defining = nullptr;
    int64_t leaf = 0;
    ir::Shape shape;
    int64_t bytes = 0;  // unaligned; the slice's size
    LiveRange live;
    Slice slice;
    int64_t parameter = -1;        // entry parameter number, or -1
    std::vector<int64_t> outputs;  // output leaf indices that live here
    // The instruction whose output is written in place into this buffer (a
    // donated parameter's update, or Note [in-place temporaries]), or null.
    const ir::Instruction* donated_from = nullptr;
  };
  // An output that updates a donated parameter but could not share its slice.
  struct DonationCopy {
    int64_t output = 0;
    int64_t parameter = 0;
    std::string reason;
  };

  const std::vector<Allocation>& allocations() const { return allocations_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  const std::vector<DonationCopy>& copies() const { return copies_; }
  int64_t arena_size() const { return allocations_[0].size; }
  // Bytes live at the most crowded time (aligned sizes) and that time.
  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t peak_time() const { return peak_time_; }

  // The slice of leaf `leaf` of `inst` (an entry instruction), or an error.
  StatusOr<Slice> GetSlice(const ir::Instruction* inst, int64_t leaf = 0) const;
  // The slices of all leaves of `inst`, in leaf order.
  StatusOr<std::vector<Slice>> GetSlices(const ir::Instruction* inst) const;
  // The buffer holding leaf `leaf` of `inst`, or null.
  const Buffer* GetBuffer(const ir::Instruction* inst, int64_t leaf = 0) const;

  // The dump: a header, then one line per buffer
  //   %name[{leaf}] SHAPE offset=O size=S live=[a,b] (parameter N | output K | ...)
  // then the donation copies. Deterministic.
  std::string ToString() const;
  // Arena size, peak, and the `top_n` largest buffers live at the peak with
  // their shape, bytes and metadata, largest first.
  // `title`: what the report is of (the entry's name); empty: the computation.
  std::string MemoryReport(int top_n = 20, const std::string& title = "") const;

 private:
  friend StatusOr<BufferAssignment> AssignBuffers(const ir::Module&,
                                                  const BufferAssignmentOptions&);
  std::string computation_name_;
  std::vector<const ir::Instruction*> order_;
  std::vector<Allocation> allocations_;
  std::vector<Buffer> buffers_;
  std::vector<DonationCopy> copies_;
  std::unordered_map<const ir::Instruction*, std::vector<int64_t>> leaf_buffers_;
  int64_t peak_bytes_ = 0;
  int64_t peak_time_ = 0;
};

// Assigns every array value of `module`'s entry computation a slice of one
// arena. The module must outlive the result (it points at its instructions).
// Errors name the bad option (a donation of a non-donated or tuple parameter,
// an output index out of range, two outputs updating one parameter).
StatusOr<BufferAssignment> AssignBuffers(const ir::Module& module,
                                         const BufferAssignmentOptions& options = {});

// Buffer assignment options that make each donation of an entry (new params,
// moments, accumulators) an in-place output of its input.
BufferAssignmentOptions DonationOptions(const program::EntrySignature& signature);

}  // namespace gptc::analysis

#endif  // GPTC_COMPILER_ANALYSIS_BUFFER_ASSIGNMENT_H_
