#include "passes/remat.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gptc::passes {

using ir::Instruction;
using ir::Opcode;

std::string_view RematPolicyName(RematPolicy policy) {
  switch (policy) {
    case RematPolicy::kNone:
      return "none";
    case RematPolicy::kDots:
      return "dots";
    case RematPolicy::kWide:
      return "wide";
    case RematPolicy::kBlock:
      return "block";
    case RematPolicy::kAuto:
      return "auto";
  }
  return "?";
}

std::optional<RematPolicy> ParseRematPolicy(std::string_view name) {
  for (RematPolicy p : {RematPolicy::kNone, RematPolicy::kDots, RematPolicy::kWide,
                        RematPolicy::kBlock, RematPolicy::kAuto}) {
    if (name == RematPolicyName(p)) return p;
  }
  return std::nullopt;
}

StatusOr<int64_t> ParseByteSize(std::string_view text) {
  size_t split = 0;
  while (split < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[split])) || text[split] == '.')) {
    ++split;
  }
  double number = 0;
  std::string digits(text.substr(0, split));
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  if (split == 0 || ec != std::errc() || end != digits.data() + digits.size()) {
    return Error("bad byte size '{}' (expected e.g. 20GiB, 512MiB, 1.5GB or a byte count)", text);
  }
  std::string unit;
  for (char c : text.substr(split)) unit += static_cast<char>(std::tolower(c));
  static const std::map<std::string, double, std::less<>> kUnits = {{"", 1},
                                                                    {"b", 1},
                                                                    {"k", 1024.0},
                                                                    {"kib", 1024.0},
                                                                    {"m", 1 << 20},
                                                                    {"mib", 1 << 20},
                                                                    {"g", 1 << 30},
                                                                    {"gib", 1 << 30},
                                                                    {"t", 1099511627776.0},
                                                                    {"tib", 1099511627776.0},
                                                                    {"kb", 1e3},
                                                                    {"mb", 1e6},
                                                                    {"gb", 1e9},
                                                                    {"tb", 1e12}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) {
    return Error("bad byte size '{}': unknown unit '{}' (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                 text, unit);
  }
  // No card holds a PiB; past it the count would also overflow int64.
  const double bytes = number * it->second;
  if (!(bytes <= static_cast<double>(int64_t{1} << 50))) {
    return Error("byte size '{}' is more than 1 PiB: no GPU holds that much", text);
  }
  return static_cast<int64_t>(std::llround(bytes));
}

namespace {

enum class Phase { kForward, kBackward, kOptimizer };

// Which part of the train step built `inst`, by its role (see the header):
// the parameter casts and values without a phase count as forward.
Phase PhaseOf(const Instruction& inst) {
  const ir::Role role = inst.role();
  if (role.backward()) return Phase::kBackward;
  if (role.optimizer()) return Phase::kOptimizer;
  return Phase::kForward;
}

// A backward instruction other than the root (the root only returns values).
bool IsBackwardUser(const Instruction& user) {
  return PhaseOf(user) == Phase::kBackward && user.parent()->root() != &user;
}

// The policy of each forward value: its block's, or for the values outside
// the blocks the last block's (see the header).
class PolicyOf {
 public:
  PolicyOf(RematPolicy uniform, const std::vector<RematPolicy>& layers)
      : uniform_(uniform), layers_(layers) {}
  RematPolicy operator()(const Instruction& inst) const {
    if (layers_.empty()) return uniform_;
    const int32_t layer = inst.role().layer;
    return layer >= 0 && layer < static_cast<int32_t>(layers_.size()) ? layers_[layer]
                                                                      : layers_.back();
  }
  bool Any(RematPolicy p) const {
    return layers_.empty() ? uniform_ == p
                           : std::find(layers_.begin(), layers_.end(), p) != layers_.end();
  }

