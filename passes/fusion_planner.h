// The planner library of the fusion passes (passes/fusion.h): the grouping
// state (fusion_planner.cc) shared by the rules (horizontal_fusion.cc,
// cross_entropy_fusion.cc, attention_fusion.cc, gemm_fusion.cc,
// reduction_fusion.cc, loop_fusion.cc) and the materialization (fusion.cc).
#ifndef GPTC_PASSES_FUSION_PLANNER_H_
#define GPTC_PASSES_FUSION_PLANNER_H_

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/ir/module.h"

namespace gptc::passes::fusion_internal {

using InstSet = std::unordered_set<const ir::Instruction*>;

// Constants, iotas, broadcasts and elementwise ops computed from free ops
// alone (the causal mask `compare(iota, iota)`): copied into every group that
// uses them.
// Constants, iotas, broadcasts and elementwise ops of those: recomputed in
// every kernel that needs them rather than given a kernel of their own.
bool IsFree(const ir::Instruction& inst);
// Ops a loop kernel can compute: elementwise, select, compare, converts and
// layout changes (reshape, transpose, slice, pad, concatenate).
bool IsLoopOp(const ir::Instruction& inst);

// A gemm group's epilogue record as the gemm rule writes it while it takes
// each op (Note [gemm epilogue records] in compiler/analysis/gemm_epilogue.h):
// ir::GemmEpilogue with the entry values where the record has the fusion's
// operand and output numbers, which the materializer gives it (fusion.cc).
// Members: d, aux_out, bias_grad_out; values read from outside: the rest.
struct GemmEpilogueValues {
  const ir::Instruction* d = nullptr;
  const ir::Instruction* bias = nullptr;
  const ir::Instruction* residual = nullptr;
  ir::GemmActivation activation = ir::GemmActivation::kNone;
  const ir::Instruction* aux_out = nullptr;
  const ir::Instruction* aux_in = nullptr;
  const ir::Instruction* bias_grad_out = nullptr;
  const ir::Instruction* bias_grad_of = nullptr;
  bool transposed = false;
};

struct Group {
  ir::FusionKind kind = ir::FusionKind::kLoop;
  const ir::Instruction* hero = nullptr;  // names the fusion and gives its metadata
  InstSet members;
  bool live = true;
  // The first and last position of a member in the planner's order
  // (Note [reach within bounds]).
  int64_t first = 0, last = 0;
  // Overrides of the hero's name, metadata and role for horizontal groups
  // that belong to no layer (`parameters.bf16`, `optimizer.grad_norm`).
  std::string name;
  std::string metadata;
  std::optional<ir::Role> role;
  // kind=gemm: what the fusion's epilogue record will say.
  std::optional<GemmEpilogueValues> gemm_epilogue;
  // Known to lie on no cycle since the planner's epoch of this value (Note
  // [one member at a time]); -1: not known.
  int64_t convex_at = -1;
};

// How many instructions ahead the fusion pass's sweeps over the whole entry
// prefetch (PrefetchInstruction): on graphs whose IR outgrows the last-level
// cache (40k instructions in scripts/bench-fusion) a sweep would wait on
// memory at each instruction; where it fits, the prefetches cost next to
// nothing.
inline constexpr size_t kPrefetchAhead = 8;

// The first two cache lines of `inst`: the fields the sweeps read (the
// operand and user lists, the position, the opcode) and the shape.
inline void PrefetchInstruction(const ir::Instruction* inst) {
  __builtin_prefetch(inst);
  __builtin_prefetch(reinterpret_cast<const char*>(inst) + 64);
}

// Note [fusion groups]: every non-free instruction belongs to at most one
// group. A group is legal when contracting each group to one node leaves the
// entry acyclic; every way of growing a group goes through CreatesCycle.
class Planner {
 public:
  explicit Planner(ir::Computation* computation);

