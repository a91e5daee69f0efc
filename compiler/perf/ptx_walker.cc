#include "compiler/perf/ptx_walker.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace gptc::perf {
namespace {

uint64_t Mask(int bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

int64_t SignExtend(uint64_t v, int bits) {
  if (bits >= 64) return static_cast<int64_t>(v);
  uint64_t m = uint64_t{1} << (bits - 1);
  v &= Mask(bits);
  return static_cast<int64_t>((v ^ m) - m);
}

}  // namespace

bool IsMemoryInstruction(const PtxInst& in) {
  switch (in.op) {
    case PtxOp::kLd:
      return in.space != PtxSpace::kParam && in.space != PtxSpace::kConst;
    case PtxOp::kSt:
    case PtxOp::kAtom:
    case PtxOp::kCpAsync:
    case PtxOp::kLdmatrix:
      return true;
    default:
      return false;
  }
}

namespace {

bool IsMemory(const PtxInst& in) { return IsMemoryInstruction(in); }

// Bytes one lane moves.
uint32_t LaneBytes(const PtxInst& in) {
  if (in.op == PtxOp::kLdmatrix) return 16;
  if (in.op == PtxOp::kCpAsync) return in.bytes;
  return static_cast<uint32_t>(in.bytes) * in.vec;
}

struct Value {
  uint64_t v = 0;
  bool known = false;
};

struct Operands {
  std::array<Value, 4> v{};
  size_t n = 0;
};

struct Result {
  uint64_t value = 0;
  int bits = 64;
};

std::optional<Result> Multiply(const PtxInst& in, const Operands& x, int bits, bool sign) {
  const uint64_t a = x.v[0].v, b = x.v[1].v;
  Result r{0, bits};
  if (in.wide) {
    r.bits = 2 * bits;
    r.value = sign ? static_cast<uint64_t>(SignExtend(a, bits) * SignExtend(b, bits))
                   : (a & Mask(bits)) * (b & Mask(bits));
  } else if (in.hi) {
    const __int128 p = sign ? static_cast<__int128>(SignExtend(a, bits)) * SignExtend(b, bits)
                            : static_cast<__int128>(static_cast<unsigned __int128>(a & Mask(bits)) *
                                                    (b & Mask(bits)));
    r.value = static_cast<uint64_t>(p >> bits);
  } else {
    r.value = a * b;
  }
  if (in.op == PtxOp::kMad) {
    if (x.n < 3) return std::nullopt;
    r.value += x.v[2].v;
  }
  return r;
}

std::optional<Result> Divide(const PtxInst& in, const Operands& x, int bits, bool sign) {
  if ((x.v[1].v & Mask(bits)) == 0) return std::nullopt;
  const bool div = in.op == PtxOp::kDiv;
  if (sign) {
    const int64_t a = SignExtend(x.v[0].v, bits), b = SignExtend(x.v[1].v, bits);
    return Result{static_cast<uint64_t>(div ? a / b : a % b), bits};
  }
  const uint64_t a = x.v[0].v & Mask(bits), b = x.v[1].v & Mask(bits);
  return Result{div ? a / b : a % b, bits};
}

std::optional<Result> Shift(const PtxInst& in, const Operands& x, int bits, bool sign) {
  const uint64_t by = x.v[1].v & Mask(32);
  if (in.op == PtxOp::kShl)
    return Result{by >= static_cast<uint64_t>(bits) ? 0 : x.v[0].v << by, bits};
  const uint64_t sh = std::min<uint64_t>(by, static_cast<uint64_t>(bits));
  if (sign) {
    const int64_t v = SignExtend(x.v[0].v, bits);
    return Result{static_cast<uint64_t>(sh >= 64 ? (v < 0 ? -1 : 0) : v >> sh), bits};
  }
  const uint64_t v = x.v[0].v & Mask(bits);
  return Result{sh >= 64 ? 0 : v >> sh, bits};
}

std::optional<Result> Compare(const PtxInst& in, const Operands& x) {
  if (x.n != 2) return std::nullopt;  // the combining forms (setp.lt.and ...)
  const int bits = std::max(1, TypeBits(in.type2));
  const bool sign = IsSigned(in.type2);
  const int64_t a = SignExtend(x.v[0].v, bits), b = SignExtend(x.v[1].v, bits);
  const uint64_t ua = x.v[0].v & Mask(bits), ub = x.v[1].v & Mask(bits);
  bool r = false;
  switch (in.cmp) {
    case PtxCmp::kEq:
      r = ua == ub;
      break;
    case PtxCmp::kNe:
      r = ua != ub;
      break;
    case PtxCmp::kLt:
      r = sign ? a < b : ua < ub;
      break;
    case PtxCmp::kLe:
      r = sign ? a <= b : ua <= ub;
      break;
    case PtxCmp::kGt:
      r = sign ? a > b : ua > ub;
      break;
    case PtxCmp::kGe:
      r = sign ? a >= b : ua >= ub;
      break;
    case PtxCmp::kLo:
      r = ua < ub;
      break;
    case PtxCmp::kLs:
      r = ua <= ub;
      break;
    case PtxCmp::kHi:
      r = ua > ub;
      break;
    case PtxCmp::kHs:
      r = ua >= ub;
      break;
    default:
      return std::nullopt;
  }
  return Result{r ? 1u : 0u, 1};
}

std::optional<Result> BitField(const Operands& x, int bits, bool sign) {
  if (x.n < 3) return std::nullopt;
  const uint64_t pos = x.v[1].v & 0xff, len = x.v[2].v & 0xff;
  if (len == 0) return Result{0, bits};
  uint64_t field = pos >= 64 ? 0 : (x.v[0].v & Mask(bits)) >> pos;
  field &= Mask(static_cast<int>(std::min<uint64_t>(len, 64)));
  if (sign && len < 64) field = static_cast<uint64_t>(SignExtend(field, static_cast<int>(len)));
  return Result{field, bits};
}

// Integer and predicate arithmetic on known operands (Note [walking PTX]).
std::optional<Result> Compute(const PtxInst& in, const Operands& x) {
  const int bits = std::max(1, TypeBits(in.type));
  const bool sign = IsSigned(in.type);
  const uint64_t a = x.v[0].v, b = x.v[1].v;
  switch (in.op) {
    case PtxOp::kMov:
    case PtxOp::kCvta:
      if (x.n > 1) {  // mov.b32 d, {lo, hi}: pack the pieces
        const int piece = bits / static_cast<int>(x.n);
        uint64_t v = 0;
        for (size_t i = x.n; i-- > 0;) v = (v << piece) | (x.v[i].v & Mask(piece));
        return Result{v, bits};
      }
      if (x.n == 0) return std::nullopt;
      return Result{a, in.op == PtxOp::kCvta ? 64 : bits};
    case PtxOp::kAdd:
      return Result{a + b, bits};
    case PtxOp::kSub:
      return Result{a - b, bits};
    case PtxOp::kMul:
    case PtxOp::kMad:
      return Multiply(in, x, bits, sign);
    case PtxOp::kDiv:
    case PtxOp::kRem:
      return Divide(in, x, bits, sign);
    case PtxOp::kAnd:
      return Result{a & b, bits};
    case PtxOp::kOr:
      return Result{a | b, bits};
    case PtxOp::kXor:
      return Result{a ^ b, bits};
    case PtxOp::kNot:
      return Result{~a, bits};
    case PtxOp::kShl:
    case PtxOp::kShr:
      return Shift(in, x, bits, sign);
    case PtxOp::kMin:
    case PtxOp::kMax: {
      const bool less =
          sign ? SignExtend(a, bits) < SignExtend(b, bits) : (a & Mask(bits)) < (b & Mask(bits));
      return Result{(in.op == PtxOp::kMin) == less ? a : b, bits};
    }
    case PtxOp::kNeg:
      return Result{static_cast<uint64_t>(-SignExtend(a, bits)), bits};
    case PtxOp::kAbs: {
      const int64_t v = SignExtend(a, bits);
      return Result{static_cast<uint64_t>(v < 0 ? -v : v), bits};
    }
    case PtxOp::kBfe:
      return BitField(x, bits, sign);
    case PtxOp::kSelp: {
      if (x.n < 3 || !x.v[2].known) return std::nullopt;
      const Value& pick = x.v[2].v ? x.v[0] : x.v[1];
      if (!pick.known) return std::nullopt;
      return Result{pick.v, bits};
    }
    case PtxOp::kSetp:
      return Compare(in, x);
    case PtxOp::kCvt: {
      const int from = std::max(1, TypeBits(in.type2));
      return Result{
          IsSigned(in.type2) ? static_cast<uint64_t>(SignExtend(a, from)) : a & Mask(from), bits};
    }
    default:
      return std::nullopt;
  }
}

// One lane's registers and what it recorded.
struct LaneState {
  std::vector<uint64_t> v;
  std::vector<uint8_t> known;
  struct Arrival {
    int32_t inst;
    bool executed, known;
    PtxSpace space;
    uint64_t address;
    uint32_t bytes;
  };
  std::vector<int32_t> path;
  std::vector<Arrival> arrivals;
  int64_t instructions = 0;
  int64_t unknown_branches = 0;
  bool truncated = false;
};

class LaneRunner {
 public:
  LaneRunner(const PtxKernel& k, const WalkPlan& plan, const LaunchShape& launch,
             std::array<int64_t, 3> ctaid, const WalkOptions& options)
      : k_(k), plan_(plan), launch_(launch), ctaid_(ctaid), options_(options) {}

