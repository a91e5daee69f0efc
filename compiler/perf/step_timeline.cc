#include "compiler/perf/step_timeline.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <variant>

namespace gptc::perf {
namespace {

using program::ArenaSlice;
using program::EntryPlan;
using program::Thunk;

bool InOptimizer(const Thunk& t) {
  return t.role && t.role->group == program::ThunkGroup::kOptimizer;
}

// The slices a thunk writes (Note [gradient readiness]); none for a
// fallback kernel, which runs only when cuBLASLt refuses an epilogue.
std::vector<ArenaSlice> Written(const Thunk& t) {
  std::vector<ArenaSlice> out;
  if (const auto* k = std::get_if<program::KernelThunk>(&t.body)) {
    if (k->fallback) return out;
    for (size_t i = static_cast<size_t>(k->operands); i < k->args.size(); ++i) {
      out.push_back(k->args[i]);
    }
  } else if (const auto* g = std::get_if<program::GemmThunk>(&t.body)) {
    out.push_back(g->d);
    if (g->bias && program::WritesBias(g->config.epilogue)) out.push_back(*g->bias);
    if (g->aux && program::WritesAux(g->config.epilogue)) out.push_back(*g->aux);
  } else if (const auto* c = std::get_if<program::CopyThunk>(&t.body)) {
    out.push_back(c->dst);
  } else if (const auto* c = std::get_if<program::ConstantThunk>(&t.body)) {
    out.push_back(c->dst);
  }
  return out;
}

bool Overlap(const ArenaSlice& a, const ArenaSlice& b) {
  return a.offset < b.offset + b.size && b.offset < a.offset + a.size;
}

// --dp 1: the gradient buffers the optimizer reads, each with the thunk
// that finishes it, in the order they are finished.
StatusOr<std::vector<std::pair<int64_t, int64_t>>> GradientsByBuffer(const EntryPlan& entry) {
  std::map<int64_t, const program::PlanBuffer*> gradients;  // by id
  for (const Thunk& t : entry.thunks) {
    if (!InOptimizer(t)) continue;
    for (const ArenaSlice* s : program::ThunkSlices(t)) {
      const program::PlanBuffer* b = entry.FindBuffer(s->buffer);
      if (b != nullptr && b->category == program::BufferCategory::kGradient) gradients[b->id] = b;
    }
  }
  std::vector<std::pair<int64_t, int64_t>> finished;  // (thunk, bytes)
  for (const auto& [id, b] : gradients) {
    std::optional<int64_t> last;
    for (const Thunk& t : entry.thunks) {
      if (InOptimizer(t)) continue;
      for (const ArenaSlice& w : Written(t)) {
        if (Overlap(w, b->slice)) last = t.index;
      }
    }
    if (!last) {
      return Error("plan entry {}: no thunk before the optimizer writes gradient buffer {} ({})",
                   entry.name(), id, b->name);
    }
    finished.emplace_back(*last, b->slice.size);
  }
  std::stable_sort(finished.begin(), finished.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return finished;
}

}  // namespace

StatusOr<StepTimeline> StepTimelineOf(const EntryPlan& entry, std::span<const double> thunk_us,
                                      int64_t gather_bytes, int64_t tokens) {
  if (thunk_us.size() != entry.thunks.size()) {
    return Error("plan entry {}: {} thunks but {} times", entry.name(), entry.thunks.size(),
                 thunk_us.size());
  }
  for (const Thunk& t : entry.thunks) {
    if (!t.role) {
      return Error(
          "plan entry {}: {} has no role (a plan written before roles were recorded: "
          "compile it again)",
          entry.name(), t.Describe());
    }
  }
  StepTimeline out{.gather_bytes = gather_bytes, .tokens = tokens};
  // done[i]: the compute outside the optimizer once thunk i has run.
  std::vector<double> done(entry.thunks.size());
  bool in_forward = true;
  double clock = 0;
  for (const Thunk& t : entry.thunks) {
    const double us = thunk_us[t.index];
    if (in_forward && t.role->phase == ir::Phase::kGradient) {
      out.forward_us = clock;
      in_forward = false;
    }
    if (InOptimizer(t)) {
      out.optimizer_us += us;
    } else {
      clock += us;
      if (t.role->group == program::ThunkGroup::kParamCast) out.param_cast_us += us;
    }
    done[t.index] = clock;
  }
  out.backward_end_us = clock;
  for (const Thunk& t : entry.thunks) {
    const auto* a = std::get_if<program::AllReduceThunk>(&t.body);
    if (a == nullptr) continue;
    // The gradients the scaling model communicates, whole: a reduce-scatter's
    // operand (ZeRO-1's padded gradient); the gather of the parameters the
    // model adds itself (gather_bytes).
    switch (a->collective) {
      case program::CollectiveOp::kAllReduce:
        out.gradients.push_back({a->count * ir::DTypeBytes(a->dtype), done[t.index]});
        break;
      case program::CollectiveOp::kReduceScatter:
        out.gradients.push_back({a->in.size, done[t.index]});
        break;
      case program::CollectiveOp::kAllGather:
        break;
    }
  }
  if (out.gradients.empty()) {
    ASSIGN_OR_RETURN(const auto finished, GradientsByBuffer(entry));
    for (const auto& [thunk, bytes] : finished) out.gradients.push_back({bytes, done[thunk]});
  }
  if (out.gradients.empty()) {
    return Error(
        "plan entry {}: no gradient found (no all-reduce, no gradient buffer the "
        "optimizer reads)",
        entry.name());
  }
  return out;
}

}  // namespace gptc::perf