 private:
  RematPolicy uniform_;
  const std::vector<RematPolicy>& layers_;
};

// The block boundaries: the forward data values crossing a layer boundary
// (a block's input, read by its first ops, and its output, read by the next
// block or the head), each with a reader in the other layer. Constants, iotas
// and their broadcasts are not data (CSE shares them between layers);
// parameters are inputs.
template <typename Fn>
void ForEachBoundary(const ir::Computation& entry, Fn&& fn) {
  std::unordered_set<const Instruction*> data;
  for (const auto& inst : entry.instructions()) {
    if (PhaseOf(*inst) != Phase::kForward) continue;
    bool reads_data = inst->opcode() == Opcode::kParameter;
    const int32_t layer = inst->role().layer;
    for (const Instruction* op : inst->operands()) {
      if (!data.contains(op)) continue;
      reads_data = true;
      if (op->role().layer != layer && op->opcode() != Opcode::kParameter) fn(*op, *inst);
    }
    if (reads_data) data.insert(inst.get());
  }
}

// Keeps the boundaries where the block on either side recomputes.
void AddBlockBoundaries(const ir::Computation& entry, const PolicyOf& policy_of,
                        std::unordered_set<const Instruction*>& kept) {
  ForEachBoundary(entry, [&](const Instruction& op, const Instruction& reader) {
    if (policy_of(op) != RematPolicy::kNone || policy_of(reader) != RematPolicy::kNone) {
      kept.insert(&op);
    }
  });
}

// The elements of each layer's widest boundary value (its residual stream),
// by layer + 1 (the head and embeddings are layer -1).
std::unordered_map<int32_t, int64_t> ResidualElements(const ir::Computation& entry) {
  std::unordered_map<int32_t, int64_t> widest;
  ForEachBoundary(entry, [&](const Instruction& op, const Instruction& reader) {
    for (int32_t layer : {op.role().layer, reader.role().layer}) {
      int64_t& w = widest[layer + 1];
      w = std::max(w, op.shape().num_elements());
    }
  });
  return widest;
}

// Note [cheap recomputation]: a saved elementwise value whose elementwise
// cone reads a single other saved value `y` of its shape and no more bytes
// (the GELU's x*x, tanh(...), 1 + tanh, 0.5 * x: all functions of the saved
// pre-activation x) is never kept, under every policy: the backward
// recomputes it from `y`, which it reads anyway, so saved bytes and memory
// traffic only fall (four f32 [B, T, 4C] tensors per GPT-2 layer) for a few
// flops. The cone stops at saved values that are not recomputed themselves;
// when it then reads several values, it is tried again stopping at values
// narrower than the recomputed one too (a bf16 copy: under Note [bf16 GELU
// epilogue] the GELU reads f32(x.bf16), and its intermediates are recomputed
// from x.bf16, the aux of the gemm epilogues, where the whole cone reaches
// the dot and the bias). Failing both, it is tried a third time reading
// through broadcasts of values at least 8x smaller too: a layer norm's x-hat
// = (x - mean) * rstd is then recomputed from x - mean (and x - mean from x,
// where x is saved anyway) with the per-row rstd, so the backward keeps one
// full-size value of each layer norm instead of two (gpt2-124m at batch 16:
// 1.1 GiB less). The set grows to a fixed point (tanh(x + x*x*x) once x*x is
// recomputed).

// Whether a forward value is read by the backward.
bool IsSaved(const Instruction& v) {
  for (const Instruction* user : v.users()) {
    if (IsBackwardUser(*user)) return true;
  }
  return false;
}

// Whether `x`, in the cone of `v`, broadcasts a value at least 8x smaller
// (a layer norm's per-row rstd to x - mean): the clone broadcasts it again and
// reads the small value, not a full-size copy (Note [cheap recomputation]).
bool IsNarrowBroadcast(const Instruction& x, const Instruction& v) {
  if (x.opcode() != Opcode::kBroadcast || &x == &v || PhaseOf(x) != Phase::kForward) return false;
  if (x.shape().dims() != v.shape().dims()) return false;
  const ir::Shape& source = x.operand(0)->shape();
  return source.rank() < x.shape().rank() && 8 * source.num_elements() <= x.shape().num_elements();
}

// How far the cone of a cheaply recomputed value reaches, tried in this
// order (Note [cheap recomputation]).
enum class Cone {
  kWhole,             // through every elementwise op of v's shape
  kStopNarrower,      // not through values narrower than v (a bf16 copy)
  kNarrowBroadcasts,  // kStopNarrower, reading broadcasts of small values too
};

// The single value that the elementwise cone of `v` reads (looking through
// constants, iotas, broadcast scalars and the values in `recomputed`), or
// null when there are several.
const Instruction* SingleSource(const Instruction* v,
                                const std::unordered_set<const Instruction*>& recomputed, Cone mode,
                                std::vector<const Instruction*>* cone = nullptr) {
  const bool stop_narrower = mode != Cone::kWhole;
  const Instruction* source = nullptr;
  std::vector<const Instruction*> stack = {v};
  std::unordered_set<const Instruction*> seen;
  while (!stack.empty()) {
    const Instruction* x = stack.back();
    stack.pop_back();
    if (!seen.insert(x).second) continue;
    const Opcode o = x->opcode();
    if (o == Opcode::kConstant || o == Opcode::kIota) continue;
    if (o == Opcode::kBroadcast && x->operand(0)->shape().rank() == 0 &&
        x->operand(0)->opcode() == Opcode::kConstant) {
      continue;
    }
    if (mode == Cone::kNarrowBroadcasts && IsNarrowBroadcast(*x, *v)) {
      if (cone != nullptr) cone->push_back(x);
      continue;
    }
    bool expand =
        ir::IsElementwise(o) && PhaseOf(*x) == Phase::kForward &&
        x->shape().dims() == v->shape().dims() &&
        (x == v || ((!IsSaved(*x) || recomputed.contains(x)) &&
                    (!stop_narrower || x->shape().byte_size() >= v->shape().byte_size())));
    if (expand) {
      if (cone != nullptr) cone->push_back(x);
      for (const Instruction* op : x->operands()) stack.push_back(op);
      continue;
    }
    if (source != nullptr && source != x) return nullptr;
    source = x;
  }
  return source;
}

// The saved values of Note [cheap recomputation], and the elementwise ops
// between them and their source (recomputed with them).
std::unordered_set<const Instruction*> CheaplyRecomputed(const ir::Computation& entry) {
  std::unordered_set<const Instruction*> recomputed;
  // How far each recomputed value's cone reaches (the first of the Cone
  // modes that finds a single source).
  std::unordered_map<const Instruction*, Cone> cone_of;
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& inst : entry.instructions()) {
      const Instruction* v = inst.get();
      if (recomputed.contains(v) || PhaseOf(*v) != Phase::kForward ||
          !ir::IsElementwise(v->opcode()) || !IsSaved(*v)) {
        continue;
      }
      for (Cone mode : {Cone::kWhole, Cone::kStopNarrower, Cone::kNarrowBroadcasts}) {
        const Instruction* y = SingleSource(v, recomputed, mode);
        if (y != nullptr && y->opcode() != Opcode::kBroadcast &&
            y->shape().dims() == v->shape().dims() &&
            y->shape().byte_size() <= v->shape().byte_size()) {
          recomputed.insert(v);
          cone_of[v] = mode;
          grew = true;
          break;
        }
      }
    }
  }
  // Their cones, so that the clones read only the sources.
  std::unordered_set<const Instruction*> with_cones = recomputed;
  for (const Instruction* v : recomputed) {
    std::vector<const Instruction*> cone;
    SingleSource(v, recomputed, cone_of[v], &cone);
    with_cones.insert(cone.begin(), cone.end());
  }
  return with_cones;
}