  void Run(int64_t linear_tid, bool record, LaneState& s) {
    s.v.assign(k_.registers.size(), 0);
    s.known.assign(k_.registers.size(), 0);
    s.path.clear();
    s.arrivals.clear();
    s.instructions = 0;
    s.unknown_branches = 0;
    s.truncated = false;
    tid_ = {linear_tid % launch_.block.x, linear_tid / launch_.block.x % launch_.block.y,
            linear_tid / (launch_.block.x * launch_.block.y)};
    linear_tid_ = linear_tid;
    size_t b = 0;
    while (b < k_.blocks.size()) {
      s.path.push_back(static_cast<int32_t>(b));
      const PtxBlock& block = k_.blocks[b];
      size_t next = b + 1;
      const int32_t first = plan_.block_start[b];
      for (int32_t i : plan_.visit[b]) {
        const PtxInst& in = block.insts[i];
        const int32_t id = first + i;
        int guard = 1;  // 1 on, 0 off, -1 unknown
        if (in.guard >= 0) {
          if (!s.known[in.guard]) {
            guard = -1;
          } else {
            guard = (s.v[in.guard] != 0) != in.guard_negated ? 1 : 0;
          }
        }
        if (in.op == PtxOp::kRet) {
          if (guard != 0) {
            s.instructions += i + 1;
            return;
          }
          continue;
        }
        if (in.op == PtxOp::kBra) {
          if (guard == -1) ++s.unknown_branches;
          if (guard == 1) next = static_cast<size_t>(in.target);
          continue;
        }
        if (record && plan_.memory_index[id] >= 0) Record(in, id, guard != 0, s);
        if (guard == 0 || !plan_.evaluate[id]) continue;
        Evaluate(in, s);
        if (guard == -1) {
          for (int32_t d : in.dsts) s.known[d] = 0;
        }
      }
      s.instructions += static_cast<int64_t>(block.insts.size());
      if (s.instructions > options_.max_lane_instructions) {
        s.truncated = true;
        return;
      }
      b = next;
    }
  }

