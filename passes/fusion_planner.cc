#include "passes/fusion_planner.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace gptc::passes::fusion_internal {

using ir::Instruction;
using ir::Opcode;

namespace {

// Whether `inst` is computed from constants and iotas alone.
bool IsSourceless(const Instruction& inst) {
  Opcode op = inst.opcode();
  if (op == Opcode::kConstant || op == Opcode::kIota) return true;
  if (op != Opcode::kBroadcast && !ir::IsElementwise(op)) return false;
  if (inst.shape().is_tuple() || inst.operand_count() == 0) return false;
  for (const Instruction* x : inst.operands()) {
    if (!IsSourceless(*x)) return false;
  }
  return true;
}

}  // namespace

bool IsFree(const Instruction& inst) {
  Opcode op = inst.opcode();
  if (op == Opcode::kConstant || op == Opcode::kIota || op == Opcode::kBroadcast) return true;
  return ir::IsElementwise(op) && IsSourceless(inst);
}

bool IsLoopOp(const Instruction& inst) {
  if (inst.shape().is_tuple()) return false;
  const Opcode op = inst.opcode();
  return ir::IsLayout(op) || op == Opcode::kIota || ir::IsElementwise(op);
}

Planner::Planner(ir::Computation* computation) : computation_(computation) {
  // Operands precede users, so one pass in order decides IsSourceless from
  // the operands' answers, and the sources (Note [adjacency by position])
  // from the operands' entries.
  computation->NumberInstructions();
  size_t n = computation->instructions().size();
  order_.reserve(n);
  free_.assign(n, 0);
  group_of_.assign(n, -1);
  source_begin_.assign(n + 1, 0);
  sources_.reserve(n * 2);
  operand_begin_.assign(n + 1, 0);
  operands_.reserve(n * 2);
  opcode_.resize(n);
  remat_.assign(n, 0);
  dims_class_.assign(n, -1);
  std::vector<char> sourceless(n, 0);
  const auto& insts = computation->instructions();
  const std::vector<int64_t>* last_dims = nullptr;  // most instructions have the last one's
  for (const auto& inst : insts) {
    auto i = static_cast<int32_t>(order_.size());
    if (i + kPrefetchAhead < n) PrefetchInstruction(insts[i + kPrefetchAhead].get());
    // The dims of an instruction whose shape the line above fetched.
    if (i + kPrefetchAhead / 2 < n) {
      __builtin_prefetch(insts[i + kPrefetchAhead / 2]->shape().dims().data());
    }
    order_.push_back(inst.get());
    Opcode op = inst->opcode();
    opcode_[i] = op;
    by_opcode_[static_cast<size_t>(op)].push_back(inst.get());
    const ir::Phase phase = inst->role().phase;
    if (phase == ir::Phase::kUpdate) optimizer_ops_.push_back(inst.get());
    remat_[i] = phase == ir::Phase::kRemat;
    const bool tuple = inst->shape().is_tuple();
    if (!tuple) {
      const std::vector<int64_t>& dims = inst->shape().dims();
      if (last_dims != nullptr && dims == *last_dims) {
        dims_class_[i] = dims_class_[i - 1];
      } else {
        auto [it, added] =
            dims_classes_.try_emplace(dims, static_cast<int32_t>(dims_classes_.size()));
        dims_class_[i] = it->second;
      }
      last_dims = &dims;
    } else {
      last_dims = nullptr;
    }
    bool s = op == Opcode::kConstant || op == Opcode::kIota;
    if (!s && (op == Opcode::kBroadcast || ir::IsElementwise(op)) && !tuple &&
        inst->operand_count() > 0) {
      s = std::all_of(inst->operands().begin(), inst->operands().end(),
                      [&](const Instruction* x) { return sourceless[pos(x)] != 0; });
    }
    sourceless[i] = s;
    free_[i] = op == Opcode::kConstant || op == Opcode::kIota || op == Opcode::kBroadcast ||
               (ir::IsElementwise(op) && s);
    AddSources(i, *inst);
  }
  source_begin_[n] = static_cast<int32_t>(sources_.size());
  operand_begin_[n] = static_cast<int32_t>(operands_.size());
  AddUsers();
}

