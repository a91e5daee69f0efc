#include "passes/schedule.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "compiler/analysis/buffer_assignment.h"

namespace gptc::passes {

namespace {
int64_t Aligned(int64_t bytes) {
  return (bytes + analysis::kBufferAlignment - 1) / analysis::kBufferAlignment *
         analysis::kBufferAlignment;
}

// What must run before each instruction: its operands, and for a collective
// (ir::IsCollective) the previous collective of the original order.
// Note [late recompute]: an instruction remat added (phase remat) exists to
// be computed again when the backward needs it, from a value the forward
// kept. The greedy order ran one as soon as its operands existed whenever it
// allocated less than the other ready instructions (in the forward, a
// recomputation is often smaller than the next gemm), and the depth-first
// order visited a backward instruction's operands in order, its recomputed
// ones first; either way the recomputed value lived from the forward on. So,
// in the entry computation (a kernel's own order is not about memory), the
// greedy order defers a recomputation that allocates until nothing else is
// ready, and the depth-first order visits recomputed operands last. A
// recomputation that frees memory is not deferred (docs/PERFORMANCE.md has
// what it saves).
bool IsRecompute(const ir::Instruction& inst) { return inst.role().phase == ir::Phase::kRemat; }

// Whether Note [late recompute] applies: in the entry computation.
bool DefersRecompute(const ir::Computation& computation) {
  return computation.parent() != nullptr && computation.parent()->entry() == &computation;
}

// Note [hoisted collectives]: the collectives HoistCollectives moves.
bool Hoisted(const ir::Instruction& inst) {
  return inst.opcode() == ir::Opcode::kReduceScatter || inst.opcode() == ir::Opcode::kAllGather;
}

std::vector<std::vector<int64_t>> Predecessors(
    const std::vector<ir::Instruction*>& original,
    const std::unordered_map<const ir::Instruction*, int64_t>& position) {
  std::vector<std::vector<int64_t>> preds(original.size());
  int64_t previous_collective = -1;
  for (size_t i = 0; i < original.size(); ++i) {
    if (ir::IsCollective(original[i]->opcode())) {
      if (previous_collective >= 0) preds[i].push_back(previous_collective);
      previous_collective = static_cast<int64_t>(i);
    }
    for (const ir::Instruction* op : original[i]->operands()) preds[i].push_back(position.at(op));
    // Keep the first occurrence of each predecessor, in operand order.
    std::vector<int64_t> unique;
    for (int64_t p : preds[i]) {
      if (std::find(unique.begin(), unique.end(), p) == unique.end()) unique.push_back(p);
    }
    preds[i] = std::move(unique);
  }
  return preds;
}

std::vector<ir::Instruction*> Instructions(
    const ir::Computation& computation,
    std::unordered_map<const ir::Instruction*, int64_t>& position) {
  std::vector<ir::Instruction*> original;
  for (const auto& inst : computation.instructions()) {
    position[inst.get()] = static_cast<int64_t>(original.size());
    original.push_back(inst.get());
  }
  return original;
}

// What MemoryGreedyOrder knows of the buffers: pinned[b], whether buffer b
// stays live the whole step (parameters and outputs: scheduling never frees
// them); reads[i], the distinct buffers instruction i reads; remaining[b],
// the readers of b not yet scheduled; allocates[i], the bytes of the buffers
// i defines.
struct BufferUse {
  std::vector<bool> pinned;
  std::vector<std::vector<int64_t>> reads;
  std::vector<int64_t> remaining, allocates;
};

BufferUse CountBufferUse(const analysis::LogicalBuffers& lb, const ir::Computation& computation,
                         const std::vector<ir::Instruction*>& original,
                         const std::unordered_map<const ir::Instruction*, int64_t>& position) {
  const int64_t n = computation.instruction_count();
  BufferUse use;
  std::vector<bool>& pinned = use.pinned;
  pinned.assign(lb.buffers.size(), false);
  for (size_t b = 0; b < lb.buffers.size(); ++b) {
    pinned[b] = lb.buffers[b].defining->opcode() == ir::Opcode::kParameter;
  }
  for (int64_t b : lb.leaf_buffers.at(computation.root())) pinned[b] = true;
  std::vector<std::vector<int64_t>>& reads = use.reads;
  reads.resize(n);
  use.remaining.assign(lb.buffers.size(), 0);
  use.allocates.assign(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (const ir::Instruction* op : original[i]->operands()) {
      for (int64_t b : lb.leaf_buffers.at(op)) reads[i].push_back(b);
    }
    std::sort(reads[i].begin(), reads[i].end());
    reads[i].erase(std::unique(reads[i].begin(), reads[i].end()), reads[i].end());
    for (int64_t b : reads[i]) ++use.remaining[b];
  }
  for (size_t b = 0; b < lb.buffers.size(); ++b) {
    // Outputs count when they are computed (they stay live from then on);
    // parameters are live from the start whatever the order.
    const ir::Instruction* def = lb.buffers[b].defining;
    if (def->opcode() != ir::Opcode::kParameter) {
      use.allocates[position.at(def)] += Aligned(lb.buffers[b].bytes);
    }
  }
  return use;
}

// Fills each instruction's successors; returns how many predecessors each
// waits for.
std::vector<int64_t> Successors(const std::vector<std::vector<int64_t>>& preds,
                                std::vector<std::vector<int64_t>>& successors) {
  std::vector<int64_t> pending(preds.size(), 0);
  for (size_t i = 0; i < preds.size(); ++i) {
    pending[i] = static_cast<int64_t>(preds[i].size());
    for (int64_t p : preds[i]) successors[p].push_back(static_cast<int64_t>(i));
  }
  return pending;
}

}  // namespace

std::vector<ir::Instruction*> MemoryGreedyOrder(const ir::Computation& computation) {
  const analysis::LogicalBuffers lb = analysis::ComputeLogicalBuffers(computation);
  const int64_t n = computation.instruction_count();
  std::unordered_map<const ir::Instruction*, int64_t> position;
  const std::vector<ir::Instruction*> original = Instructions(computation, position);

  BufferUse use = CountBufferUse(lb, computation, original, position);
  const std::vector<bool>& pinned = use.pinned;
  const std::vector<std::vector<int64_t>>& reads = use.reads;
  std::vector<int64_t>& remaining = use.remaining;
  const std::vector<int64_t>& allocates = use.allocates;

  std::vector<std::vector<int64_t>> successors(n);
  std::vector<int64_t> pending = Successors(Predecessors(original, position), successors);

  // Note [incremental greedy]: an instruction's net is what it allocates
  // less the buffers it reads last. The net of a waiting instruction only
  // falls, when another reader of one of its buffers runs and leaves it the
  // last: the ready set is kept ordered by (net, position) and updated then.
  // Rescanning the whole ready set each step was quadratic (gpt2-1558m:
  // 8.5 s of a 13.6 s compile, for thousands of ready optimizer updates).
  std::vector<std::vector<int64_t>> readers(lb.buffers.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t b : reads[i]) readers[b].push_back(i);
  }
  auto last_read_bytes = [&](int64_t b) { return pinned[b] ? 0 : Aligned(lb.buffers[b].bytes); };
  std::vector<int64_t> net(n, 0);
  std::vector<bool> scheduled(n, false), is_ready(n, false);
  // (deferred, net, position): the first is the best. Note [late recompute].
  using Key = std::tuple<bool, int64_t, int64_t>;
  const bool defer = DefersRecompute(computation);
  auto key = [&](int64_t i) {
    return Key{defer && net[i] > 0 && IsRecompute(*original[i]), net[i], i};
  };
  std::set<Key> ready;
  auto make_ready = [&](int64_t i) {
    net[i] = allocates[i];
    for (int64_t b : reads[i]) {
      if (remaining[b] == 1) net[i] -= last_read_bytes(b);
    }
    is_ready[i] = true;
    ready.insert(key(i));
  };
  std::vector<ir::Instruction*> order;
  order.reserve(n);
  auto schedule = [&](int64_t i) {
    order.push_back(original[i]);
    scheduled[i] = true;
    for (int64_t b : reads[i]) {
      if (--remaining[b] != 1 || last_read_bytes(b) == 0) continue;
      for (int64_t r : readers[b]) {
        if (scheduled[r] || !is_ready[r]) continue;
        ready.erase(key(r));
        net[r] -= last_read_bytes(b);
        ready.insert(key(r));
      }
    }
    for (int64_t s : successors[i]) {
      if (--pending[s] == 0) make_ready(s);
    }
  };
  // Parameters first, in their original order: they are the step's inputs.
  for (int64_t i = 0; i < n; ++i) {
    if (original[i]->opcode() == ir::Opcode::kParameter) schedule(i);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (pending[i] == 0 && original[i]->opcode() != ir::Opcode::kParameter && !is_ready[i]) {
      make_ready(i);
    }
  }
  while (!ready.empty()) {
    const int64_t best = std::get<2>(*ready.begin());
    ready.erase(ready.begin());
    is_ready[best] = false;
    schedule(best);
  }
  return order;
}

