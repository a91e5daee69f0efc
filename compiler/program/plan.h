// The thunk plan of an artifact (docs/ARTIFACT.md, "The plan"): per entry,
// what the runtime does in schedule order, every buffer an arena slice. The
// compiler builds it (compiler/artifact/plan.h) and every device reads it
// (runtime/gpu/plan_reader.h, runtime/emu/), both through the one codec
// below. FromJson checks structure only (every field present with its type,
// every enum spelled as cuBLASLt or the IR spells it) and its errors name the
// field ("plan entry train_step thunk 3 has no 'grid'"); what the values must
// satisfy (slices inside the arena, layouts that fit the problem) the
// runtime checks (runtime/gpu/plan_reader.h).
//
// cuBLASLt's enums are C++ enums here, written as cuBLASLt's names
// ("CUDA_R_16BF", "CUBLASLT_EPILOGUE_GELU_BIAS"), so that no CUDA header is
// needed; the runtime maps them to cuBLASLt's values.
#ifndef GPTC_COMPILER_PROGRAM_PLAN_H_
#define GPTC_COMPILER_PROGRAM_PLAN_H_

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "compiler/ir/gemm_epilogue.h"
#include "compiler/ir/opcode.h"
#include "compiler/ir/shape.h"
#include "compiler/program/plan_role.h"
#include "compiler/program/program.h"
#include "compiler/support/status.h"

