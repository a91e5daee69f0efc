// Kernel code generation: fusion instructions -> PTX (+ cubin where ptxas is
// installed), one kernel per fusion. No LLVM/MLIR types appear here.
//
// Pipeline per fusion (see lowering.h): an emitter (kernel_emitter.h) builds a
// `gpu.func` in a `gpu.module`; MLIR lowers it to the NVVM/LLVM dialects; it is
// translated to LLVM IR, linked with libdevice, optimised at O3 and compiled by
// the NVPTX backend; ptxas then assembles the PTX for the target.
#ifndef GPTC_COMPILER_CODEGEN_CODEGEN_H_
#define GPTC_COMPILER_CODEGEN_CODEGEN_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/codegen/kernel_spec.h"
#include "compiler/codegen/ptxas.h"
#include "compiler/codegen/target.h"
#include "compiler/ir/module.h"
#include "compiler/support/status.h"

namespace gptc::codegen {

struct CodegenOptions {
  std::string target = "sm_90a";                        // a name of kTargets (target.h)
  AttentionMma attention_mma = AttentionMma::kMmaSync;  // TargetHas(target, attention_mma)
  // Assemble every kernel with ptxas when it is installed (RunPtxas); with
  // `require_ptxas`, a missing ptxas is an error instead of a skipped check.
  bool run_ptxas = true;
  bool require_ptxas = false;
  std::string ptxas_path;  // empty: FindPtxas()
  std::string libdevice_path = "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";
  bool keep_mlir = false;  // fill CompiledKernel::mlir (the emitted gpu.module)
  bool keep_llvm = false;  // fill CompiledKernel::llvm_ir (after linking, before O3)
  // CompileFusions: compile identical fusions once (Note [kernel deduplication]),
  // and the distinct kernels on `threads` threads (0: one per hardware thread).
  bool deduplicate = true;
  int64_t threads = 0;
  // CompileFusions calls it after each distinct kernel with (compiled,
  // total), from its worker threads one at a time; for progress output.
  std::function<void(int64_t, int64_t)> progress;
  // gptc compile --emu: also compile every kernel for the host (Note [host
  // kernels] in host_lowering.h), exporting it as host_symbol_prefix + name.
  bool emit_host = false;
  std::string host_symbol_prefix;
};

// A kernel compiled for the emulated device (Note [host kernels] in
// host_lowering.h): an ELF object exporting `void symbol(const uint64_t*)`.
struct HostKernel {
  std::string symbol;
  std::string object;
  // It has a barrier, a shuffle, an mma, an ldmatrix or a warpgroup
  // instruction: its block's threads must run as fibers.
  bool uses_sync = false;
  int64_t shared_bytes = 0;  // static shared memory in the host layout
  // Sites in the code.
  int64_t barriers = 0, shuffles = 0, mmas = 0, ldmatrices = 0, wgmmas = 0, accesses = 0;
  // Global atomics: the emulator runs its blocks one after another, in
  // order (Note [ordered atomics] in runtime/emu/grid_runner.h).
  int64_t atomics = 0;
};

// Note [kernel deduplication]: fusions whose fused computations are equal up
// to instruction and computation names and metadata (KernelKey: the same
// emitter, fusion kind, instructions, shapes, attributes, operand shapes) have
// the same kernel. CompileFusions compiles it once, for the first of them;
// each later one gets a CompiledKernel whose `code_of` is the index of that
// first kernel in CompiledKernels::kernels, whose spec is the first's with its
// own `fusion` (spec.name stays the shared kernel name), and whose ptx, ptxas,
// mlir and llvm_ir are empty. So a program holds each PTX entry once, and
// every launch finds its code by spec.name. The 12 layers of GPT-2 share all
// their kernels this way.
struct CompiledKernel {
  KernelSpec spec;
  std::string ptx;                 // empty when code_of >= 0
  std::optional<PtxasInfo> ptxas;  // absent when ptxas was not run (or code_of >= 0)
  std::string mlir;
  std::string llvm_ir;
  std::optional<HostKernel> host;  // CodegenOptions::emit_host; absent when code_of >= 0
  int64_t code_of = -1;  // Note [kernel deduplication]: the kernel holding the code, or -1
  // Seconds spent on it (gptc compile --timings names the slowest kernels):
  // emitting and lowering to PTX (MLIR, LLVM O3, the NVPTX backend), and ptxas.
  double lower_seconds = 0, ptxas_seconds = 0;
};

struct SkippedFusion {
  std::string fusion;  // instruction name
  ir::FusionKind kind;
  std::string reason;  // "fusion kind gemm has no emitter yet"
};

struct CompiledKernels {
  std::vector<CompiledKernel> kernels;  // in entry order
  std::vector<SkippedFusion> skipped;   // fusions without an emitter yet
};

// Whether a fusion kind has an emitter (ChooseEmitter says whether a given
// fusion of that kind is supported).
bool HasEmitter(ir::FusionKind kind);

// The kernel emitters (kernel_emitter.h). Note [emitter choice]: a loop or
// optimizer fusion -> kLoop; a reduction or cross-entropy fusion whose
// reduces all reduce the last dim of one input shape -> kRowReduction, whose
// reduces all reduce leading dims keeping one shape -> kColumnReduction; a
// reduction fusion mixing both (layer-norm backward) -> kMixedReductionColumns
// (Note [mixed row and column reductions]); an attention fusion holding an
// `attention` op -> kAttention, one holding `attention-grad` ops ->
// kAttentionBackward (Note [flash attention backward]); standalone gather / scatter-add
// instructions of the entry -> kGather / kScatterAdd.
enum class EmitterKind {
  kLoop,
  kRowReduction,
  kColumnReduction,
  kGather,
  kScatterAddInit,  // the first kernel of a scatter-add (copies operand 0)
  kScatterAdd,
  kAttention,
  kAttentionBackward,
  // Note [packed attention gradient] (passes/attention_fusion.cc): the first
  // kernel of a backward fusion holding dq, dk and dv: dk + dv (then
  // kAttentionBackward computes dq).
  kAttentionBackwardKeys,
  // Note [mixed row and column reductions]: the two kernels of a fusion
  // mixing row and column reductions.
  kMixedReductionRows,     // the first: the row reduction writing the row-part outputs
  kMixedReductionColumns,  // the second: the column reduction writing the column-part outputs
  // Note [split column reductions] (column_reduction_plan.h): the grad norm,
  // the layer-norm gain/bias gradients; of a column reduction or of the
  // column part of a mixed one (after its kMixedReductionRows kernel).
  // The first: chunk totals of every reduce into scratch (of full reductions,
  // a block's member's, Note [member partials]).
  kColumnReductionPartials,
  kColumnReductionFinal,     // the second: the totals of the partials, and the outputs
};

// Note [split column reductions]: the number of row chunks G of a column
// reduction fusion (or of the column part of a mixed one) whose reduces are
// independent and whose rows are many (> 1: emit it as
// kColumnReductionPartials then kColumnReductionFinal), else 1. Full
// reductions split by members: the number of partials (Note [member
// partials]).
int64_t ColumnReductionChunks(const ir::Instruction& fusion);

// Note [mixed row and column reductions]: the layer-norm backward fusion
// reduces dy * w * rstd-terms over the last dim (for dx) and dy, dy * xhat
// over the rows (for dgain, dbias), with outputs of both shapes, as llm.c's
// layernorm_backward does in one kernel. We emit it as two kernels of one
// ABI (Note [multi-kernel instructions]): NAME_rows, the row-reduction emitter
// restricted to the row part (the outputs that depend on no column reduce,
// computed from the row reduces only), then NAME, the column-reduction
// emitter restricted to the column part (the outputs that depend on a column
// reduce). A column-part output that also depends on a row reduce would need
// the row statistics recomputed per row inside the column kernel; no fusion
// of GPT-2 has one, so ChooseEmitter rejects it. Both kernels re-read the
// fusion's inputs; neither uses atomics, so the results are deterministic.
//
// A reduce is a row reduce when it reduces the last dim of an input of rank
// >= 2 (ir::IsRowReduce), else a column reduce when it reduces leading dims.
// For a fusion mixing row and column reductions: whether each output (in
// FusionOutputs order) belongs to the column part; an error naming the output
// when one depends on both kinds, or when the fusion is not such a mix.
StatusOr<std::vector<bool>> MixedReductionColumnPart(const ir::Computation& fused);

// The reduces of a fused computation in order, including those of composite
// ops (softmax-cross-entropy) inside their decomposition, which the emitters
// inline (FusedEmitter).
std::vector<const ir::Instruction*> FusionReduces(const ir::Computation& fused);

// The emitter for `inst` (a fusion, gather or scatter-add), or an error
// saying why there is none ("fusion kind gemm has no emitter yet").
StatusOr<EmitterKind> ChooseEmitter(const ir::Instruction& inst);

// Validates a target name (one of kTargets in target.h).
Status CheckTarget(std::string_view target);
// Validates the options' target and the instructions it must have.
Status CheckCodegenOptions(const CodegenOptions& options);

// Compiles one fusion instruction to one kernel named `kernel_name` (for a
// scatter-add or a mixed reduction: its second kernel; CompileFusions emits both).
StatusOr<CompiledKernel> CompileFusion(const ir::Instruction& fusion, std::string kernel_name,
                                       const CodegenOptions& options);

// Compiles `inst` with the emitter of `kind`.
StatusOr<CompiledKernel> CompileKernel(const ir::Instruction& inst, EmitterKind kind,
                                       std::string kernel_name, const CodegenOptions& options);

// The deduplication key of `inst` compiled with `emitter` (Note [kernel
// deduplication]): its canonical print, without names or metadata.
std::string KernelKey(const ir::Instruction& inst, EmitterKind emitter);

// One line of `inst` without its name, operand names, called computation's
// name and metadata: "bf16[4,8] add(0, 1), ..." (operands by their number in
// `numbers`, -1 if absent). The called computation follows, canonicalised
// the same way. KernelKey and Note [member classes] (loop_plan.h) use it.
std::string CanonicalInstruction(const ir::Instruction& inst,
                                 const std::map<const ir::Instruction*, int64_t>& numbers);

// The emulator library (the artifact's `emu` section): `objects` (the
// HostKernel::object of every kernel, any entry) linked with the library's
// support object into one shared object by the system's C compiler driver
// ($CC, else cc, gcc or clang on PATH). Returns the library's bytes.
StatusOr<std::string> LinkHostLibrary(std::vector<std::string> objects);

// Compiles every fusion of the entry computation that has an emitter, and
// every standalone gather and scatter-add (Note [multi-kernel instructions]
// in kernel_spec.h: a scatter-add or a mixed reduction gives two kernels); the others are listed
// in `skipped`. Kernel names derive from the instruction names ("%fusion.3"
// -> "fusion_3"), made unique; identical fusions share one kernel (Note
// [kernel deduplication]). The distinct kernels compile on options.threads
// threads; the result does not depend on the number of threads.
StatusOr<CompiledKernels> CompileFusions(const ir::Module& module, const CodegenOptions& options);

// One module of a multi-module CompileFusions: its host kernels export
// host_symbol_prefix + kernel name (in place of CodegenOptions's prefix).
struct CodegenModule {
  const ir::Module* module;
  std::string host_symbol_prefix;
};

// CompileFusions of several modules (the entries of one artifact) on one
// pool of threads, costliest kernels first (Note [compile order]); a kernel
// whose key and name recur in a later module is compiled once, and each
// module's result holds its own copy (its host kernel keeps the first
// module's symbol). Results in the order of `modules`.
StatusOr<std::vector<CompiledKernels>> CompileFusions(const std::vector<CodegenModule>& modules,
                                                      const CodegenOptions& options);

}  // namespace gptc::codegen

#endif  // GPTC_COMPILER_CODEGEN_CODEGEN_H_