  ir::Computation* computation() const { return computation_; }
  const std::vector<ir::Instruction*>& order() const { return order_; }
  int64_t pos(const ir::Instruction* inst) const {
    int32_t i = find_pos(inst);
    assert(i >= 0 && "not an instruction the planner was built on");
    return i;
  }
  // pos(), or -1 for an instruction made after the planner (a fusion). The
  // planner's positions are the computation's numbers (NumberInstructions),
  // read in O(1) from the instruction; a stale number (an instruction
  // elsewhere, or made since) is told apart by order_.
  int32_t find_pos(const ir::Instruction* inst) const {
    int32_t i = inst->position();
    return i >= 0 && static_cast<size_t>(i) < order_.size() && order_[i] == inst ? i : -1;
  }
  // Sorts `v` into entry order, each position read once (a comparator
  // calling pos() reads two instructions per comparison, and the sorts of
  // whole groups are the pass's hottest).
  void SortByPosition(std::vector<const ir::Instruction*>& v) const;
  // IsFree, memoised for the instructions the planner was built on: the
  // recursive test is quadratic on long broadcast chains (gpt2-124m).
  bool IsFree(const ir::Instruction* inst) const;
  // The instructions of opcode `op`, in entry order: the rules that start
  // from one kind of op (dots, reduces, attention) visit those alone instead
  // of every instruction (a full scan of a large graph misses the caches at
  // every instruction).
  const std::vector<const ir::Instruction*>& WithOpcode(ir::Opcode op) const {
    return by_opcode_[static_cast<size_t>(op)];
  }
  // IsFree and group_of by position, for scans of the order that need not
  // touch the instructions.
  bool free_at(size_t i) const { return free_[i] != 0; }
  int group_at(size_t i) const { return group_of_[i]; }
  std::vector<Group>& groups() { return groups_; }
  // The positions of group `g`'s members, in entry order. A group that
  // fills most of its bounds is read off group_at(), reading no
  // instruction; iterating the hash set instead visits the IR in no memory
  // order (a cache miss at nearly every member of a large group).
  std::vector<int32_t> MemberPositions(int g) const;
  // Note [adjacency by position]: the non-free sources of position i's
  // operands (NonFreeSources of each operand, in operand order), and its
  // non-free users (NonFreeUsers, in entry order), as positions.
  std::span<const int32_t> sources_at(size_t i) const {
    return {sources_.data() + source_begin_[i], sources_.data() + source_begin_[i + 1]};
  }
  std::span<const int32_t> users_at(size_t i) const {
    return {users_.data() + user_begin_[i], users_.data() + user_begin_[i + 1]};
  }
  // The positions of position i's operands, in order, free ones included.
  std::span<const int32_t> operands_at(size_t i) const {
    return {operands_.data() + operand_begin_[i], operands_.data() + operand_begin_[i + 1]};
  }
  // The positions of the instructions reading position i directly, free
  // ones included, in entry order (once per operand that reads it): the
  // users the planner was built with.
  std::span<const int32_t> readers_at(size_t i) const {
    return {readers_.data() + reader_begin_[i], readers_.data() + reader_begin_[i + 1]};
  }
  // What the rules ask of an instruction, by position, so that growing a
  // group over tens of thousands of candidates reads none of them (Note
  // [adjacency by position]): the opcode; whether its role's phase is remat
  // (a recomputation, passes/remat.h); and a number for the dims,
  // the same for instructions of the same dims (-1: a tuple).
  ir::Opcode opcode_at(size_t i) const { return opcode_[i]; }
  bool remat_at(size_t i) const { return remat_[i] != 0; }
  int32_t dims_class_at(size_t i) const { return dims_class_[i]; }
  // The number dims_class_at() gives `dims`; -1 when no instruction has them.
  int32_t FindDimsClass(const std::vector<int64_t>& dims) const;
  // The instructions of the update phase (the ones FuseOptimizer groups), in entry order: found in the constructor's pass
  // rather than in a pass of their own over the whole entry.
  const std::vector<const ir::Instruction*>& optimizer_ops() const { return optimizer_ops_; }
  // The group holding `inst`, or -1.
  int group_of(const ir::Instruction* inst) const;

  // Not in a group yet, not free, and an op some kernel may contain.
  bool Claimable(const ir::Instruction* inst) const;
  bool ClaimableAt(size_t i) const;

  int NewGroup(ir::FusionKind kind, const ir::Instruction* hero, const InstSet& members);
  // Adds `inst` (the instruction at position `i`) to group `g` unless that
  // would make a cycle.
  bool TryAdd(int g, const ir::Instruction* inst);
  bool TryAddAt(int g, int32_t i);
  // Moves group `b` into group `a` unless that would make a cycle.
  bool TryMerge(int a, int b);
  // Shrinks group `g` back to `members` (a subset it grew from, which stays
  // acyclic): the others are claimable again.
  void ShrinkTo(int g, const InstSet& members);
  // Whether the set `s` as one node (with every existing group as one node)
  // lies on a cycle: some path leaves `s` and comes back.
  bool CreatesCycle(const InstSet& s) const;
  // Drops members of `s` until it is convex: members upstream of a value
  // that depends on `s` and that `s` depends on leave the set.
  void MakeConvex(InstSet& s) const;

  // The planner's work so far: the cycle and convexity checks and the nodes
  // they visit, and the candidates the growing rules examine. Tests bound it
  // (Note [reach within bounds]); `Count` adds to it.
  int64_t work() const { return work_; }
  void Count(int64_t n) const { work_ += n; }