namespace gptc::program {

// `size` bytes at `offset` in the entry's arena (one allocation, 256-byte
// aligned): {"offset", "size", "buffer"}.
struct ArenaSlice {
  int64_t offset = 0;
  int64_t size = 0;
  // The buffer it lies in (EntryPlan::buffers); -1: none, a kernel's scratch
  // (Note [split column reductions] in compiler/codegen/column_reduction_plan.h).
  int64_t buffer = -1;
  // The same memory, whatever buffer holds it.
  bool operator==(const ArenaSlice& o) const { return offset == o.offset && size == o.size; }
};

// --- cuBLASLt descriptors (compiler/artifact/gemm_plan.h) --------------------

enum class GemmDType { kBF16, kF16, kF32 };     // CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F
enum class GemmCompute { k32F, k32FFastTF32 };  // CUBLAS_COMPUTE_32F[_FAST_TF32]
enum class GemmOp { kN, kT };                   // CUBLAS_OP_N, CUBLAS_OP_T

// Note [gemm epilogue table]
// Every cuBLASLt epilogue the plan may name is one row of this table: its
// cuBLASLt name (CUBLASLT_EPILOGUE_ + the second column) and value (the
// runtime checks the value against cublasLt.h at compile time), the
// activation it applies (an ir::GemmActivation), what it does with the bias
// vector and the aux matrix. The enum, the names the plan is written with,
// the runtime's cublasLtEpilogue_t and the epilogue a gemm fusion's record
// maps to (FindGemmEpilogue) are all read from here, so an epilogue cuBLASLt
// offers joins gptc as one row (and the fusion rule that produces its
// record: Note [gemm activations] in compiler/analysis/gemm_activations.h).
//   X(enumerator, NAME, value, activation, bias, aux)
#define GPTC_GEMM_EPILOGUES(X)                                          \
  X(kDefault, DEFAULT, 1, kNone, kNone, kNone)                          \
  X(kBias, BIAS, 4, kNone, kRead, kNone)                                \
  X(kGelu, GELU, 32, kGelu, kNone, kNone)                               \
  X(kGeluBias, GELU_BIAS, 36, kGelu, kRead, kNone)                      \
  X(kGeluAux, GELU_AUX, 160, kGelu, kNone, kWrite)                      \
  X(kGeluAuxBias, GELU_AUX_BIAS, 164, kGelu, kRead, kWrite)             \
  X(kDGelu, DGELU, 192, kGeluGrad, kNone, kRead)                        \
  X(kDGeluBGrad, DGELU_BGRAD, 208, kGeluGrad, kGradientOfD, kRead)      \
  X(kBGradA, BGRADA, 256, kNone, kGradientOfA, kNone)                   \
  X(kBGradB, BGRADB, 512, kNone, kGradientOfB, kNone)                   \
  X(kRelu, RELU, 2, kRelu, kNone, kNone)                                \
  X(kReluBias, RELU_BIAS, 6, kRelu, kRead, kNone)

enum class GemmEpilogue {  // CUBLASLT_EPILOGUE_...
#define GPTC_GEMM_EPILOGUE_ENUM(e, name, value, activation, bias, aux) e,
  GPTC_GEMM_EPILOGUES(GPTC_GEMM_EPILOGUE_ENUM)
#undef GPTC_GEMM_EPILOGUE_ENUM
};
inline constexpr int kNumGemmEpilogues = 0
#define GPTC_GEMM_EPILOGUE_COUNT(e, name, value, activation, bias, aux) +1
    GPTC_GEMM_EPILOGUES(GPTC_GEMM_EPILOGUE_COUNT)
#undef GPTC_GEMM_EPILOGUE_COUNT
    ;
// What an epilogue does with the bias vector: nothing, reads it (added to
// each row of D), or writes the column sums of A, B or D into it.
enum class EpilogueBias { kNone, kRead, kGradientOfA, kGradientOfB, kGradientOfD };
// What it does with the aux matrix (laid out as D): nothing, writes the
// pre-activation, reads it (an activation's backward).
enum class EpilogueAux { kNone, kWrite, kRead };

// One row of the table.
struct GemmEpilogueInfo {
  GemmEpilogue epilogue;
  std::string_view name;  // "CUBLASLT_EPILOGUE_GELU_BIAS"
  int32_t cuda_value;     // cublasLtEpilogue_t
  ir::GemmActivation activation;
  EpilogueBias bias;
  EpilogueAux aux;
};
const GemmEpilogueInfo& GemmEpilogueInfoOf(GemmEpilogue e);
// The epilogue with these properties, or nullopt: cuBLASLt has none.
std::optional<GemmEpilogue> FindGemmEpilogue(ir::GemmActivation activation, EpilogueBias bias,
                                             EpilogueAux aux);

std::string_view GemmDTypeName(GemmDType t);  // "CUDA_R_16BF"
std::string_view GemmComputeName(GemmCompute c);
std::string_view GemmOpName(GemmOp op);
std::string_view GemmEpilogueName(GemmEpilogue e);  // "CUBLASLT_EPILOGUE_GELU_BIAS"
int64_t GemmDTypeBytes(GemmDType t);
// The cuBLASLt type of an IR dtype (bf16, f16, f32), or nullopt.
std::optional<GemmDType> GemmDTypeOf(ir::DType dtype);

// What an epilogue does with the bias and aux buffers (the table's columns).
bool ReadsBias(GemmEpilogue e);
bool WritesBias(GemmEpilogue e);
bool WritesAux(GemmEpilogue e);
bool ReadsAux(GemmEpilogue e);

// One cublasLtMatrixLayout: a column-major rows x cols matrix.
struct GemmLayout {
  GemmDType dtype = GemmDType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
  int64_t batch_count = 1;
  int64_t batch_stride = 0;  // elements; 0 when batch_count == 1
  bool operator==(const GemmLayout&) const = default;
};

// One cublasLtMatmul: the descriptor (Note [row-major on cuBLASLt]).
struct GemmConfig {
  GemmCompute compute_type = GemmCompute::k32F;
  GemmDType scale_type = GemmDType::kF32;
  GemmOp transa = GemmOp::kN;
  GemmOp transb = GemmOp::kN;
  int64_t m = 0, n = 0, k = 0;  // cuBLASLt's (column-major) problem
  int64_t batch_count = 1;
  GemmLayout a, b, c, d;
  double alpha = 1.0;
  double beta = 0.0;  // 1 when a residual is accumulated through C
  GemmEpilogue epilogue = GemmEpilogue::kDefault;
  // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, when a bias is read or written.
  std::optional<GemmDType> bias_dtype;
  int64_t aux_ld = 0;  // 0 unless the epilogue reads or writes aux
  int64_t workspace_bytes = 0;
  // Where cuBLASLt computes something slightly different from the IR (always
  // more precise), e.g. "bf16 rounding of the dot result before the epilogue
  // is skipped".
  std::vector<std::string> notes;
  bool operator==(const GemmConfig&) const = default;