// Note [adjacency by position]: the cycle checks and the row growth walk the
// graph through free ops (Neighbors); reading each step's operand or user
// list, and then the position of every instruction on it, would miss the
// caches at nearly every step on graphs whose IR outgrows the last-level
// cache (docs/PERFORMANCE.md, "Compile time"). The planner's graph does not change while
// it plans, so it is stored once, flat, by position: the walks read 4 bytes
// per step from arrays that stay in cache. A free op's entries are the
// non-free sources it stands for (only broadcasts of a non-free value have
// any), so a non-free op's sources are its operands with each free one
// replaced by those; the users are the same edges reversed.
void Planner::AddSources(int32_t i, const Instruction& inst) {
  source_begin_[i] = static_cast<int32_t>(sources_.size());
  operand_begin_[i] = static_cast<int32_t>(operands_.size());
  for (const Instruction* op : inst.operands()) {
    int32_t j = find_pos(op);
    assert(j >= 0 && j < i && "an operand outside the planner's computation, or after its user");
    if (j < 0 || j >= i) continue;
    operands_.push_back(j);
    if (free_[j] == 0) {
      sources_.push_back(j);
      continue;
    }
    // The free operand's entries, copied one value at a time (the vector
    // may move as it grows).
    for (int32_t k = source_begin_[j]; k < source_begin_[j + 1]; ++k) {
      int32_t source = sources_[k];
      sources_.push_back(source);
    }
  }
}

namespace {

// The edges i -> values[begin[i]..begin[i + 1]) of the positions `from`
// admits, reversed into `out_begin` and `out` (the same layout): counted
// first, then placed in position order.
template <typename From>
void ReverseEdges(const std::vector<int32_t>& begin, const std::vector<int32_t>& values,
                  const From& from, std::vector<int32_t>& out_begin, std::vector<int32_t>& out) {
  const size_t n = begin.size() - 1;
  out_begin.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!from(i)) continue;
    for (int32_t k = begin[i]; k < begin[i + 1]; ++k) ++out_begin[values[k] + 1];
  }
  for (size_t i = 0; i < n; ++i) out_begin[i + 1] += out_begin[i];
  out.resize(out_begin[n]);
  std::vector<int32_t> next(out_begin.begin(), out_begin.end() - 1);
  for (size_t i = 0; i < n; ++i) {
    if (!from(i)) continue;
    for (int32_t k = begin[i]; k < begin[i + 1]; ++k)
      out[next[values[k]]++] = static_cast<int32_t>(i);
  }
}

}  // namespace

void Planner::AddUsers() {
  // Every non-free op is a user of each of its sources, as often as it reads
  // it (NonFreeUsers lists a user once per path through free ops, as
  // NonFreeSources does the sources); the readers are the operand edges
  // reversed.
  ReverseEdges(
      source_begin_, sources_, [&](size_t i) { return free_[i] == 0; }, user_begin_, users_);
  ReverseEdges(
      operand_begin_, operands_, [](size_t) { return true; }, reader_begin_, readers_);
  visited_at_.assign(order_.size(), 0);
}

bool Planner::IsFree(const Instruction* inst) const {
  int32_t i = find_pos(inst);
  return i >= 0 ? free_[i] != 0 : passes::fusion_internal::IsFree(*inst);
}

int Planner::group_of(const Instruction* inst) const {
  int32_t i = find_pos(inst);
  return i >= 0 ? group_of_[i] : -1;
}

namespace {

// Ops no kernel of ours contains.
bool ClaimableOpcode(Opcode op) {
  switch (op) {
    case Opcode::kParameter:
    case Opcode::kGather:
    case Opcode::kScatterAdd:
    case Opcode::kAllReduce:
    case Opcode::kReduceScatter:
    case Opcode::kAllGather:
    case Opcode::kTuple:
    case Opcode::kGetTupleElement:
    case Opcode::kFusion:
      return false;
    default:
      return true;
  }
}

}  // namespace