  // The non-free sources of an operand: itself, or through free ops their operands.
  void NonFreeSources(const ir::Instruction* inst, std::vector<const ir::Instruction*>& out) const;
  // The non-free users of `inst`, looking through free ops.
  void NonFreeUsers(const ir::Instruction* inst, std::vector<const ir::Instruction*>& out) const;

 private:
  // Everything reachable from `s` by leaving it (users, or operands when
  // `backward`), whole groups at a time; stops at members of `s`. Returns
  // whether a member of `s` was reached again. Nodes that cannot lead back
  // to `s` are not followed (Note [reach within bounds]): `reached` holds
  // the rest.
  bool Reach(const InstSet& s, bool backward, InstSet* reached) const;
  // The walk of Reach from the positions on `stack`, between positions
  // `first` and `last`, stopping at positions where `in_target` holds;
  // whether it reached one. With `reached`, walks on and appends the
  // positions visited.
  template <typename InTarget>
  bool Walk(std::vector<int32_t>& stack, const InTarget& in_target, int64_t first, int64_t last,
            bool backward, std::vector<int32_t>* reached) const;
  // The non-free users of position `x`, or with `backward` the non-free
  // sources of its operands: the next steps of a walk.
  std::span<const int32_t> Neighbors(int32_t x, bool backward) const {
    return backward ? sources_at(x) : users_at(x);
  }
  // Calls `f` with the position of each member of group `g`: by position
  // when the members fill a quarter of the group's bounds or more (reading
  // no instruction), else in the hash set's order.
  template <typename F>
  void ForEachMember(int g, const F& f) const;
  // Note [adjacency by position]: appends the operands and sources of
  // position `i`, `inst` (in the constructor's pass, once its operands'
  // entries are known); and, after that pass, the users and readers.
  void AddSources(int32_t i, const ir::Instruction& inst);
  void AddUsers();
  // Note [one member at a time]: whether adding the instructions at
  // positions `joining` (one instruction, or the members of convex group
  // `joining_group`; -1 for the former) to convex group `g` makes a cycle,
  // walking from `joining` alone.
  bool JoinCreatesCycle(int g, std::span<const int32_t> joining, int joining_group) const;
  // Sets group `g`'s first and last member positions from its members.
  void SetBounds(int g);

  ir::Computation* computation_;
  std::vector<ir::Instruction*> order_;
  std::array<std::vector<const ir::Instruction*>, ir::kNumOpcodes> by_opcode_;  // WithOpcode()
  std::vector<const ir::Instruction*> optimizer_ops_;
  std::vector<ir::Opcode> opcode_;
  std::vector<char> remat_;
  std::vector<int32_t> dims_class_;
  std::map<std::vector<int64_t>, int32_t> dims_classes_;
  // Indexed by position in order_ (an instruction's position()).
  std::vector<char> free_;
  std::vector<int> group_of_;  // -1: in no group
  // sources_at(), operands_at(), readers_at() and users_at(): position i's
  // entries are values[begin[i]] to values[begin[i + 1] - 1].
  std::vector<int32_t> source_begin_, sources_;
  std::vector<int32_t> operand_begin_, operands_;
  std::vector<int32_t> reader_begin_, readers_;
  std::vector<int32_t> user_begin_, users_;
  // Walk's visited marks by position: a position is visited in the current
  // walk when it holds walk_stamp_ (no set to build and free per walk).
  mutable std::vector<uint32_t> visited_at_;
  mutable uint32_t walk_stamp_ = 0;
  std::vector<Group> groups_;
  mutable int64_t work_ = 0;
  // Bumped by a group made of several members unchecked, which may put
  // other groups on a cycle: convexity known before it is stale.
  int64_t epoch_ = 0;
};

// Whether every use of `inst` is by a member of `s`, looking through free
// ops (and not when it is the root).
bool AllUsesIn(const Planner& p, const ir::Instruction* inst, const InstSet& s);

// The single user of `inst`, or nullptr (also for the root).
const ir::Instruction* SingleUser(const Planner& p, const ir::Instruction* inst);

// Grows `s`, until nothing joins, with the non-free sources of its members'
// operands that `accept` takes and that only members of `s` read: the
// producers a group owns (the attention kernels' q, k, v chains, the
// cross-entropy backward's masks).
template <typename Accept>
void AddOwnedSources(const Planner& p, InstSet& s, const Accept& accept) {
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<const ir::Instruction*> sources;
    for (const ir::Instruction* m : s) {
      for (const ir::Instruction* op : m->operands()) p.NonFreeSources(op, sources);
    }
    for (const ir::Instruction* x : sources) {
      if (s.contains(x) || !accept(x) || !AllUsesIn(p, x, s)) continue;
      s.insert(x);
      changed = true;
    }
  }
}

}  // namespace gptc::passes::fusion_internal

#endif  // GPTC_PASSES_FUSION_PLANNER_H_