  // "m=768 n=128 k=64 batch=1 | A CUDA_R_16BF N 64x768 ld 64 | ... | CUBLASLT_EPILOGUE_BIAS"
  std::string Summary() const;
};

// --- thunks -------------------------------------------------------------------

// A generated kernel's launch.
struct KernelThunk {
  std::string fusion;       // the entry instruction it computes
  std::string fusion_kind;  // "loop", "row_reduction", "attention", ...
  std::array<int64_t, 3> grid = {1, 1, 1};
  std::array<int64_t, 3> block = {1, 1, 1};
  int64_t dynamic_smem = 0;
  std::vector<ArenaSlice> args;  // Note [kernel ABI]: operands, then results
  int64_t operands = 0;          // how many args the kernel only reads
  // Note [epilogue fallback kernels] (compiler/codegen/gemm_fallback.h):
  // launched only when the gemm of the same instruction next to it runs
  // without its epilogue: the bias gradient (right before the gemm) or the
  // epilogue itself (right after it).
  bool fallback = false;
  // Note [in-place temporaries] (compiler/analysis/buffer_assignment.h): the result is
  // operand 0's buffer and the kernel adds to it (a scatter-add whose copy
  // kernel the plan left out): the bytes it does not write keep the
  // operand's values, which are the result's.
  bool updates_operand = false;
  bool operator==(const KernelThunk&) const = default;
};

// Note [epilogue fallback]
// cuBLASLt documents its epilogues but not which layouts each one's kernels
// cover, so a gemm whose epilogue the heuristic refuses on the GPU at hand
// must still run. The artifact carries, for each gemm with an epilogue, a
// kernel doing the epilogue's work (compiler/codegen/gemm_fallback.h builds
// it from the gemm fusion's epilogue record), and the gemm thunk names it
// (`fallback_kernel`, a kernel thunk of the same instruction marked
// `fallback`; the plan reader checks both ways):
//  - bias gradient (BGRADA, BGRADB): the column sum of the operand, as a
//    reduction kernel, placed before the gemm;
//  - the others (BIAS, GELU, GELU_AUX and their combinations, with any
//    residual, and DGELU, reading the aux as one more operand): the rest of
//    the gemm fusion after the dot, as a loop kernel placed after the gemm,
//    reading the dot's f32 result from `fallback_d` (scratch, in no buffer).
// The runtime (runtime/gpu/executor.h) runs PlainGemm and that kernel when
// cuBLASLt refuses the epilogue, or when autotuning finds the pair faster
// (Note [autotune paths]); otherwise the kernel is skipped. The emulated
// cuBLASLt refuses epilogues on demand ($GPTC_EMU_REFUSE_EPILOGUES) and
// checks the plain gemm's accesses against PlainGemm's slices.
struct GemmThunk {
  GemmConfig config;
  ArenaSlice a, b, c, d;
  std::optional<ArenaSlice> bias;  // read (BIAS epilogues) or written (BGRAD)
  std::optional<ArenaSlice> aux;   // the pre-activation: GELU_AUX writes it, DGELU reads it
  // Note [epilogue fallback]: the thunk (of this entry, of the same
  // instruction, marked `fallback`) that does the epilogue's work when the
  // gemm runs without it; before the gemm for a bias gradient, after it for
  // the other epilogues, which then read the dot's f32 result from
  // `fallback_d` (scratch, in no buffer).
  std::optional<int64_t> fallback_kernel;
  std::optional<ArenaSlice> fallback_d;
  bool operator==(const GemmThunk&) const = default;
};

// Note [epilogue fallback]: gemm `g` without its epilogue, as the runtime
// runs it beside its fallback kernel: no bias or aux; for a forward
// epilogue, the dot's result alone, in f32, into `fallback_d` (C and D).
GemmThunk PlainGemm(const GemmThunk& g);

// A donation buffer assignment could not do in place, or a copy instruction.
struct CopyThunk {
  ArenaSlice src, dst;
  int64_t bytes = 0;
  std::string reason;  // donation copies only
  bool operator==(const CopyThunk&) const = default;
};

// A small constant written into `dst` at its place in the schedule every run
// (Note [liveness] in compiler/analysis/buffer_assignment.h: constants are ordinary
// values whose slices are reused once they are dead).
struct ConstantThunk {
  ir::DType dtype = ir::DType::kF32;
  std::vector<double> values;  // one value: a splat over dst
  ArenaSlice dst;
  bool operator==(const ConstantThunk&) const = default;
};

// The NCCL collective a collective thunk runs ("collective"; absent: all_reduce).
enum class CollectiveOp { kAllReduce, kReduceScatter, kAllGather };
std::string_view CollectiveOpName(CollectiveOp op);  // "all_reduce", "reduce_scatter", ...

// An NCCL collective of one buffer (thunk kind "all_reduce" whichever it
// is), a member of bucket `bucket`. `count` is the element count NCCL takes:
//   all_reduce      in and out `count` elements (out may be in)
//   reduce_scatter  out `count` (recvcount), in `count` x the world size:
//                   this rank's shard of the rank-order sum (or max)
//   all_gather      in `count` (sendcount), out `count` x the world size:
//                   every rank's in, in rank order (`reduce` unused)
// in and out of a reduce-scatter or all-gather never overlap.
struct AllReduceThunk {
  ir::ReduceKind reduce = ir::ReduceKind::kSum;
  ir::DType dtype = ir::DType::kF32;
  int64_t count = 0;
  ArenaSlice in, out;
  int64_t bucket = -1;  // index into EntryPlan::buckets
  CollectiveOp collective = CollectiveOp::kAllReduce;
  bool operator==(const AllReduceThunk&) const = default;
};

// An instruction without an emitter yet: the artifact is incomplete.
struct UnsupportedThunk {
  std::string what, reason;
  bool operator==(const UnsupportedThunk&) const = default;
};

// In Thunk::body's alternative order.
enum class ThunkKind { kKernel, kGemm, kCopy, kConstant, kAllReduce, kUnsupported };
inline constexpr int kThunkKinds = 6;
std::string_view ThunkKindName(ThunkKind kind);  // "kernel", "gemm", "all_reduce", ...

// What a kernel or gemm thunk costs by the compiler's model
// (compiler/analysis/kernel_cost.h): a reader turns it into a roofline time
// for a GPU (program::GpuSpec). {"flops", "bytes_read", "bytes_written"};
// absent on fallback kernels (their work is counted in their gemm's) and in
// plans written before it was recorded.
struct ThunkCost {
  double flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  bool operator==(const ThunkCost&) const = default;
};

struct Thunk {
  int64_t index = 0;  // position in the entry's thunk list (not written)
  std::string name;   // kernel: the PTX entry; others: the instruction
  std::string meta;   // the frontend scope ("h.1.mlp.c_fc"), may be empty
  std::variant<KernelThunk, GemmThunk, CopyThunk, ConstantThunk, AllReduceThunk, UnsupportedThunk>
      body;
  std::optional<ThunkCost> cost;  // "cost"
  // Note [plan roles]: its phase, block and part of the model ("role");
  // absent in plans written before it was recorded.
  std::optional<ThunkRole> role;
  bool operator==(const Thunk&) const = default;