bool Planner::Claimable(const Instruction* inst) const {
  int32_t i = find_pos(inst);
  if (i >= 0) return ClaimableAt(i);
  return !passes::fusion_internal::IsFree(*inst) && !inst->shape().is_tuple() &&
         ClaimableOpcode(inst->opcode());
}

bool Planner::ClaimableAt(size_t i) const {
  // dims_class_ is -1 for tuples.
  return group_of_[i] < 0 && free_[i] == 0 && dims_class_[i] >= 0 && ClaimableOpcode(opcode_[i]);
}

int32_t Planner::FindDimsClass(const std::vector<int64_t>& dims) const {
  auto it = dims_classes_.find(dims);
  return it == dims_classes_.end() ? -1 : it->second;
}

int Planner::NewGroup(ir::FusionKind kind, const Instruction* hero, const InstSet& members) {
  int g = static_cast<int>(groups_.size());
  groups_.push_back(Group{kind, hero, members, true});
  if (members.size() > 1) ++epoch_;  // unchecked: neither it nor the others are known convex
  groups_.back().convex_at = members.size() <= 1 ? epoch_ : -1;
  for (const Instruction* m : members) group_of_[pos(m)] = g;
  SetBounds(g);
  return g;
}

template <typename F>
void Planner::ForEachMember(int g, const F& f) const {
  const Group& group = groups_[g];
  if (static_cast<int64_t>(group.members.size()) * 4 >= group.last - group.first + 1) {
    for (int64_t i = group.first; i <= group.last; ++i) {
      if (group_of_[i] == g) f(static_cast<int32_t>(i));
    }
  } else {
    for (const Instruction* m : group.members) f(static_cast<int32_t>(pos(m)));
  }
}

std::vector<int32_t> Planner::MemberPositions(int g) const {
  std::vector<int32_t> out;
  out.reserve(groups_[g].members.size());
  ForEachMember(g, [&](int32_t m) { out.push_back(m); });
  assert(out.size() == groups_[g].members.size() && "group_of_ and members disagree");
  if (!std::is_sorted(out.begin(), out.end())) std::sort(out.begin(), out.end());
  return out;
}

void Planner::SetBounds(int g) {
  Group& group = groups_[g];
  group.first = static_cast<int64_t>(order_.size());
  group.last = -1;
  for (const Instruction* m : group.members) {
    group.first = std::min(group.first, pos(m));
    group.last = std::max(group.last, pos(m));
  }
}

// Note [one member at a time]: a group that lies on no cycle (convex) takes
// one more instruction, or another convex group, without a cycle unless a
// path leaves the newcomers and comes back to the group, or leaves the group
// and comes to the newcomers: a walk from the newcomers alone, forward and
// backward. The whole
// set's walk starts from every member, and growing a group of n one member
// at a time was quadratic (docs/PERFORMANCE.md, "Compile time").
bool Planner::JoinCreatesCycle(int g, std::span<const int32_t> joining, int joining_group) const {
  const Group& group = groups_[g];
  // Membership through group_of_, a flat lookup, not the groups' hash sets:
  // a chain of 40k row-local ops grows one group that large.
  const int32_t joining_pos = joining.front();
  auto in_target = [&](int32_t x) {
    int h = group_of_[x];
    if (h == g) return true;
    return joining_group >= 0 ? h == joining_group : x == joining_pos;
  };
  int64_t first = group.first, last = group.last;
  for (int32_t x : joining) {
    first = std::min<int64_t>(first, x);
    last = std::max<int64_t>(last, x);
  }
  work_ += static_cast<int64_t>(joining.size());
  std::vector<int32_t> stack;
  for (bool backward : {false, true}) {
    stack.clear();
    for (int32_t x : joining) {
      std::span<const int32_t> next = Neighbors(x, backward);
      stack.insert(stack.end(), next.begin(), next.end());
    }
    std::erase_if(stack, in_target);
    if (Walk(stack, in_target, first, last, backward, nullptr)) return true;
  }
  return false;
}

