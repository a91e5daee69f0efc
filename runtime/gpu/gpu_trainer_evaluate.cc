// The GPU trainer's entries that update no state (Evaluate, EvaluateSlice:
// the sampling, validation and score entries), and the sums over the ranks
// of what the score entry tallies (SumOverRanks).
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/gpu/backend.h"
#include "runtime/gpu/executor.h"
#include "runtime/gpu/gpu_trainer.h"
#include "runtime/gpu/gpu_trainer_impl.h"
#include "runtime/gpu/host_values.h"

namespace gptc::rt::gpu {

using program::SlotRole;

StatusOr<EntryExecutor*> GpuTrainer::Impl::RunForEvaluate(const program::TrainEntry& entry,
                                                          const MicroBatch& batch) {
  if (!entry.signature.donations.empty()) {
    return Error("{}: the entry updates state; run it with Step", entry.name());
  }
  EntryState* e = nullptr;
  for (EntryState& s : entries) {
    if (s.entry->name() == entry.name()) e = &s;
  }
  if (e == nullptr) return Error("{}: not an entry of this trainer's program", entry.name());
  EntryExecutor& ex = *e->executor;
  if (e->host == nullptr) {
    RETURN_IF_ERROR(CopyParamsInto(*e));
  } else {
    // Note [arena guests]: the parameters are read where the host keeps them.
    if (e->host != state_entry) RETURN_IF_ERROR(CopyParamsInto(*e->host));
    if (ThunkObserver* observer = backend->observer; observer != nullptr) {
      std::vector<ArenaSlice> params;
      for (const PlanSlot& slot : ex.plan().inputs) {
        if (slot.role == SlotRole::kParam) params.push_back(slot.slice);
      }
      RETURN_IF_ERROR(cuda->Check(observer->InputsInPlace(ex.plan(), params, stream),
                                  fmt::format("{}: parameters in place", entry.name())));
    }
  }
  for (const PlanSlot& slot : ex.plan().inputs) {
    if (slot.role == SlotRole::kParam) continue;
    const std::vector<int32_t>* fed = slot.role == SlotRole::kTokens    ? &batch.tokens
                                      : slot.role == SlotRole::kTargets ? &batch.targets
                                      : slot.role == SlotRole::kMask    ? &batch.mask
                                                                        : nullptr;
    if (fed == nullptr) {
      return Error("{}: input %{} has role {}, which Evaluate cannot feed", entry.name(), slot.name,
                   program::SlotRoleName(slot.role));
    }
    const std::vector<int32_t>& ids = *fed;
    if (static_cast<int64_t>(ids.size()) != slot.shape.num_elements()) {
      return Error("{}: input %{}: {} values given, {} needs {}", entry.name(), slot.name,
                   ids.size(), slot.shape.ToString(), slot.shape.num_elements());
    }
    RETURN_IF_ERROR(cuda->Check(
        cuda->MemcpyAsync(ex.At(slot.slice), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice,
                          stream),
        fmt::format("{}: cudaMemcpyAsync(%{} to the device)", entry.name(), slot.name)));
  }
  Status run = options.sync_each_thunk ? ex.RunChecked(stream) : ex.Run(stream);
  if (!run.ok()) return run.WithPrefix(entry.name());
  return &ex;
}

StatusOr<std::vector<std::vector<double>>> GpuTrainer::Impl::ReadOutputs(
    EntryExecutor& ex, std::string_view entry, std::span<const OutputRange> ranges) {
  std::vector<std::string> bytes;
  for (const OutputRange& r : ranges) {
    const PlanSlot& slot = ex.plan().outputs[r.output];
    const int64_t element = ir::DTypeBytes(slot.shape.dtype());
    bytes.emplace_back(r.count * element, '\0');
    RETURN_IF_ERROR(
        cuda->Check(cuda->MemcpyAsync(bytes.back().data(), ex.At(slot.slice) + r.first * element,
                                      bytes.back().size(), cudaMemcpyDeviceToHost, stream),
                    fmt::format("{}: cudaMemcpyAsync(%{} [{}, {}) to the host)", entry, slot.name,
                                r.first, r.first + r.count)));
  }
  RETURN_IF_ERROR(cuda->Check(cuda->EventRecord(done, stream), "cudaEventRecord"));
  RETURN_IF_ERROR(WaitFor(done, entry));
  std::vector<std::vector<double>> values;
  for (size_t i = 0; i < ranges.size(); ++i) {
    values.push_back(DecodeValues(ex.plan().outputs[ranges[i].output].shape.dtype(), bytes[i]));
  }
  return values;
}

StatusOr<std::vector<eval::Literal>> GpuTrainer::Evaluate(const program::TrainEntry& entry,
                                                          const MicroBatch& batch) {
  Impl& m = *impl_;
  ASSIGN_OR_RETURN(EntryExecutor * ex, m.RunForEvaluate(entry, batch));
  const std::vector<PlanSlot>& outputs = ex->plan().outputs;
  std::vector<Impl::OutputRange> all;
  for (size_t i = 0; i < outputs.size(); ++i) {
    all.push_back({static_cast<int64_t>(i), 0, outputs[i].shape.num_elements()});
  }
  ASSIGN_OR_RETURN(std::vector<std::vector<double>> values, m.ReadOutputs(*ex, entry.name(), all));
  std::vector<eval::Literal> out;
  for (size_t i = 0; i < outputs.size(); ++i) {
    out.push_back(eval::Literal{.shape = outputs[i].shape, .values = std::move(values[i])});
  }
  return out;
}

StatusOr<std::vector<double>> GpuTrainer::EvaluateSlice(const program::TrainEntry& entry,
                                                        const MicroBatch& batch, int64_t output,
                                                        int64_t first, int64_t count) {
  Impl& m = *impl_;
  RETURN_IF_ERROR(CheckSliceRange(entry, output, first, count));
  ASSIGN_OR_RETURN(EntryExecutor * ex, m.RunForEvaluate(entry, batch));
  const Impl::OutputRange range{output, first, count};
  ASSIGN_OR_RETURN(std::vector<std::vector<double>> values,
                   m.ReadOutputs(*ex, entry.name(), {&range, 1}));
  return std::move(values[0]);
}

Status GpuTrainer::SumOverRanks(std::span<double> values) {
  Impl& m = *impl_;
  Communicator* comm = m.options.communicator;
  if (comm == nullptr || values.empty()) return Status::Ok();
  const auto count = static_cast<int64_t>(values.size());
  if (count > m.sums_capacity) {
    // The previous sum was waited for: the old buffer is idle.
    m.sums = std::make_unique<DeviceBuffer>();
    m.sums_capacity = std::max<int64_t>(count, 64);
    RETURN_IF_ERROR(m.cuda->Check(m.sums->Allocate(*m.cuda, m.sums_capacity * sizeof(float)),
                                  "sum over ranks: cudaMalloc"));
  }
  // Pageable, so the copies are waited for before it goes away.
  std::vector<float> host(values.begin(), values.end());
  const size_t bytes = host.size() * sizeof(float);
  RETURN_IF_ERROR(m.cuda->Check(
      m.cuda->MemcpyAsync(m.sums->ptr, host.data(), bytes, cudaMemcpyHostToDevice, m.stream),
      "sum over ranks: cudaMemcpyAsync(to the device)"));
  RETURN_IF_ERROR(
      comm->AllReduce(m.sums->ptr, m.sums->ptr, count, ir::DType::kF32, ReduceOp::kSum, m.stream)
          .WithPrefix("sum over ranks"));
  // The host waits for the all-reduce before the copy back: the stream's
  // order is enough for NCCL, but the emulated device lands a result only
  // when another stream or the host waits for it (Note [in-flight
  // all-reduces] in runtime/emu/emu_ops.cc). Two waits at the end of an
  // eval cost nothing.
  RETURN_IF_ERROR(m.cuda->Check(m.cuda->EventRecord(m.done, m.stream), "cudaEventRecord"));
  RETURN_IF_ERROR(m.WaitFor(m.done, "sum over ranks"));
  RETURN_IF_ERROR(m.cuda->Check(
      m.cuda->MemcpyAsync(host.data(), m.sums->ptr, bytes, cudaMemcpyDeviceToHost, m.stream),
      "sum over ranks: cudaMemcpyAsync(to the host)"));
  RETURN_IF_ERROR(m.cuda->Check(m.cuda->EventRecord(m.done, m.stream), "cudaEventRecord"));
  RETURN_IF_ERROR(m.WaitFor(m.done, "sum over ranks"));
  std::copy(host.begin(), host.end(), values.begin());
  return Status::Ok();
}

}  // namespace gptc::rt::gpu
