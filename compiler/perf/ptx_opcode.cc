#include "compiler/perf/ptx_opcode.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string>
#include <vector>

namespace gptc::perf {
namespace {

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

PtxType TypeOfSuffix(std::string_view t) {
  static const std::map<std::string_view, PtxType> kTypes = {
      {"pred", PtxType::kPred},   {"b8", PtxType::kB8},         {"u8", PtxType::kU8},
      {"s8", PtxType::kS8},       {"b16", PtxType::kB16},       {"u16", PtxType::kU16},
      {"s16", PtxType::kS16},     {"b32", PtxType::kB32},       {"u32", PtxType::kU32},
      {"s32", PtxType::kS32},     {"b64", PtxType::kB64},       {"u64", PtxType::kU64},
      {"s64", PtxType::kS64},     {"f16", PtxType::kF16},       {"bf16", PtxType::kBf16},
      {"f16x2", PtxType::kF16x2}, {"bf16x2", PtxType::kBf16x2}, {"f32", PtxType::kF32},
      {"f64", PtxType::kF64}};
  auto it = kTypes.find(t);
  return it == kTypes.end() ? PtxType::kNone : it->second;
}

PtxCmp CmpOf(std::string_view t) {
  static const std::map<std::string_view, PtxCmp> kCmps = {
      {"eq", PtxCmp::kEq},     {"ne", PtxCmp::kNe},     {"lt", PtxCmp::kLt},
      {"le", PtxCmp::kLe},     {"gt", PtxCmp::kGt},     {"ge", PtxCmp::kGe},
      {"lo", PtxCmp::kLo},     {"ls", PtxCmp::kLs},     {"hi", PtxCmp::kHi},
      {"hs", PtxCmp::kHs},     {"equ", PtxCmp::kOther}, {"neu", PtxCmp::kOther},
      {"ltu", PtxCmp::kOther}, {"leu", PtxCmp::kOther}, {"gtu", PtxCmp::kOther},
      {"geu", PtxCmp::kOther}, {"num", PtxCmp::kOther}, {"nan", PtxCmp::kOther}};
  auto it = kCmps.find(t);
  return it == kCmps.end() ? PtxCmp::kNone : it->second;
}

PtxSpace SpaceOf(std::string_view t) {
  if (t == "global") return PtxSpace::kGlobal;
  if (t == "shared" || StartsWith(t, "shared::")) return PtxSpace::kShared;
  if (t == "param") return PtxSpace::kParam;
  if (t == "local") return PtxSpace::kLocal;
  if (t == "const") return PtxSpace::kConst;
  return PtxSpace::kNone;
}

PtxOp BaseOp(std::string_view base) {
  static const std::map<std::string_view, PtxOp> kOps = {{"add", PtxOp::kAdd},
                                                         {"sub", PtxOp::kSub},
                                                         {"mul", PtxOp::kMul},
                                                         {"mad", PtxOp::kMad},
                                                         {"div", PtxOp::kDiv},
                                                         {"rem", PtxOp::kRem},
                                                         {"and", PtxOp::kAnd},
                                                         {"or", PtxOp::kOr},
                                                         {"xor", PtxOp::kXor},
                                                         {"not", PtxOp::kNot},
                                                         {"shl", PtxOp::kShl},
                                                         {"shr", PtxOp::kShr},
                                                         {"min", PtxOp::kMin},
                                                         {"max", PtxOp::kMax},
                                                         {"neg", PtxOp::kNeg},
                                                         {"abs", PtxOp::kAbs},
                                                         {"bfe", PtxOp::kBfe},
                                                         {"selp", PtxOp::kSelp},
                                                         {"setp", PtxOp::kSetp},
                                                         {"mov", PtxOp::kMov},
                                                         {"cvt", PtxOp::kCvt},
                                                         {"cvta", PtxOp::kCvta},
                                                         {"fma", PtxOp::kFma},
                                                         {"ex2", PtxOp::kMufu},
                                                         {"lg2", PtxOp::kMufu},
                                                         {"rcp", PtxOp::kMufu},
                                                         {"rsqrt", PtxOp::kMufu},
                                                         {"sqrt", PtxOp::kMufu},
                                                         {"sin", PtxOp::kMufu},
                                                         {"cos", PtxOp::kMufu},
                                                         {"tanh", PtxOp::kMufu},
                                                         {"ld", PtxOp::kLd},
                                                         {"ldu", PtxOp::kLd},
                                                         {"st", PtxOp::kSt},
                                                         {"atom", PtxOp::kAtom},
                                                         {"red", PtxOp::kAtom},
                                                         {"bar", PtxOp::kBar},
                                                         {"barrier", PtxOp::kBar},
                                                         {"shfl", PtxOp::kShfl},
                                                         {"mma", PtxOp::kMma},
                                                         {"ldmatrix", PtxOp::kLdmatrix},
                                                         {"fence", PtxOp::kFence},
                                                         {"membar", PtxOp::kFence},
                                                         {"bra", PtxOp::kBra},
                                                         {"ret", PtxOp::kRet},
                                                         {"exit", PtxOp::kRet}};
  auto it = kOps.find(base);
  return it == kOps.end() ? PtxOp::kOther : it->second;
}

// "m16n8k16" -> 16, 8, 16.
bool ParseShape(std::string_view s, PtxInst& inst) {
  if (s.size() < 6 || s[0] != 'm') return false;
  unsigned m = 0, n = 0, k = 0;
  const char* p = s.data() + 1;
  const char* end = s.data() + s.size();
  auto num = [&](unsigned& v) {
    auto r = std::from_chars(p, end, v);
    if (r.ec != std::errc()) return false;
    p = r.ptr;
    return true;
  };
  if (!num(m) || p == end || *p++ != 'n' || !num(n) || p == end || *p++ != 'k' || !num(k) ||
      p != end) {
    return false;
  }
  inst.m = static_cast<uint16_t>(m);
  inst.n = static_cast<uint16_t>(n);
  inst.k = static_cast<uint16_t>(k);
  return true;
}

}  // namespace

PtxType PtxTypeOf(std::string_view suffix) { return TypeOfSuffix(suffix); }

void DecodeOpcode(std::string_view opcode, PtxInst& inst) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t dot = opcode.find('.', start);
    parts.push_back(opcode.substr(start, dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  const std::string_view base = parts[0];
  inst.op = BaseOp(base);
  if (base == "cp" && parts.size() > 1 && parts[1] == "async") {
    inst.op = PtxOp::kCpAsync;
    if (parts.size() > 2 && parts[2] == "commit_group") inst.op = PtxOp::kCpAsyncCommit;
    if (parts.size() > 2 && (parts[2] == "wait_group" || parts[2] == "wait_all")) {
      inst.op = PtxOp::kCpAsyncWait;
    }
  } else if (base == "wgmma" && parts.size() > 1) {
    if (parts[1] == "mma_async") inst.op = PtxOp::kWgmma;
    if (parts[1] == "fence") inst.op = PtxOp::kWgmmaFence;
    if (parts[1] == "commit_group") inst.op = PtxOp::kWgmmaCommit;
    if (parts[1] == "wait_group") inst.op = PtxOp::kWgmmaWait;
  }
  int types_seen = 0;
  for (size_t i = 1; i < parts.size(); ++i) {
    std::string_view p = parts[i];
    if (PtxType t = TypeOfSuffix(p); t != PtxType::kNone) {
      // cvt.DST.SRC; every other opcode's last type is its own.
      if (inst.op == PtxOp::kCvt && types_seen == 1) {
        inst.type2 = t;
      } else if (inst.op != PtxOp::kCvt || types_seen == 0) {
        inst.type = t;
      }
      ++types_seen;
      continue;
    }
    if (PtxSpace s = SpaceOf(p); s != PtxSpace::kNone && inst.space == PtxSpace::kNone) {
      inst.space = s;
      continue;
    }
    if (inst.op == PtxOp::kSetp && inst.cmp == PtxCmp::kNone) {
      if (PtxCmp c = CmpOf(p); c != PtxCmp::kNone) {
        inst.cmp = c;
        continue;
      }
    }
    if (p == "wide") inst.wide = true;
    if (p == "hi") inst.hi = true;
    if (p == "approx") inst.approx = true;
    if (p == "v2") inst.vec = 2;
    if (p == "v4") inst.vec = 4;
    if (p == "v8") inst.vec = 8;
    if (p == "x1" || p == "x2" || p == "x4") inst.m = static_cast<uint16_t>(p[1] - '0');
    if ((inst.op == PtxOp::kMma || inst.op == PtxOp::kWgmma) && p[0] == 'm') ParseShape(p, inst);
  }
  if (inst.op == PtxOp::kSetp) {
    inst.type2 = inst.type;
    inst.type = PtxType::kPred;
  }
  if (inst.op == PtxOp::kLd || inst.op == PtxOp::kSt || inst.op == PtxOp::kAtom) {
    inst.bytes = static_cast<uint8_t>(std::max(1, TypeBits(inst.type) / 8));
    if (inst.space == PtxSpace::kNone) inst.space = PtxSpace::kGeneric;
  }
  if (inst.op == PtxOp::kFma || inst.op == PtxOp::kMufu) {
    if (inst.type == PtxType::kNone) inst.type = PtxType::kF32;
  }
}

bool IsFloat(PtxType t) {
  switch (t) {
    case PtxType::kF16:
    case PtxType::kBf16:
    case PtxType::kF16x2:
    case PtxType::kBf16x2:
    case PtxType::kF32:
    case PtxType::kF64:
      return true;
    default:
      return false;
  }
}

bool IsSigned(PtxType t) {
  return t == PtxType::kS8 || t == PtxType::kS16 || t == PtxType::kS32 || t == PtxType::kS64;
}

int TypeBits(PtxType t) {
  switch (t) {
    case PtxType::kPred:
      return 1;
    case PtxType::kB8:
    case PtxType::kU8:
    case PtxType::kS8:
      return 8;
    case PtxType::kB16:
    case PtxType::kU16:
    case PtxType::kS16:
    case PtxType::kF16:
    case PtxType::kBf16:
      return 16;
    case PtxType::kB64:
    case PtxType::kU64:
    case PtxType::kS64:
    case PtxType::kF64:
      return 64;
    case PtxType::kNone:
      return 0;
    default:
      return 32;
  }
}

}  // namespace gptc::perf