bool Planner::TryAdd(int g, const Instruction* inst) {
  return TryAddAt(g, static_cast<int32_t>(pos(inst)));
}

bool Planner::TryAddAt(int g, int32_t i) {
  const Instruction* inst = order_[i];
  if (groups_[g].convex_at == epoch_) {
    ++work_;
    if (JoinCreatesCycle(g, {&i, 1}, -1)) return false;
  } else {
    InstSet s = groups_[g].members;
    s.insert(inst);
    if (CreatesCycle(s)) return false;
    groups_[g].convex_at = epoch_;
  }
  groups_[g].members.insert(inst);
  group_of_[i] = g;
  groups_[g].first = std::min<int64_t>(groups_[g].first, i);
  groups_[g].last = std::max<int64_t>(groups_[g].last, i);
  return true;
}

void Planner::ShrinkTo(int g, const InstSet& members) {
  for (const Instruction* m : groups_[g].members) {
    if (!members.contains(m)) group_of_[pos(m)] = -1;
  }
  groups_[g].members = members;
  groups_[g].convex_at = -1;
  SetBounds(g);
}

bool Planner::TryMerge(int a, int b) {
  if (a == b) return true;
  if (groups_[a].convex_at == epoch_ && groups_[b].convex_at == epoch_) {
    ++work_;
    std::vector<int32_t> joining;
    joining.reserve(groups_[b].members.size());
    ForEachMember(b, [&](int32_t m) { joining.push_back(m); });
    if (JoinCreatesCycle(a, joining, b)) return false;
    groups_[a].members.insert(groups_[b].members.begin(), groups_[b].members.end());
  } else {
    InstSet s = groups_[a].members;
    s.insert(groups_[b].members.begin(), groups_[b].members.end());
    if (CreatesCycle(s)) return false;
    groups_[a].members = std::move(s);
  }
  for (const Instruction* m : groups_[b].members) group_of_[pos(m)] = a;
  groups_[a].convex_at = epoch_;
  groups_[a].first = std::min(groups_[a].first, groups_[b].first);
  groups_[a].last = std::max(groups_[a].last, groups_[b].last);
  groups_[b].members.clear();
  groups_[b].live = false;
  return true;
}

// Note [reach within bounds]: the order is topological, so a path only
// climbs positions (forward) or descends them (backward). Reaching `s` again
// forward needs a node before s's last member: an ungrouped node after it,
// or a group whose first member is after it, cannot lead back, and neither
// can it lie between `s` and `s` (MakeConvex). Backward, the mirror image.
// Without the bound every check walked the rest of the graph: the fusion
// pass was quadratic in the graph's size (docs/PERFORMANCE.md, "Compile
// time").
bool Planner::Reach(const InstSet& s, bool backward, InstSet* reached) const {
  ++work_;
  work_ += static_cast<int64_t>(s.size());  // every member's neighbours start the walk
  int64_t first = static_cast<int64_t>(order_.size()), last = -1;
  for (const Instruction* m : s) {
    first = std::min(first, pos(m));
    last = std::max(last, pos(m));
  }
  std::vector<int32_t> stack;
  for (const Instruction* m : s) {
    std::span<const int32_t> next = Neighbors(static_cast<int32_t>(pos(m)), backward);
    stack.insert(stack.end(), next.begin(), next.end());
  }
  auto in_s = [&](int32_t x) { return s.contains(order_[x]); };
  std::erase_if(stack, in_s);
  if (reached == nullptr) return Walk(stack, in_s, first, last, backward, nullptr);
  std::vector<int32_t> visited;
  bool cycle = Walk(stack, in_s, first, last, backward, &visited);
  reached->clear();
  for (int32_t x : visited) reached->insert(order_[x]);
  return cycle;
}

