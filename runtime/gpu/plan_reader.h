// The thunk plan of an artifact (docs/ARTIFACT.md, "The plan") read into
// typed structs and checked once, at load, so that the executor never meets
// malformed JSON: every slice lies inside its arena, every kernel has a
// positive grid and block, every gemm descriptor names enums cuBLASLt knows.
//
// Device-agnostic: no CUDA header here. cuBLASLt's enums are kept as their
// numeric values (cudaDataType_t, cublasComputeType_t, cublasOperation_t,
// cublasLtEpilogue_t), translated from the descriptor's strings by
// ParseGemmConfig (which takes the values from cuBLASLt's own header).
#ifndef GPTC_RUNTIME_GPU_PLAN_READER_H_
#define GPTC_RUNTIME_GPU_PLAN_READER_H_

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "compiler/ir/shape.h"
#include "compiler/support/status.h"

namespace gptc::rt::gpu {

// `size` bytes at `offset` in the entry's arena.
struct ArenaSlice {
  int64_t offset = 0;
  int64_t size = 0;
  // The buffer it holds (EntryPlan::buffers), -1 when the plan does not say
  // (artifacts from before Note [plan buffers] in compiler/artifact/plan.cc).
  int64_t buffer = -1;
  // The same memory (whatever buffer).
  bool operator==(const ArenaSlice& o) const { return offset == o.offset && size == o.size; }
};

// One buffer of the arena (passes/buffer_assignment.h): the value(s) it holds
// at its slice during its live range.
struct PlanBuffer {
  int64_t id = 0;
  std::string name;  // the defining instruction, "fusion.3" or "fusion.3{1}" for a leaf
  ArenaSlice slice;
};

// One input or output of an entry: where the caller writes or reads it.
struct PlanSlot {
  std::string role;  // program::SlotRoleName: "param", "adam_m", "tokens", "loss", ...
  int64_t index = -1;
  std::string name;
  ir::Shape shape;
  ArenaSlice slice;
};

enum class ThunkKind { kKernel, kGemm, kCopy, kConstant, kAllReduce, kUnsupported };
std::string_view ThunkKindName(ThunkKind kind);  // "kernel", "gemm", ...

struct KernelThunk {
  std::string fusion;       // the entry instruction it computes
  std::string fusion_kind;  // "loop", "row_reduction", "attention", ...
  std::array<int64_t, 3> grid = {1, 1, 1};
  std::array<int64_t, 3> block = {1, 1, 1};
  int64_t dynamic_smem = 0;
  std::vector<ArenaSlice> args;  // Note [kernel ABI]: operands, then results
  int64_t operands = -1;         // how many args are operands; -1: not recorded
  // Note [epilogue fallback]: launched only when the gemm of the same
  // instruction next to it runs without its epilogue: the bias gradient
  // (right before the gemm) or the epilogue itself (right after it).
  bool fallback = false;
};

// One cublasLtMatrixLayout (column-major, Note [row-major on cuBLASLt]).
struct GemmLayout {
  int32_t dtype = 0;  // cudaDataType_t
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t batch_count = 1;
  int64_t batch_stride = 0;  // elements
};

// A gemm descriptor with cuBLASLt's enums as numbers.
struct GemmConfig {
  int32_t compute_type = 0;        // cublasComputeType_t
  int32_t scale_type = 0;          // cudaDataType_t
  int32_t transa = 0, transb = 0;  // cublasOperation_t
  int64_t m = 0, n = 0, k = 0;
  int64_t batch_count = 1;
  GemmLayout a, b, c, d;
  double alpha = 1, beta = 0;
  int32_t epilogue = 0;               // cublasLtEpilogue_t
  std::string epilogue_name;          // "CUBLASLT_EPILOGUE_GELU_BIAS", for messages
  std::optional<int32_t> bias_dtype;  // cudaDataType_t, when the descriptor names one
  int64_t aux_ld = 0;
  int64_t workspace_bytes = 0;
  // What the epilogue does with the bias / aux buffers.
  bool reads_bias = false;   // BIAS, GELU_BIAS, GELU_AUX_BIAS
  bool writes_bias = false;  // BGRADA, BGRADB, DGELU_BGRAD
  bool writes_aux = false;   // GELU_AUX, GELU_AUX_BIAS
  bool reads_aux = false;    // DGELU, DGELU_BGRAD
  // "m=768 n=128 k=64 batch=1 A CUDA_R_16BF N B CUDA_R_16BF N D CUDA_R_32F epilogue BIAS"
  std::string Summary() const;
};

// Reads a gemm thunk's "descriptor". Errors name the field and the value.
StatusOr<GemmConfig> ParseGemmConfig(const nlohmann::json& descriptor);

struct GemmThunk {
  GemmConfig config;
  ArenaSlice a, b, c, d;
  std::optional<ArenaSlice> bias;  // read (BIAS epilogues) or written (BGRAD)
  std::optional<ArenaSlice> aux;   // the pre-activation: GELU_AUX writes it, DGELU reads it
  // Note [epilogue fallback]: where the plain gemm writes the dot's f32
  // result when the epilogue is refused (scratch, in no buffer).
  std::optional<ArenaSlice> fallback_d;
};

struct CopyThunk {
  ArenaSlice src, dst;
  int64_t bytes = 0;
  std::string reason;  // for donation copies
};

// A small constant written into `dst` at its place in the schedule every run
// (Note [liveness] in passes/buffer_assignment.h: constants are ordinary
// values whose slices are reused once they are dead).
struct ConstantThunk {
  ir::DType dtype = ir::DType::kF32;
  std::string bytes;  // dst.size bytes, encoded (a splat is expanded)
  ArenaSlice dst;
};

struct AllReduceThunk {
  std::string reduce;  // "sum" or "max"
  ir::DType dtype = ir::DType::kF32;
  int64_t count = 0;
  ArenaSlice in, out;
  int64_t bucket = -1;  // index into EntryPlan::buckets, -1: none
};

// All-reduces issued together (Note [all-reduce buckets] in
// compiler/artifact/plan.h): as one group after thunk `issue_after` (its last
// member), finished before thunk `wait_before` (thunks.size(): the end).
struct AllReduceBucket {
  std::vector<int64_t> members;  // all_reduce thunk indices, ascending
  int64_t issue_after = 0;
  int64_t wait_before = 0;
  int64_t bytes = 0;
};

struct UnsupportedThunk {
  std::string what, reason;
};

struct Thunk {
  int64_t index = 0;  // position in the entry's thunk list
  ThunkKind kind = ThunkKind::kKernel;
  std::string name;  // kernel: the PTX entry; others: the instruction
  std::string meta;  // the frontend scope ("h.1.mlp.c_fc"), may be empty
  std::variant<KernelThunk, GemmThunk, CopyThunk, ConstantThunk, AllReduceThunk, UnsupportedThunk>
      body;