 private:
  Value Operand(const PtxOperand& o, const LaneState& s) const {
    switch (o.kind) {
      case PtxOperand::kReg:
        return {s.v[o.reg], s.known[o.reg] != 0};
      case PtxOperand::kImm:
        return {static_cast<uint64_t>(o.imm), true};
      case PtxOperand::kParam:
        return {static_cast<uint64_t>(o.imm + 1) << kParamShift, true};
      case PtxOperand::kSymbol:
        if (o.imm < 0) return {};
        return {static_cast<uint64_t>(k_.shared[o.imm].offset), true};
      case PtxOperand::kSpecial:
        return Special(o.imm);
      default:
        return {};
    }
  }

  Value Special(int64_t which) const {
    const Dim3& b = launch_.block;
    const Dim3& g = launch_.grid;
    switch (which) {
      case kTidX:
        return {static_cast<uint64_t>(tid_[0]), true};
      case kTidY:
        return {static_cast<uint64_t>(tid_[1]), true};
      case kTidZ:
        return {static_cast<uint64_t>(tid_[2]), true};
      case kNtidX:
        return {static_cast<uint64_t>(b.x), true};
      case kNtidY:
        return {static_cast<uint64_t>(b.y), true};
      case kNtidZ:
        return {static_cast<uint64_t>(b.z), true};
      case kCtaidX:
        return {static_cast<uint64_t>(ctaid_[0]), true};
      case kCtaidY:
        return {static_cast<uint64_t>(ctaid_[1]), true};
      case kCtaidZ:
        return {static_cast<uint64_t>(ctaid_[2]), true};
      case kNctaidX:
        return {static_cast<uint64_t>(g.x), true};
      case kNctaidY:
        return {static_cast<uint64_t>(g.y), true};
      case kNctaidZ:
        return {static_cast<uint64_t>(g.z), true};
      case kLaneId:
        return {static_cast<uint64_t>(linear_tid_ % 32), true};
      case kWarpId:
        return {static_cast<uint64_t>(linear_tid_ / 32), true};
      default:
        return {};
    }
  }