// The forward values a plan lets the backward keep.
std::unordered_set<const Instruction*> KeptValues(const ir::Computation& entry,
                                                  const PolicyOf& policy_of) {
  std::unordered_set<const Instruction*> kept;
  // Values the root or the optimizer read are outputs or update inputs, and
  // parameters and data are inputs: all live anyway.
  for (Instruction* op : entry.root()->operands()) kept.insert(op);
  // dots and block recompute every elementwise value anyway.
  const std::unordered_set<const Instruction*> cheap =
      policy_of.Any(RematPolicy::kNone) || policy_of.Any(RematPolicy::kWide)
          ? CheaplyRecomputed(entry)
          : std::unordered_set<const Instruction*>{};
  const std::unordered_map<int32_t, int64_t> residual =
      policy_of.Any(RematPolicy::kWide) ? ResidualElements(entry)
                                        : std::unordered_map<int32_t, int64_t>{};
  for (const auto& inst : entry.instructions()) {
    Phase phase = PhaseOf(*inst);
    if (phase == Phase::kOptimizer) {
      for (Instruction* op : inst->operands()) kept.insert(op);
    }
    if (phase != Phase::kForward) continue;
    const Opcode opcode = inst->opcode();
    const RematPolicy policy = policy_of(*inst);
    bool keep = opcode == Opcode::kParameter ||
                (policy == RematPolicy::kNone && !cheap.contains(inst.get()));
    if (policy == RematPolicy::kWide && !cheap.contains(inst.get())) {
      auto it = residual.find(inst->role().layer + 1);
      keep |= it == residual.end() || inst->shape().num_elements() <= it->second;
    }
    if (policy == RematPolicy::kDots) {
      keep |= opcode == Opcode::kDot || opcode == Opcode::kAttention ||
              opcode == Opcode::kAttentionLse || opcode == Opcode::kSoftmaxCrossEntropy;
    }
    if (keep) kept.insert(inst.get());
  }
  if (policy_of.Any(RematPolicy::kDots) || policy_of.Any(RematPolicy::kWide) ||
      policy_of.Any(RematPolicy::kBlock)) {
    AddBlockBoundaries(entry, policy_of, kept);
  }
  return kept;
}