  // For messages: "thunk 41 (gemm fusion.12, h.3.mlp.c_fc)".
  std::string Describe() const;
  // The instruction of the entry this thunk computes (kernel: its fusion).
  const std::string& instruction() const;
};

struct EntryPlan {
  std::string name;
  int64_t arena_size = 0;
  std::vector<PlanSlot> inputs, outputs;
  std::vector<std::pair<int64_t, int64_t>> donations;  // (output, input)
  std::vector<Thunk> thunks;
  std::vector<AllReduceBucket> buckets;  // empty: artifacts from before buckets
  std::vector<PlanBuffer> buffers;       // by id; empty: artifacts from before them

  // The buffer with id `id`, or null.
  const PlanBuffer* FindBuffer(int64_t id) const;
  // The slot with `role` (and `index` for per-parameter roles), or null.
  const PlanSlot* FindInput(std::string_view role, int64_t index = -1) const;
  const PlanSlot* FindOutput(std::string_view role, int64_t index = -1) const;
  // Number of thunks of each kind, in ThunkKind order.
  std::array<int64_t, 6> CountByKind() const;
};

// Every slice a thunk names (kernel args; gemm a, b, c, d, bias, aux; copy
// src, dst; constant dst; all-reduce in, out).
std::vector<const ArenaSlice*> ThunkSlices(const Thunk& t);

// One entry of the plan section. Errors start with "plan entry NAME".
StatusOr<EntryPlan> ReadEntryPlan(const nlohmann::json& entry);
// Every entry of an artifact's plan section.
StatusOr<std::vector<EntryPlan>> ReadPlan(const nlohmann::json& plan);

// Where one kernel's code is in the artifact (the manifest's "kernels").
struct KernelImage {
  std::string entry, name;
  int64_t ptx_offset = 0, ptx_size = 0;
  std::optional<std::pair<int64_t, int64_t>> cubin;  // offset, size
  int64_t registers = 0;
};

// The manifest's kernel index, checked against the sizes of the ptx and
// cubin sections (cubin_bytes 0 when the section is absent).
StatusOr<std::vector<KernelImage>> ReadKernelIndex(const nlohmann::json& manifest,
                                                   int64_t ptx_bytes, int64_t cubin_bytes);

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_PLAN_READER_H_
