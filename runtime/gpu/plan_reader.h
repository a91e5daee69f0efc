// The thunk plan of an artifact (docs/ARTIFACT.md, "The plan") decoded by
// the plan's codec (compiler/program/plan.h) and checked once, at load, so
// that the executor never meets a plan it cannot run: every slice lies
// inside its arena, every kernel has a positive grid and block, every gemm's
// layouts fit its problem and its slices.
//
// Device-agnostic: no CUDA header here. cuBLASLt's enums are mapped to their
// numeric values (cudaDataType_t, cublasComputeType_t, cublasOperation_t,
// cublasLtEpilogue_t) by the Cuda* functions below, which take the values
// from cuBLASLt's own header.
#ifndef GPTC_RUNTIME_GPU_PLAN_READER_H_
#define GPTC_RUNTIME_GPU_PLAN_READER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/program/kernel_index.h"
#include "compiler/program/plan.h"
#include "compiler/support/status.h"

namespace gptc::rt::gpu {

// The plan's types are the program's (one definition, one codec).
using program::AllReduceBucket;
using program::AllReduceThunk;
using program::ArenaSlice;
using program::ConstantThunk;
using program::CopyThunk;
using program::EntryPlan;
using program::GemmConfig;
using program::GemmLayout;
using program::GemmThunk;
using program::KernelThunk;
using program::PlanBuffer;
using program::PlanSlot;
using program::Thunk;
using program::ThunkKind;
using program::ThunkKindName;
using program::ThunkSlices;
using program::UnsupportedThunk;

// cuBLASLt's values of the plan's enums.
int32_t CudaDataType(program::GemmDType t);       // cudaDataType_t
int32_t CudaComputeType(program::GemmCompute c);  // cublasComputeType_t
int32_t CudaOperation(program::GemmOp op);        // cublasOperation_t
int32_t CudaEpilogue(program::GemmEpilogue e);    // cublasLtEpilogue_t

// Whether `c` describes a matmul cuBLASLt can run: a positive problem, and
// layouts of op(A)[m, k], op(B)[k, n], C and D [m, n] with the problem's
// batch count. Errors start with "descriptor".
Status CheckGemmConfig(const GemmConfig& c);

// The bytes a constant thunk writes into its dst (a splat expanded).
std::string ConstantBytes(const ConstantThunk& c);

// Decodes and checks one entry of the plan section. Errors start with "plan
// entry NAME".
StatusOr<EntryPlan> ReadEntryPlan(const nlohmann::json& entry);
// Every entry of an artifact's plan section.
StatusOr<std::vector<EntryPlan>> ReadPlan(const nlohmann::json& plan);
// Checks a decoded entry (what ReadEntryPlan does after decoding).
Status CheckEntryPlan(const EntryPlan& plan);

// Whether the GPU trainer can run `plan` for the program's entry of signature
// `sig`: the same slots in roles and shapes, and only inputs it feeds
// (parameters, optimizer state, accumulators, tokens, targets, step, lr).
Status CheckTrainerSignature(const program::EntrySignature& sig, const EntryPlan& plan);

// Note [arena guests] (compiler/program/plan.h): per entry of `plans`, the
// index of the entry whose arena it runs in (-1: its own), checked: that
// entry has role `micro` (it runs the micro-batches) and holds each of the
// guest's parameter inputs at the guest's slice, in the same shape.
StatusOr<std::vector<int>> CheckArenaHosts(const std::vector<EntryPlan>& plans,
                                           program::EntryRole micro);

// Where one kernel's code is in the artifact (the manifest's "kernels").
using program::KernelRecord;

// Checks the manifest's kernel index against the sizes of the ptx and cubin
// sections (cubin_bytes 0 when the section is absent); errors name the
// record ("manifest kernels[3] (fusion_7): PTX [...) is outside ...").
Status CheckKernelIndex(const std::vector<KernelRecord>& index, int64_t ptx_bytes,
                        int64_t cubin_bytes);

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_PLAN_READER_H_