// Rewrites the backward to recompute every saved forward value outside
// `kept`; returns whether anything changed.
bool ApplyPolicy(ir::Computation& entry, const std::unordered_set<const Instruction*>& kept) {
  std::unordered_map<const Instruction*, Instruction*> clone_of;
  // The recomputed copy of forward value `v`, built (with the copies of its
  // own non-kept operands) right before `before` unless one exists already.
  auto recompute = [&](auto&& self, Instruction* v, Instruction* before) -> Instruction* {
    if (PhaseOf(*v) != Phase::kForward || kept.contains(v)) return v;
    if (auto it = clone_of.find(v); it != clone_of.end()) return it->second;
    std::vector<Instruction*> operands;
    for (Instruction* op : v->operands()) operands.push_back(self(self, op, before));
    auto clone = std::make_unique<Instruction>(entry.UniqueName("remat." + v->name()), v->opcode(),
                                               v->shape(), std::move(operands), v->attrs());
    clone->set_metadata(v->metadata().empty() ? "remat" : "remat." + v->metadata());
    clone->set_role({ir::Phase::kRemat, v->role().layer});
    clone->set_called_computation(v->called_computation());
    Instruction* added = entry.InsertInstructionBefore(std::move(clone), before);
    clone_of[v] = added;
    return added;
  };

  std::vector<Instruction*> order;
  for (const auto& inst : entry.instructions()) order.push_back(inst.get());
  bool changed = false;
  for (Instruction* user : order) {
    if (!IsBackwardUser(*user)) continue;
    for (int64_t i = 0; i < user->operand_count(); ++i) {
      Instruction* v = user->operand(i);
      Instruction* r = recompute(recompute, v, user);
      if (r == v) continue;
      user->ReplaceOperandWith(i, r);
      changed = true;
    }
  }
  if (!changed) return false;
  // Forward values only the backward used are dead now.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Instruction* inst = *it;
    if (PhaseOf(*inst) == Phase::kForward && inst->users().empty() && entry.root() != inst &&
        inst->opcode() != Opcode::kParameter && !ir::IsCollective(inst->opcode())) {
      entry.RemoveInstruction(inst);
    }
  }
  return true;
}

}  // namespace

int64_t SavedActivationBytes(const ir::Module& module) {
  const ir::Computation* entry = module.entry();
  if (entry == nullptr) return 0;
  int64_t bytes = 0;
  for (const auto& inst : entry->instructions()) {
    if (PhaseOf(*inst) != Phase::kForward || inst->opcode() == Opcode::kParameter) continue;
    for (const Instruction* user : inst->users()) {
      if (IsBackwardUser(*user)) {
        bytes += inst->shape().byte_size();
        break;
      }
    }
  }
  return bytes;
}

namespace {

// The number of transformer blocks in `entry`'s forward: one more than the
// largest layer of its forward values (0 in an entry without a forward, as
// grad-accum's apply).
int32_t BlockCount(const ir::Computation& entry) {
  int32_t count = 0;
  for (const auto& inst : entry.instructions()) {
    if (PhaseOf(*inst) == Phase::kForward) count = std::max(count, inst->role().layer + 1);
  }
  return count;
}

}  // namespace