template <typename InTarget>
bool Planner::Walk(std::vector<int32_t>& stack, const InTarget& in_target, int64_t first,
                   int64_t last, bool backward, std::vector<int32_t>* reached) const {
  auto beyond = [&](int32_t x) {
    int g = group_of_[x];
    if (backward) return (g >= 0 ? groups_[g].last : x) < first;
    return (g >= 0 ? groups_[g].first : x) > last;
  };
  if (++walk_stamp_ == 0) {  // wrapped: marks of 2^32 walks ago would look current
    std::fill(visited_at_.begin(), visited_at_.end(), 0);
    walk_stamp_ = 1;
  }
  auto visit = [&](int32_t x) {
    if (visited_at_[x] == walk_stamp_) return false;
    visited_at_[x] = walk_stamp_;
    if (reached != nullptr) reached->push_back(x);
    return true;
  };
  auto push_neighbors = [&](int32_t x) {
    std::span<const int32_t> next = Neighbors(x, backward);
    stack.insert(stack.end(), next.begin(), next.end());
  };
  bool cycle = false;
  while (!stack.empty()) {
    int32_t x = stack.back();
    stack.pop_back();
    if (in_target(x)) {
      cycle = true;
      if (reached == nullptr) return true;
      continue;
    }
    if (beyond(x) || !visit(x)) continue;
    ++work_;
    // A group runs as one kernel: reaching any member reaches all of them.
    int g = group_of_[x];
    if (g >= 0) {
      ForEachMember(g, [&](int32_t m) {
        if (visit(m) || m == x) push_neighbors(m);
      });
    } else {
      push_neighbors(x);
    }
  }
  return cycle;
}

bool Planner::CreatesCycle(const InstSet& s) const { return Reach(s, false, nullptr); }

void Planner::MakeConvex(InstSet& s) const {
  for (int round = 0; round < 16 && !s.empty(); ++round) {
    InstSet down, up;
    Reach(s, /*backward=*/false, &down);
    Reach(s, /*backward=*/true, &up);
    std::vector<const Instruction*> between;
    for (const Instruction* x : down) {
      if (up.contains(x)) between.push_back(x);
    }
    if (between.empty()) return;
    // Members upstream of a between value leave; the downstream part stays.
    InstSet seen;
    while (!between.empty()) {
      const Instruction* x = between.back();
      between.pop_back();
      if (!seen.insert(x).second) continue;
      s.erase(x);
      for (const Instruction* op : x->operands()) between.push_back(op);
    }
  }
}

void Planner::NonFreeSources(const Instruction* inst, std::vector<const Instruction*>& out) const {
  if (!IsFree(inst)) {
    out.push_back(inst);
    return;
  }
  for (const Instruction* op : inst->operands()) NonFreeSources(op, out);
}

void Planner::SortByPosition(std::vector<const Instruction*>& v) const {
  std::vector<std::pair<int64_t, const Instruction*>> keyed;
  keyed.reserve(v.size());
  for (const Instruction* inst : v) keyed.emplace_back(pos(inst), inst);
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < v.size(); ++i) v[i] = keyed[i].second;
}

void Planner::NonFreeUsers(const Instruction* inst, std::vector<const Instruction*>& out) const {
  for (const Instruction* u : inst->users()) {
    if (IsFree(u)) {
      NonFreeUsers(u, out);
    } else {
      out.push_back(u);
    }
  }
}

// Whether every use of `inst` is by a member of `s`, looking through free ops.
bool AllUsesIn(const Planner& p, const ir::Instruction* inst, const InstSet& s) {
  std::vector<const ir::Instruction*> users;
  p.NonFreeUsers(inst, users);
  if (p.computation()->root() == inst) return false;
  return std::all_of(users.begin(), users.end(), [&](auto* u) { return s.contains(u); });
}

// The single user of `inst`, or nullptr.
const ir::Instruction* SingleUser(const Planner& p, const ir::Instruction* inst) {
  if (inst->users().size() != 1 || p.computation()->root() == inst) return nullptr;
  return inst->users().front();
}

}  // namespace gptc::passes::fusion_internal
