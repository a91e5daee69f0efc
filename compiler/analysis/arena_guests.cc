#include "compiler/analysis/arena_guests.h"

#include <fmt/format.h>

#include <map>
#include <utility>

#include "compiler/program/plan.h"

namespace gptc::analysis {
namespace {

using program::SlotRole;

int64_t AlignUp(int64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

}  // namespace

StatusOr<BufferAssignmentOptions> GuestOptions(const program::TrainEntry& guest,
                                               const program::TrainEntry& host,
                                               const BufferAssignment& host_assignment) {
  BufferAssignmentOptions options = DonationOptions(guest.signature);
  const std::vector<ir::Instruction*> host_params = host.module->entry()->parameters();
  std::map<int64_t, Slice> host_param_slices;  // by model parameter index
  for (size_t i = 0; i < host.signature.inputs.size(); ++i) {
    const program::Slot& slot = host.signature.inputs[i];
    if (slot.role != SlotRole::kParam && slot.role != SlotRole::kAdamM &&
        slot.role != SlotRole::kAdamV) {
      continue;
    }
    ASSIGN_OR_RETURN(Slice slice, host_assignment.GetSlice(host_params[i]));
    options.reserved.emplace_back(slice.offset, slice.offset + AlignUp(slice.size));
    if (slot.role == SlotRole::kParam) host_param_slices[slot.index] = slice;
  }
  for (size_t i = 0; i < guest.signature.inputs.size(); ++i) {
    const program::Slot& slot = guest.signature.inputs[i];
    if (slot.role != SlotRole::kParam) continue;
    const int64_t at = host.signature.FindInput(SlotRole::kParam, slot.index);
    auto slice = host_param_slices.find(slot.index);
    if (at < 0 || slice == host_param_slices.end() ||
        host.signature.inputs[at].shape != slot.shape) {
      return Error("entry {}: parameter %{} is not an input of {} in the shape {}", guest.name(),
                   slot.name, host.name(), slot.shape.ToString());
    }
    options.parameter_offsets[static_cast<int64_t>(i)] = slice->second.offset;
  }
  return options;
}

int64_t ProgramBuffers::ArenaBytes() const {
  std::vector<int64_t> sizes;
  for (const BufferAssignment& a : assignments) sizes.push_back(a.arena_size());
  return program::ArenaAllocationBytes(sizes, hosts);
}

StatusOr<ProgramBuffers> AssignProgramBuffers(const program::TrainProgram& program, bool guests) {
  ProgramBuffers out;
  const size_t n = program.entries.size();
  out.hosts.assign(n, -1);
  if (guests) {
    for (size_t i = 0; i < n; ++i) {
      const program::TrainEntry* host = program.ArenaHost(program.entries[i]);
      if (host != nullptr) out.hosts[i] = static_cast<int>(host - program.entries.data());
    }
  }
  std::vector<std::optional<BufferAssignment>> assigned(n);
  // Hosts first: a guest's placement reads its host's.
  for (bool guest_pass : {false, true}) {
    for (size_t i = 0; i < n; ++i) {
      if ((out.hosts[i] >= 0) != guest_pass) continue;
      const program::TrainEntry& e = program.entries[i];
      BufferAssignmentOptions options = DonationOptions(e.signature);
      if (guest_pass) {
        const int h = out.hosts[i];
        ASSIGN_OR_RETURN(options, GuestOptions(e, program.entries[h], *assigned[h]));
      }
      ASSIGN_OR_RETURN(assigned[i], AssignBuffers(*e.module, options));
    }
  }
  for (std::optional<BufferAssignment>& a : assigned) out.assignments.push_back(std::move(*a));
  return out;
}

}  // namespace gptc::analysis