  Value Address(const PtxOperand& base, int64_t offset, const LaneState& s) const {
    Value a = Operand(base, s);
    a.v += static_cast<uint64_t>(offset);
    return a;
  }

  void Record(const PtxInst& in, int32_t id, bool executed, LaneState& s) const {
    Value a = in.op == PtxOp::kCpAsync ? Address(in.addr2, in.offset2, s)
                                       : Address(in.addr, in.offset, s);
    PtxSpace space = in.space;
    if (in.op == PtxOp::kCpAsync) space = PtxSpace::kGlobal;
    if (in.op == PtxOp::kLdmatrix) space = PtxSpace::kShared;
    if (space == PtxSpace::kGeneric) {
      space = a.known && (a.v >> kParamShift) == 0 ? PtxSpace::kShared : PtxSpace::kGlobal;
    }
    s.arrivals.push_back({id, executed, a.known, space, a.v, LaneBytes(in)});
  }

  void Set(int32_t reg, uint64_t v, int bits, LaneState& s) const {
    s.v[reg] = v & Mask(bits);
    s.known[reg] = 1;
  }

  // The instruction's results, when its operands are known integers.
  void Evaluate(const PtxInst& in, LaneState& s) const {
    if (in.dsts.empty()) return;
    auto unknown = [&] {
      for (int32_t d : in.dsts) s.known[d] = 0;
    };
    if (in.op == PtxOp::kLd) {
      Value a = Address(in.addr, in.offset, s);
      if (in.space != PtxSpace::kParam || !a.known) return unknown();
      return Set(in.dsts[0], a.v, 64, s);
    }
    if (IsFloat(in.type) ||
        ((in.op == PtxOp::kCvt || in.op == PtxOp::kSetp) && IsFloat(in.type2))) {
      return unknown();
    }
    Operands x;
    x.n = std::min<size_t>(in.srcs.size(), 4);
    for (size_t i = 0; i < x.n; ++i) {
      x.v[i] = Operand(in.srcs[i], s);
      // selp's operands may be unknown when its predicate picks the other.
      if (!x.v[i].known && in.op != PtxOp::kSelp) return unknown();
    }
    if ((in.op == PtxOp::kMov || in.op == PtxOp::kCvta) && in.dsts.size() > 1 && x.n == 1) {
      // mov.b32 {lo, hi}, s: unpack
      const int piece = TypeBits(in.type) / static_cast<int>(in.dsts.size());
      for (size_t i = 0; i < in.dsts.size(); ++i)
        Set(in.dsts[i], x.v[0].v >> (piece * i), piece, s);
      return;
    }
    if (in.dsts.size() > 1 && in.op != PtxOp::kSetp) return unknown();
    std::optional<Result> r = Compute(in, x);
    if (!r) return unknown();
    Set(in.dsts[0], r->value, r->bits, s);
    if (in.op == PtxOp::kSetp && in.dsts.size() > 1) Set(in.dsts[1], r->value ^ 1, 1, s);
  }