StatusOr<bool> Remat::Run(ir::Module& module) {
  ir::Computation* entry = module.entry();
  if (entry == nullptr || entry->root() == nullptr) {
    return Error("remat: module {} has no entry", module.name());
  }
  if (options_.layers.empty() && options_.policy == RematPolicy::kAuto) {
    return Error(
        "policy auto is a plan per block the compile driver chooses "
        "(gptc compile --remat auto --memory-budget B); this pass needs the plan");
  }
  if (!options_.layers.empty()) {
    const int32_t blocks = BlockCount(*entry);
    if (blocks == 0) return false;
    if (static_cast<int32_t>(options_.layers.size()) != blocks) {
      return Error("the plan '{}' names {} blocks but {} has {}", FormatRematPlan(options_.layers),
                   options_.layers.size(), module.name(), blocks);
    }
    for (RematPolicy p : options_.layers) {
      if (p == RematPolicy::kAuto) return Error("a plan's blocks cannot be auto");
    }
  }
  return ApplyPolicy(*entry, KeptValues(*entry, PolicyOf(options_.policy, options_.layers)));
}

std::string FormatRematPlan(const std::vector<RematPolicy>& layers) {
  std::string out;
  for (size_t first = 0; first < layers.size();) {
    size_t last = first;
    while (last + 1 < layers.size() && layers[last + 1] == layers[first]) ++last;
    out +=
        fmt::format("{}{}:{}", out.empty() ? "" : ",", RematPolicyName(layers[first]),
                    first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last));
    first = last + 1;
  }
  return out;
}

namespace {

// "12" -> 12; a block index in a plan's text.
StatusOr<int64_t> ParseBlockIndex(std::string_view text, std::string_view range) {
  int64_t value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0 ||
      value > ir::kMaxLayer) {
    return Error("remat plan: bad block number '{}' in '{}'", text, range);
  }
  return value;
}

}  // namespace

StatusOr<std::vector<RematPolicy>> ParseRematPlan(std::string_view text) {
  std::vector<RematPolicy> layers;
  for (size_t start = 0; start <= text.size();) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view range = text.substr(start, comma - start);
    start = comma + 1;
    const size_t colon = range.find(':');
    std::optional<RematPolicy> policy =
        colon == std::string_view::npos ? std::nullopt : ParseRematPolicy(range.substr(0, colon));
    if (!policy || *policy == RematPolicy::kAuto) {
      return Error("remat plan: '{}' is not POLICY:FIRST-LAST with none, dots, wide or block",
                   range);
    }
    std::string_view blocks = range.substr(colon + 1);
    const size_t dash = blocks.find('-');
    ASSIGN_OR_RETURN(int64_t first, ParseBlockIndex(blocks.substr(0, dash), range));
    int64_t last = first;
    if (dash != std::string_view::npos) {
      ASSIGN_OR_RETURN(last, ParseBlockIndex(blocks.substr(dash + 1), range));
    }
    if (first != static_cast<int64_t>(layers.size()) || last < first) {
      return Error("remat plan: '{}' must start at block {} and not end before it", range,
                   layers.size());
    }
    layers.resize(last + 1, *policy);
  }
  if (layers.empty()) return Error("remat plan: empty");
  return layers;
}

StatusOr<RematOptions> ParseRematPassOptions(const std::map<std::string, std::string>& options) {
  RematOptions o{.policy = RematPolicy::kDots};
  for (const auto& [key, value] : options) {
    if (key == "policy") {
      std::optional<RematPolicy> policy = ParseRematPolicy(value);
      if (!policy || *policy == RematPolicy::kAuto) {
        return Error("remat: policy must be none, dots, wide or block, got '{}'", value);
      }
      o.policy = *policy;
    } else if (key == "plan") {
      ASSIGN_OR_RETURN(o.layers, ParseRematPlan(value));
    } else {
      return Error("remat: unknown option '{}' (policy, plan)", key);
    }
  }
  if (options.contains("policy") && options.contains("plan")) {
    return Error("remat: give policy or plan, not both");
  }
  return o;
}

}  // namespace gptc::passes