std::vector<ir::Instruction*> DepthFirstOrder(const ir::Computation& computation) {
  std::unordered_map<const ir::Instruction*, int64_t> position;
  const std::vector<ir::Instruction*> original = Instructions(computation, position);
  std::vector<std::vector<int64_t>> preds = Predecessors(original, position);
  const int64_t n = static_cast<int64_t>(original.size());
  // Note [late recompute]: a recomputation's subtree after the rest.
  if (DefersRecompute(computation)) {
    for (std::vector<int64_t>& p : preds) {
      std::stable_partition(p.begin(), p.end(),
                            [&](int64_t q) { return !IsRecompute(*original[q]); });
    }
  }
  std::vector<ir::Instruction*> order;
  order.reserve(n);
  std::vector<bool> done(n, false);
  for (int64_t i = 0; i < n; ++i) {
    if (original[i]->opcode() != ir::Opcode::kParameter) continue;
    order.push_back(original[i]);
    done[i] = true;
  }
  // Post-order from the root, then from whatever the root does not reach.
  std::vector<int64_t> starts = {position.at(computation.root())};
  for (int64_t i = 0; i < n; ++i) starts.push_back(i);
  std::vector<std::pair<int64_t, size_t>> stack;  // (instruction, next predecessor)
  std::vector<bool> on_stack(n, false);
  for (int64_t start : starts) {
    if (done[start]) continue;
    stack.push_back({start, 0});
    on_stack[start] = true;
    while (!stack.empty()) {
      auto& [inst, next] = stack.back();
      if (next < preds[inst].size()) {
        const int64_t p = preds[inst][next++];
        if (!done[p] && !on_stack[p]) {
          on_stack[p] = true;
          stack.push_back({p, 0});
        }
        continue;
      }
      done[inst] = true;
      order.push_back(original[inst]);
      stack.pop_back();
    }
  }
  return order;
}