  ThunkKind kind() const { return static_cast<ThunkKind>(body.index()); }
  // For messages: "thunk 41 (gemm %fusion.12, h.3.mlp.c_fc)".
  std::string Describe() const;
  // The instruction of the entry this thunk computes (kernel: its fusion).
  const std::string& instruction() const;
};

// Every slice a thunk names (kernel args; gemm a, b, c, d, bias, aux,
// fallback_d; copy src, dst; constant dst; all-reduce in, out).
std::vector<const ArenaSlice*> ThunkSlices(const Thunk& t);

// Collectives of one CollectiveOp issued together (Note [all-reduce buckets]
// in passes/all_reduce_combiner.h): as one group after thunk `issue_after`
// (its last member), finished before thunk `wait_before` (thunks.size(): the
// end). `bytes`: its members' operands.
struct AllReduceBucket {
  int64_t id = 0;                // its index in EntryPlan::buckets
  std::vector<int64_t> members;  // all_reduce thunk indices, ascending
  int64_t issue_after = 0;
  int64_t wait_before = 0;
  int64_t bytes = 0;
  bool operator==(const AllReduceBucket&) const = default;
};

// One buffer of buffer assignment (Note [plan buffers] in
// compiler/artifact/plan.cc): the value(s) it holds at its slice during its
// live range. slice.buffer is id.
struct PlanBuffer {
  int64_t id = 0;
  std::string name;  // the defining instruction, "fusion.3" or "fusion.3{1}" for a leaf
  ArenaSlice slice;
  std::string shape;  // its value's ("bf16[16,1024,768]"); empty in older plans
  // Note [plan roles]: what it holds ("category"); absent in older plans.
  std::optional<BufferCategory> category;
  bool operator==(const PlanBuffer&) const = default;
};

// One input or output of an entry (the signature's slot) and where the
// caller writes or reads it.
struct PlanSlot : Slot {
  ArenaSlice slice;
  bool operator==(const PlanSlot&) const = default;
};

// Note [arena guests]
// The logits, eval and score entries run between train steps, when the arena of the
// entry that runs each micro-batch (train_step, or accumulate) holds nothing
// a later step reads but its inputs of the parameters and, in train_step,
// the AdamW moments. So they run in that arena, as its guests: buffer
// assignment places a guest's parameter inputs at the host's parameter
// slices (the guest reads the parameters where the host keeps them, no copy)
// and its other buffers around the host's parameters and moments
// (compiler/analysis/arena_guests.h). The runtime allocates the host's arena
// as large as the largest of them and, before a guest runs in accumulate's
// arena, brings its parameters up to date there. gpt2-1558m at batch 16
// saves the 17.85 GiB of the two entries' own arenas. A runtime that
// ignores `arena_host` still runs the guest correctly in an arena of its own.

// One entry's plan: its signature with slices, thunks, buckets and buffers.
struct EntryPlan {
  EntryRole role = EntryRole::kTrainStep;
  int64_t arena_size = 0;
  // Note [arena guests]: the entry whose arena this one runs in; none: its own.
  std::optional<EntryRole> arena_host;
  std::vector<PlanSlot> inputs;                        // in entry-parameter order
  std::vector<PlanSlot> outputs;                       // root tuple elements in order
  std::vector<std::pair<int64_t, int64_t>> donations;  // (output, input)
  std::vector<Thunk> thunks;
  std::vector<AllReduceBucket> buckets;
  std::vector<PlanBuffer> buffers;  // by id
  bool operator==(const EntryPlan&) const = default;