  const PtxKernel& k_;
  const WalkPlan& plan_;
  const LaunchShape& launch_;
  std::array<int64_t, 3> ctaid_;
  const WalkOptions& options_;
  std::array<int64_t, 3> tid_{};
  int64_t linear_tid_ = 0;
};

// Shared-memory wavefronts of one request: the most distinct words a bank
// serves, and at least one per 128 bytes.
uint16_t Wavefronts(const std::vector<std::pair<uint64_t, uint32_t>>& accesses) {
  std::array<std::vector<uint64_t>, 32> banks;
  std::vector<uint64_t> words;
  for (const auto& [address, bytes] : accesses) {
    for (uint64_t w = address / 4; w <= (address + std::max<uint32_t>(bytes, 1) - 1) / 4; ++w) {
      words.push_back(w);
    }
  }
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  size_t most = 0;
  for (uint64_t w : words) {
    auto& bank = banks[w % 32];
    bank.push_back(w);
    most = std::max(most, bank.size());
  }
  size_t by_bytes = (words.size() * 4 + 127) / 128;
  return static_cast<uint16_t>(std::max<size_t>({most, by_bytes, 1}));
}

}  // namespace

int ParamOfAddress(uint64_t address, int params) {
  int64_t p = static_cast<int64_t>(address >> kParamShift) - 1;
  return p >= 0 && p < params ? static_cast<int>(p) : -1;
}

WalkPlan PlanWalk(const PtxKernel& kernel) {
  WalkPlan plan;
  int32_t id = 0;
  for (const PtxBlock& b : kernel.blocks) {
    plan.block_start.push_back(id);
    id += static_cast<int32_t>(b.insts.size());
  }
  plan.evaluate.assign(id, 0);
  plan.memory_index.assign(id, -1);
  std::vector<uint8_t> needed(kernel.registers.size(), 0);
  auto need = [&](const PtxOperand& o) {
    if (o.kind == PtxOperand::kReg) needed[o.reg] = 1;
  };
  for (const PtxBlock& b : kernel.blocks) {
    for (const PtxInst& in : b.insts) {
      if (in.op == PtxOp::kBra || IsMemory(in) || in.op == PtxOp::kRet) {
        if (in.guard >= 0) needed[in.guard] = 1;
      }
      if (IsMemory(in)) {
        need(in.addr);
        need(in.addr2);
      }
    }
  }
  // The backward slice, to a fixed point (loop-carried registers have
  // several definitions).
  for (bool changed = true; changed;) {
    changed = false;
    int32_t i = 0;
    for (const PtxBlock& b : kernel.blocks) {
      for (const PtxInst& in : b.insts) {
        const int32_t this_id = i++;
        if (plan.evaluate[this_id]) continue;
        bool defines = false;
        for (int32_t d : in.dsts) defines = defines || needed[d];
        if (!defines) continue;
        plan.evaluate[this_id] = 1;
        changed = true;
        for (const PtxOperand& o : in.srcs) need(o);
        need(in.addr);
        if (in.guard >= 0) needed[in.guard] = 1;
      }
    }
  }
  int32_t i = 0;
  for (const PtxBlock& b : kernel.blocks) {
    std::vector<int32_t>& visit = plan.visit.emplace_back();
    for (size_t j = 0; j < b.insts.size(); ++j, ++i) {
      const PtxInst& in = b.insts[j];
      const bool memory = IsMemory(in);
      if (memory) plan.memory_index[i] = plan.memory_instructions++;
      if (memory || plan.evaluate[i] || in.op == PtxOp::kBra || in.op == PtxOp::kRet) {
        visit.push_back(static_cast<int32_t>(j));
      }
    }
  }
  return plan;
}

namespace {

// The lanes' k-th arrivals at one memory instruction: one warp request.
struct Group {
  bool executed = false, known = true;
  std::vector<std::pair<uint64_t, uint32_t>> accesses;  // address, bytes
};

// One request of `group`, its sectors appended to `sectors`.
MemoryRequest Request(const Group& g, const LaneState::Arrival& a, int64_t live, int params,
                      std::vector<uint64_t>& sectors) {
  MemoryRequest r;
  r.space = a.space == PtxSpace::kShared  ? PtxSpace::kShared
            : a.space == PtxSpace::kLocal ? PtxSpace::kLocal
                                          : PtxSpace::kGlobal;
  r.executed = g.executed;
  r.known = g.known;
  for (const auto& acc : g.accesses) r.bytes += acc.second;
  if (!r.known) r.bytes = a.bytes * static_cast<uint32_t>(live);
  if (!r.executed) return r;
  if (r.space == PtxSpace::kShared) {
    r.wavefronts =
        g.accesses.empty() ? static_cast<uint16_t>((r.bytes + 127) / 128) : Wavefronts(g.accesses);
    return r;
  }
  if (r.space != PtxSpace::kGlobal) return r;
  r.first_sector = static_cast<uint32_t>(sectors.size());
  for (const auto& [address, bytes] : g.accesses) {
    for (uint64_t s = address / 32; s <= (address + std::max<uint32_t>(bytes, 1) - 1) / 32; ++s) {
      sectors.push_back(s);
    }
  }
  auto begin = sectors.begin() + r.first_sector;
  std::sort(begin, sectors.end());
  sectors.erase(std::unique(begin, sectors.end()), sectors.end());
  r.listed = static_cast<uint32_t>(sectors.size() - r.first_sector);
  r.sectors = r.listed;
  if (!g.accesses.empty())
    r.param = static_cast<int16_t>(ParamOfAddress(g.accesses[0].first, params));
  if (!r.known && r.sectors == 0) r.sectors = (r.bytes + 31) / 32;
  return r;
}

// A warp's requests along its busiest lane's path: the k-th arrival of
// each lane at each memory instruction is one request.
std::vector<MemoryRequest> WarpRequests(const std::vector<LaneState>& lanes, int64_t live,
                                        int busiest, const WalkPlan& plan, int params,
                                        std::vector<uint64_t>& sectors) {
  std::vector<std::vector<Group>> groups(plan.memory_instructions);
  std::vector<int32_t> count(plan.memory_instructions);
  for (int64_t l = 0; l < live; ++l) {
    std::fill(count.begin(), count.end(), 0);
    for (const LaneState::Arrival& a : lanes[l].arrivals) {
      const int32_t mi = plan.memory_index[a.inst];
      const int32_t k = count[mi]++;
      if (static_cast<int32_t>(groups[mi].size()) <= k) groups[mi].resize(k + 1);
      Group& g = groups[mi][k];
      if (!a.executed) continue;
      g.executed = true;
      if (!a.known) {
        g.known = false;
        continue;
      }
      g.accesses.emplace_back(a.address, a.bytes);
    }
  }
  std::vector<MemoryRequest> requests;
  std::fill(count.begin(), count.end(), 0);
  for (const LaneState::Arrival& a : lanes[busiest].arrivals) {
    const int32_t mi = plan.memory_index[a.inst];
    requests.push_back(Request(groups[mi][count[mi]++], a, live, params, sectors));
  }
  return requests;
}

}  // namespace

BlockWalk WalkBlock(const PtxKernel& kernel, const WalkPlan& plan, const LaunchShape& launch,
                    int64_t block_index, const WalkOptions& options) {
  BlockWalk out;
  const std::array<int64_t, 3> ctaid = {block_index % launch.grid.x,
                                        block_index / launch.grid.x % launch.grid.y,
                                        block_index / (launch.grid.x * launch.grid.y)};
  LaneRunner runner(kernel, plan, launch, ctaid, options);
  const int64_t threads = launch.block.product();
  const int64_t warps = options.first_lane_only ? 1 : (threads + 31) / 32;
  std::vector<LaneState> lanes(options.first_lane_only ? 1 : 32);
  for (int64_t w = 0; w < warps; ++w) {
    const int64_t live = options.first_lane_only ? 1 : std::min<int64_t>(32, threads - 32 * w);
    int busiest = 0;
    for (int64_t l = 0; l < live; ++l) {
      runner.Run(32 * w + l, true, lanes[l]);
      out.unknown_branches = std::max(out.unknown_branches, lanes[l].unknown_branches);
      out.truncated = out.truncated || lanes[l].truncated;
      if (lanes[l].instructions > lanes[busiest].instructions) busiest = static_cast<int>(l);
    }
    WarpWalk warp;
    warp.lanes = static_cast<int32_t>(live);
    warp.blocks = lanes[busiest].path;
    warp.instructions = lanes[busiest].instructions;
    if (options.first_lane_only) {
      for (const LaneState::Arrival& a : lanes[0].arrivals) {
        if (!a.executed || !a.known || a.space != PtxSpace::kGlobal) continue;
        out.first_lane_sectors.emplace_back(ParamOfAddress(a.address, kernel.params),
                                            a.address / 32);
      }
    } else {
      warp.requests = WarpRequests(lanes, live, busiest, plan, kernel.params, out.sectors);
    }
    out.warps.push_back(std::move(warp));
  }
  return out;
}

}  // namespace gptc::perf