int64_t PeakLiveBytesOf(const ir::Computation& computation,
                        const std::vector<ir::Instruction*>& order) {
  const analysis::LogicalBuffers lb = analysis::ComputeLogicalBuffers(computation);
  std::vector<const ir::Instruction*> const_order(order.begin(), order.end());
  return analysis::PeakLiveBytes(lb, analysis::ComputeLiveRanges(computation, lb, const_order));
}

std::vector<ir::Instruction*> HoistCollectives(const std::vector<ir::Instruction*>& order) {
  // The reduce-scatters and all-gathers in order, each with the collective
  // before it (null: none).
  std::deque<std::pair<ir::Instruction*, const ir::Instruction*>> pending;
  const ir::Instruction* previous = nullptr;
  for (ir::Instruction* inst : order) {
    if (!ir::IsCollective(inst->opcode())) continue;
    if (Hoisted(*inst)) pending.push_back({inst, previous});
    previous = inst;
  }
  if (pending.empty()) return order;
  std::vector<ir::Instruction*> hoisted;
  hoisted.reserve(order.size());
  std::unordered_set<const ir::Instruction*> placed;
  auto ready = [&](const std::pair<ir::Instruction*, const ir::Instruction*>& p) {
    const auto& ops = p.first->operands();
    return (p.second == nullptr || placed.contains(p.second)) &&
           std::all_of(ops.begin(), ops.end(),
                       [&](const ir::Instruction* op) { return placed.contains(op); });
  };
  auto place = [&](ir::Instruction* inst) {
    hoisted.push_back(inst);
    placed.insert(inst);
    while (!pending.empty() && ready(pending.front())) {
      hoisted.push_back(pending.front().first);
      placed.insert(pending.front().first);
      pending.pop_front();
    }
  };
  for (ir::Instruction* inst : order) {
    if (!Hoisted(*inst)) place(inst);
  }
  return hoisted;
}

StatusOr<bool> Schedule::Run(ir::Module& module) {
  bool changed = false;
  for (const auto& computation : module.computations()) {
    std::vector<ir::Instruction*> current;
    for (const auto& inst : computation->instructions()) current.push_back(inst.get());
    // Both orders are heuristics: take the better one, and only if it beats the old order.
    // Each order with its collectives hoisted (Note [hoisted collectives]).
    std::vector<ir::Instruction*> best = HoistCollectives(current);
    int64_t best_peak = PeakLiveBytesOf(*computation, best);
    for (auto* scheduler : {&MemoryGreedyOrder, &DepthFirstOrder}) {
      std::vector<ir::Instruction*> order = scheduler(*computation);
      if (order.size() != current.size()) {
        return Error("schedule: %{} has a dependency cycle", computation->name());
      }
      order = HoistCollectives(order);
      const int64_t peak = PeakLiveBytesOf(*computation, order);
      if (peak < best_peak) {
        best = std::move(order);
        best_peak = peak;
      }
    }
    if (best == current) continue;
    computation->ReorderInstructions(best);
    changed = true;
  }
  return changed;
}

}  // namespace gptc::passes