  std::string_view name() const { return EntryRoleName(role); }
  // The signature: the slots without their slices, and the donations.
  EntrySignature Signature() const;
  // The buffer with id `id`, or null.
  const PlanBuffer* FindBuffer(int64_t id) const;
  // The slot with `role` (and `index` for per-parameter roles), or null.
  const PlanSlot* FindInput(SlotRole role, int64_t index = -1) const;
  const PlanSlot* FindOutput(SlotRole role, int64_t index = -1) const;
  // Number of thunks of each kind, in ThunkKind order.
  std::array<int64_t, kThunkKinds> CountByKind() const;
};

// The plan section: {"entries": [...]}.
struct Plan {
  std::vector<EntryPlan> entries;
  bool operator==(const Plan&) const = default;
};

// Note [arena guests]: the bytes of the arenas of entries whose arenas take
// `sizes[i]` bytes and which run in the arena of entry `hosts[i]` (-1: their
// own): each host's arena is as large as its largest guest's.
int64_t ArenaAllocationBytes(std::span<const int64_t> sizes, std::span<const int> hosts);
// The same of a plan's entries (each arena_host found by its role).
int64_t ArenaAllocationBytes(std::span<const EntryPlan> entries);
// The index in `entries` of entry `e`'s arena host, or -1: its own arena.
int ArenaHostIndex(std::span<const EntryPlan> entries, const EntryPlan& e);

// --- the codec -----------------------------------------------------------------
// ToJson writes what FromJson reads; FromJson's errors start with `where`.

nlohmann::json ToJson(const ArenaSlice& s);
nlohmann::json ToJson(const GemmLayout& l);
nlohmann::json ToJson(const GemmConfig& c);
nlohmann::json ToJson(const Thunk& t);
nlohmann::json ToJson(const AllReduceBucket& b);
nlohmann::json ToJson(const PlanBuffer& b);
nlohmann::json ToJson(const PlanSlot& s);
nlohmann::json ToJson(const EntryPlan& e);
nlohmann::json ToJson(const Plan& p);

StatusOr<ArenaSlice> ArenaSliceFromJson(const nlohmann::json& j, std::string_view where);
StatusOr<GemmLayout> GemmLayoutFromJson(const nlohmann::json& j, std::string_view where);
StatusOr<GemmConfig> GemmConfigFromJson(const nlohmann::json& j, std::string_view where);
StatusOr<Thunk> ThunkFromJson(const nlohmann::json& j, std::string_view where);
StatusOr<AllReduceBucket> AllReduceBucketFromJson(const nlohmann::json& j, std::string_view where);
StatusOr<PlanBuffer> PlanBufferFromJson(const nlohmann::json& j, std::string_view where);
StatusOr<PlanSlot> PlanSlotFromJson(const nlohmann::json& j, std::string_view where);
// Errors start with "plan entry NAME" (`where` until the name is read).
StatusOr<EntryPlan> EntryPlanFromJson(const nlohmann::json& j,
                                      std::string_view where = "plan entry");
// Errors start with "section 'plan'" or an entry's "plan entry NAME".
StatusOr<Plan> PlanFromJson(const nlohmann::json& j);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_PLAN_H_
