#include "compiler/perf/ptx_program.h"

#include <cctype>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>

#include "compiler/perf/ptx_opcode.h"

namespace gptc::perf {
namespace {

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

struct Special {
  std::string_view name;
  PtxSpecial value;
};
constexpr Special kSpecials[] = {
    {"%tid.x", kTidX},       {"%tid.y", kTidY},       {"%tid.z", kTidZ},
    {"%ntid.x", kNtidX},     {"%ntid.y", kNtidY},     {"%ntid.z", kNtidZ},
    {"%ctaid.x", kCtaidX},   {"%ctaid.y", kCtaidY},   {"%ctaid.z", kCtaidZ},
    {"%nctaid.x", kNctaidX}, {"%nctaid.y", kNctaidY}, {"%nctaid.z", kNctaidZ},
    {"%laneid", kLaneId},    {"%warpid", kWarpId}};

// One `.entry`'s parse.
class KernelParser {
 public:
  explicit KernelParser(PtxKernel& kernel) : k_(kernel) {}

  Status DeclareRegisters(std::string_view decl, int line) {
    // ".reg .b32 %r<280>" or ".reg .pred p"
    std::string_view rest = Trim(decl.substr(4));
    size_t space = rest.find_first_of(" \t");
    if (space == std::string_view::npos) return Error("ptx:{}: bad .reg declaration", line);
    PtxType type = PtxTypeOf(Trim(rest.substr(0, space)).substr(1));
    std::string_view names = Trim(rest.substr(space));
    for (size_t start = 0; start <= names.size();) {
      size_t comma = names.find(',', start);
      std::string_view name = Trim(names.substr(start, comma - start));
      if (size_t lt = name.find('<'); lt != std::string_view::npos) {
        int64_t count = 0;
        std::string_view digits = name.substr(lt + 1, name.find('>') - lt - 1);
        if (std::from_chars(digits.data(), digits.data() + digits.size(), count).ec !=
            std::errc()) {
          return Error("ptx:{}: bad register count in '{}'", line, name);
        }
        std::string prefix(name.substr(0, lt));
        ranges_[prefix] = {static_cast<int32_t>(k_.registers.size()), static_cast<int32_t>(count)};
        for (int64_t i = 0; i < count; ++i) {
          k_.registers.push_back(prefix + std::to_string(i));
          k_.register_types.push_back(type);
        }
      } else if (!name.empty()) {
        std::string n(name);
        if (!named_.count(n)) {
          named_[n] = static_cast<int32_t>(k_.registers.size());
          k_.registers.push_back(n);
          k_.register_types.push_back(type);
        }
      }
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return Status::Ok();
  }

  Status DeclareShared(std::string_view decl, int line) {
    // ".shared .align 16 .b8 name[18432]" (or `.extern` with [])
    size_t open = decl.find('[');
    if (open == std::string_view::npos) return Error("ptx:{}: bad .shared declaration", line);
    std::string_view head = Trim(decl.substr(0, open));
    size_t name_start = head.find_last_of(" \t");
    std::string_view name = head.substr(name_start + 1);
    int64_t align = 1;
    if (size_t a = head.find(".align"); a != std::string_view::npos) {
      std::string_view v = Trim(head.substr(a + 6));
      std::from_chars(v.data(), v.data() + v.size(), align);
    }
    std::string_view digits = decl.substr(open + 1, decl.find(']') - open - 1);
    int64_t bytes = 0;
    if (!digits.empty() &&
        std::from_chars(digits.data(), digits.data() + digits.size(), bytes).ec != std::errc()) {
      return Error("ptx:{}: bad array size in '{}'", line, decl);
    }
    int64_t elem = 1;
    if (decl.find(".b32") != std::string_view::npos || decl.find(".f32") != std::string_view::npos)
      elem = 4;
    if (decl.find(".b64") != std::string_view::npos) elem = 8;
    PtxSharedArray s{std::string(name), 0, bytes * elem};
    if (bytes > 0) {
      align = std::max<int64_t>(align, 1);
      k_.static_shared_bytes = (k_.static_shared_bytes + align - 1) / align * align;
      s.offset = k_.static_shared_bytes;
      k_.static_shared_bytes += s.bytes;
      k_.shared.insert(k_.shared.end() - dynamic_count_, s);
    } else {
      k_.shared.push_back(s);
      ++dynamic_count_;
    }
    return Status::Ok();
  }

  // After the body: the dynamic arrays start where the static ones end.
  void PlaceDynamicShared() {
    for (PtxSharedArray& s : k_.shared) {
      if (s.bytes == 0) s.offset = (k_.static_shared_bytes + 15) / 16 * 16;
    }
  }

  Status Statement(std::string_view text, int line) {
    text = Trim(text);
    if (text.empty()) return Status::Ok();
    if (text.back() == ':') {
      StartBlock(std::string(text.substr(0, text.size() - 1)));
      return Status::Ok();
    }
    if (text[0] == '.') {
      if (StartsWith(text, ".reg")) return DeclareRegisters(text, line);
      if (StartsWith(text, ".shared") || StartsWith(text, ".extern")) {
        if (text.find(".shared") != std::string_view::npos) return DeclareShared(text, line);
      }
      return Status::Ok();  // .pragma, .local, .loc, ...
    }
    PtxInst inst;
    inst.line = line;
    if (text[0] == '@') {
      size_t sp = text.find_first_of(" \t");
      if (sp == std::string_view::npos) return Error("ptx:{}: guard without instruction", line);
      std::string_view g = text.substr(1, sp - 1);
      if (!g.empty() && g[0] == '!') {
        inst.guard_negated = true;
        g.remove_prefix(1);
      }
      ASSIGN_OR_RETURN(inst.guard, Register(g, line));
      text = Trim(text.substr(sp));
    }
    size_t sp = text.find_first_of(" \t");
    std::string_view opcode = text.substr(0, sp);
    std::string_view operands = sp == std::string_view::npos ? "" : Trim(text.substr(sp));
    DecodeOpcode(opcode, inst);
    RETURN_IF_ERROR(Operands(operands, inst, line));
    Current().insts.push_back(std::move(inst));
    ++k_.inst_count;
    PtxOp op = Current().insts.back().op;
    if (op == PtxOp::kBra || op == PtxOp::kRet) StartBlock("");
    return Status::Ok();
  }

  void Finish() {
    // Drop empty unlabeled blocks (control falls through them), then resolve
    // labels and symbols by name.
    std::vector<PtxBlock> blocks;
    std::unordered_map<std::string, int32_t> index;
    for (PtxBlock& b : k_.blocks) {
      if (b.insts.empty() && b.label.empty()) continue;
      if (!b.label.empty()) index[b.label] = static_cast<int32_t>(blocks.size());
      blocks.push_back(std::move(b));
    }
    k_.blocks = std::move(blocks);
    auto resolve = [&](PtxOperand& o, PtxInst& inst) {
      if (o.kind == PtxOperand::kLabel) {
        auto it = index.find(names_[o.imm]);
        o.imm = it == index.end() ? -1 : it->second;
        if (inst.op == PtxOp::kBra) inst.target = static_cast<int32_t>(o.imm);
      } else if (o.kind == PtxOperand::kSymbol) {
        const std::string& name = names_[o.imm];
        o.imm = -1;
        for (size_t i = 0; i < k_.shared.size(); ++i) {
          if (k_.shared[i].name == name) o.imm = static_cast<int64_t>(i);
        }
        size_t p = name.rfind("_param_");
        if (o.imm < 0 && p != std::string::npos) {
          int64_t n = 0;
          if (std::from_chars(name.data() + p + 7, name.data() + name.size(), n).ec ==
              std::errc()) {
            o.kind = PtxOperand::kParam;
            o.imm = n;
          }
        }
      }
    };
    for (PtxBlock& b : k_.blocks) {
      for (PtxInst& inst : b.insts) {
        for (PtxOperand& o : inst.srcs) resolve(o, inst);
        resolve(inst.addr, inst);
        resolve(inst.addr2, inst);
      }
    }
    PlaceDynamicShared();
  }

  Status CheckLabels() const {
    for (const PtxBlock& b : k_.blocks) {
      for (const PtxInst& inst : b.insts) {
        if (inst.op == PtxOp::kBra && inst.target < 0) {
          return Error("ptx:{}: branch to an unknown label", inst.line);
        }
      }
    }
    return Status::Ok();
  }

 private:
  PtxBlock& Current() {
    if (k_.blocks.empty()) k_.blocks.emplace_back();
    return k_.blocks.back();
  }
  void StartBlock(std::string label) {
    if (!k_.blocks.empty() && k_.blocks.back().insts.empty() && k_.blocks.back().label.empty() &&
        k_.blocks.size() > 1) {
      k_.blocks.back().label = std::move(label);
      return;
    }
    k_.blocks.push_back(PtxBlock{std::move(label), {}});
  }

  StatusOr<int32_t> Register(std::string_view name, int line) {
    if (auto it = named_.find(std::string(name)); it != named_.end()) return it->second;
    size_t d = name.size();
    while (d > 0 && std::isdigit(static_cast<unsigned char>(name[d - 1]))) --d;
    if (d < name.size()) {
      auto it = ranges_.find(std::string(name.substr(0, d)));
      int32_t n = 0;
      std::from_chars(name.data() + d, name.data() + name.size(), n);
      if (it != ranges_.end() && n < it->second.second) return it->second.first + n;
    }
    return Error("ptx:{}: undeclared register '{}'", line, name);
  }

  // One operand (not a vector or an address).
  StatusOr<PtxOperand> Scalar(std::string_view s, int line) {
    s = Trim(s);
    PtxOperand o;
    if (s.empty()) return Error("ptx:{}: empty operand", line);
    if (s[0] == '%') {
      for (const Special& sp : kSpecials) {
        if (s == sp.name) {
          o.kind = PtxOperand::kSpecial;
          o.imm = sp.value;
          return o;
        }
      }
      if (s.find('.') != std::string_view::npos || StartsWith(s, "%clock") ||
          StartsWith(s, "%globaltimer") || StartsWith(s, "%dynamic_smem") || s == "%smid") {
        o.kind = PtxOperand::kSpecial;
        o.imm = kOtherSpecial;
        return o;
      }
      o.kind = PtxOperand::kReg;
      ASSIGN_OR_RETURN(o.reg, Register(s, line));
      return o;
    }
    if (s[0] == '$') {
      o.kind = PtxOperand::kLabel;
      o.imm = static_cast<int64_t>(names_.size());
      names_.emplace_back(s);
      return o;
    }
    if (s[0] == '-' || std::isdigit(static_cast<unsigned char>(s[0]))) {
      o.kind = PtxOperand::kImm;
      bool neg = s[0] == '-';
      std::string_view digits = neg ? s.substr(1) : s;
      uint64_t v = 0;
      std::from_chars_result r{};
      if (digits.size() > 2 && digits[0] == '0' &&
          (digits[1] == 'x' || digits[1] == 'X' || digits[1] == 'f' || digits[1] == 'F' ||
           digits[1] == 'd' || digits[1] == 'D')) {
        r = std::from_chars(digits.data() + 2, digits.data() + digits.size(), v, 16);
      } else {
        r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
      }
      if (r.ec != std::errc()) {
        o.imm = 0;  // a decimal float or other literal: its value is never needed
        return o;
      }
      o.imm = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
      return o;
    }
    if (s == "_") return PtxOperand{};
    if (auto it = named_.find(std::string(s)); it != named_.end()) {
      o.kind = PtxOperand::kReg;
      o.reg = it->second;
      return o;
    }
    o.kind = PtxOperand::kSymbol;  // resolved by Finish
    o.imm = static_cast<int64_t>(names_.size());
    names_.emplace_back(s);
    return o;
  }

  // "[%rd1+16]" -> addr, offset.
  Status Address(std::string_view s, PtxOperand& addr, int64_t& offset, int line) {
    s = Trim(s);
    if (s.size() < 2 || s.front() != '[' || s.back() != ']') {
      return Error("ptx:{}: expected an address, got '{}'", line, s);
    }
    s = Trim(s.substr(1, s.size() - 2));
    size_t plus = s.find('+', 1);
    std::string_view base = Trim(s.substr(0, plus));
    offset = 0;
    if (plus != std::string_view::npos) {
      std::string_view off = Trim(s.substr(plus + 1));
      bool neg = !off.empty() && off[0] == '-';
      if (neg) off.remove_prefix(1);
      int64_t v = 0;
      if (std::from_chars(off.data(), off.data() + off.size(), v).ec != std::errc()) {
        return Error("ptx:{}: bad address offset '{}'", line, off);
      }
      offset = neg ? -v : v;
    }
    if (!base.empty() && std::isdigit(static_cast<unsigned char>(base[0]))) {
      addr.kind = PtxOperand::kImm;
      std::from_chars(base.data(), base.data() + base.size(), addr.imm);
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(addr, Scalar(base, line));
    return Status::Ok();
  }

  // Splits at top-level commas.
  static std::vector<std::string_view> Split(std::string_view s) {
    std::vector<std::string_view> out;
    int depth = 0;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (c == '{' || c == '[') ++depth;
      if (c == '}' || c == ']') --depth;
      if (c == ',' && depth == 0) {
        out.push_back(Trim(s.substr(start, i - start)));
        start = i + 1;
      }
    }
    if (!Trim(s.substr(start)).empty()) out.push_back(Trim(s.substr(start)));
    return out;
  }

  // A vector "{%f1, %f2}" or a scalar, appended to `out`; a `|`-pair
  // ("%r1|%p1") is two registers.
  Status Values(std::string_view s, std::vector<PtxOperand>& out, int line) {
    s = Trim(s);
    if (!s.empty() && s.front() == '{') {
      if (s.back() != '}') return Error("ptx:{}: unterminated vector '{}'", line, s);
      for (std::string_view e : Split(s.substr(1, s.size() - 2))) {
        ASSIGN_OR_RETURN(PtxOperand o, Scalar(e, line));
        out.push_back(o);
      }
      return Status::Ok();
    }
    if (size_t bar = s.find('|'); bar != std::string_view::npos) {
      ASSIGN_OR_RETURN(PtxOperand a, Scalar(s.substr(0, bar), line));
      ASSIGN_OR_RETURN(PtxOperand b, Scalar(s.substr(bar + 1), line));
      out.push_back(a);
      out.push_back(b);
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(PtxOperand o, Scalar(s, line));
    out.push_back(o);
    return Status::Ok();
  }

  static void AddDsts(const std::vector<PtxOperand>& values, PtxInst& inst) {
    for (const PtxOperand& o : values) {
      if (o.kind == PtxOperand::kReg) inst.dsts.push_back(o.reg);
    }
  }

  // atom: a destination, an address, values; red: the same without the
  // destination.
  Status AtomicOperands(const std::vector<std::string_view>& ops, PtxInst& inst, int line) {
    size_t a = 0;
    if (!ops.empty() && !ops[0].empty() && ops[0][0] != '[') {
      std::vector<PtxOperand> d;
      RETURN_IF_ERROR(Values(ops[0], d, line));
      AddDsts(d, inst);
      a = 1;
    }
    if (a >= ops.size()) return Error("ptx:{}: atomic needs an address", line);
    RETURN_IF_ERROR(Address(ops[a], inst.addr, inst.offset, line));
    for (size_t i = a + 1; i < ops.size(); ++i) RETURN_IF_ERROR(Values(ops[i], inst.srcs, line));
    return Status::Ok();
  }

  Status Operands(std::string_view text, PtxInst& inst, int line) {
    std::vector<std::string_view> ops = Split(text);
    auto values = [&](size_t i, std::vector<PtxOperand>& out) {
      return i < ops.size() ? Values(ops[i], out, line) : Status::Ok();
    };
    switch (inst.op) {
      case PtxOp::kSt:
        if (ops.size() < 2) return Error("ptx:{}: store needs an address and a value", line);
        RETURN_IF_ERROR(Address(ops[0], inst.addr, inst.offset, line));
        return values(1, inst.srcs);
      case PtxOp::kCpAsync: {
        if (ops.size() < 3) return Error("ptx:{}: cp.async needs two addresses and a size", line);
        RETURN_IF_ERROR(Address(ops[0], inst.addr, inst.offset, line));
        RETURN_IF_ERROR(Address(ops[1], inst.addr2, inst.offset2, line));
        ASSIGN_OR_RETURN(PtxOperand size, Scalar(ops[2], line));
        inst.bytes = static_cast<uint8_t>(size.imm);
        for (size_t i = 3; i < ops.size(); ++i) RETURN_IF_ERROR(values(i, inst.srcs));
        return Status::Ok();
      }
      case PtxOp::kLd:
      case PtxOp::kLdmatrix: {
        if (ops.size() < 2) return Error("ptx:{}: load needs a destination and an address", line);
        std::vector<PtxOperand> d;
        RETURN_IF_ERROR(values(0, d));
        AddDsts(d, inst);
        return Address(ops[1], inst.addr, inst.offset, line);
      }
      case PtxOp::kAtom:
        return AtomicOperands(ops, inst, line);
      case PtxOp::kWgmma: {
        // {d...}, {a...} | desc-a, desc-b, scale-d, imm-scale-a, imm-scale-b[, tnspose...]:
        // D is also C (the accumulators are tied), so it is read too.
        std::vector<PtxOperand> d;
        RETURN_IF_ERROR(values(0, d));
        AddDsts(d, inst);
        for (const PtxOperand& o : d) inst.srcs.push_back(o);
        for (size_t i = 1; i < ops.size(); ++i) RETURN_IF_ERROR(values(i, inst.srcs));
        return Status::Ok();
      }
      case PtxOp::kBar:
      case PtxOp::kBra:
      case PtxOp::kRet:
      case PtxOp::kFence:
      case PtxOp::kCpAsyncCommit:
      case PtxOp::kCpAsyncWait:
      case PtxOp::kWgmmaFence:
      case PtxOp::kWgmmaCommit:
      case PtxOp::kWgmmaWait:
        for (size_t i = 0; i < ops.size(); ++i) RETURN_IF_ERROR(values(i, inst.srcs));
        return Status::Ok();
      default:
        break;
    }
    if (ops.empty()) return Status::Ok();
    if (inst.op == PtxOp::kOther && (StartsWith(text, "[") || ops.size() == 1)) {
      // prefetch [a], a `call`, ...: read everything.
      for (size_t i = 0; i < ops.size(); ++i) {
        if (!ops[i].empty() && ops[i][0] == '[') continue;
        RETURN_IF_ERROR(values(i, inst.srcs));
      }
      return Status::Ok();
    }
    std::vector<PtxOperand> d;
    RETURN_IF_ERROR(values(0, d));
    AddDsts(d, inst);
    for (size_t i = 1; i < ops.size(); ++i) {
      if (!ops[i].empty() && ops[i][0] == '[') continue;
      RETURN_IF_ERROR(values(i, inst.srcs));
    }
    return Status::Ok();
  }

  PtxKernel& k_;
  std::vector<std::string> names_;  // of label and symbol operands, until Finish
  std::unordered_map<std::string, std::pair<int32_t, int32_t>> ranges_;
  std::unordered_map<std::string, int32_t> named_;
  int dynamic_count_ = 0;
};

// Strips a `//` comment (PTX has no string literals that could hold one).
std::string_view StripComment(std::string_view line) {
  size_t c = line.find("//");
  return c == std::string_view::npos ? line : line.substr(0, c);
}

int64_t ParseMaxThreads(std::string_view directive) {
  int64_t product = 1;
  std::string_view rest = Trim(directive.substr(directive.find_first_of(" \t") + 1));
  for (size_t start = 0; start < rest.size();) {
    size_t comma = rest.find(',', start);
    std::string_view v = Trim(rest.substr(start, comma - start));
    int64_t x = 1;
    std::from_chars(v.data(), v.data() + v.size(), x);
    product *= x;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return product;
}

}  // namespace

namespace {

// The module-level grammar: entries, their parameters and directives, and
// the body's statements, scopes and labels.
class ModuleParser {
 public:
  Status Line(std::string_view text, int line) {
    line_ = line;
    switch (state_) {
      case kModule:
        return ModuleLine(text);
      case kParams:
        if (text.find(".param") != std::string_view::npos) ++kernels_.back().params;
        if (text.find(')') != std::string_view::npos) state_ = kHeader;
        return Status::Ok();
      case kHeader:
        return HeaderLine(text);
      case kBody:
        return BodyLine(text);
    }
    return Status::Ok();
  }

  StatusOr<std::vector<PtxKernel>> Finish() {
    if (state_ != kModule) {
      return Error("ptx:{}: entry '{}' not closed", line_, kernels_.back().name);
    }
    return std::move(kernels_);
  }

 private:
  Status ModuleLine(std::string_view text) {
    // Module-level shared arrays (`.extern .shared ... name[]`) belong to
    // the module's entries; a module starts at `.version`.
    if (StartsWith(text, ".version")) module_shared_.clear();
    if (text.find(".entry") == std::string_view::npos) {
      if ((StartsWith(text, ".extern") || StartsWith(text, ".shared")) &&
          text.find(".shared") != std::string_view::npos) {
        module_shared_.emplace_back(text.substr(0, text.find(';')));
      }
      return Status::Ok();
    }
    const size_t e = text.find(".entry") + 6;
    const size_t open = text.find('(', e);
    kernels_.emplace_back();
    kernels_.back().name = std::string(Trim(text.substr(e, open - e)));
    parser_ = std::make_unique<KernelParser>(kernels_.back());
    state_ = text.find(')') != std::string_view::npos ? kHeader : kParams;
    if (open != std::string_view::npos && text.find(".param", open) != std::string_view::npos) {
      ++kernels_.back().params;
    }
    return Status::Ok();
  }

  Status HeaderLine(std::string_view text) {
    if (StartsWith(text, ".maxntid") || StartsWith(text, ".reqntid")) {
      kernels_.back().max_threads = static_cast<int32_t>(ParseMaxThreads(text));
    }
    if (text[0] != '{') return Status::Ok();
    state_ = kBody;
    depth_ = 1;
    for (const std::string& s : module_shared_) RETURN_IF_ERROR(parser_->Statement(s, line_));
    return Status::Ok();
  }

  // Statements end at `;` and may span lines; `{` and `}` outside a
  // statement open and close inline-assembly scopes, the last one the body.
  Status BodyLine(std::string_view text) {
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      const bool empty = Trim(statement_).empty();
      if (empty && (c == '{' || c == '}')) {
        depth_ += c == '{' ? 1 : -1;
        if (depth_ == 0) return EndKernel();
        continue;
      }
      if (empty) statement_line_ = line_;
      if (c == ';') {
        RETURN_IF_ERROR(parser_->Statement(statement_, statement_line_));
        statement_.clear();
        continue;
      }
      statement_ += c;
      const bool label = c == ':' && i + 1 == text.size() &&
                         statement_.find(' ') == std::string::npos && Trim(statement_)[0] == '$';
      if (label) {
        RETURN_IF_ERROR(parser_->Statement(statement_, statement_line_));
        statement_.clear();
      }
    }
    if (!statement_.empty()) statement_ += ' ';
    return Status::Ok();
  }

  Status EndKernel() {
    parser_->Finish();
    RETURN_IF_ERROR(parser_->CheckLabels());
    parser_.reset();
    state_ = kModule;
    statement_.clear();
    return Status::Ok();
  }

  enum { kModule, kParams, kHeader, kBody } state_ = kModule;
  std::vector<PtxKernel> kernels_;
  std::vector<std::string> module_shared_;
  std::unique_ptr<KernelParser> parser_;
  int depth_ = 0, line_ = 0, statement_line_ = 0;
  std::string statement_;
};

}  // namespace

StatusOr<std::vector<PtxKernel>> ParsePtx(std::string_view ptx) {
  ModuleParser parser;
  int line_number = 0;
  for (size_t pos = 0; pos < ptx.size();) {
    const size_t eol = ptx.find('\n', pos);
    std::string_view line = ptx.substr(pos, eol == std::string_view::npos ? eol : eol - pos);
    pos = eol == std::string_view::npos ? ptx.size() : eol + 1;
    ++line_number;
    const std::string_view text = Trim(StripComment(line));
    if (!text.empty()) RETURN_IF_ERROR(parser.Line(text, line_number));
  }
  return parser.Finish();
}

}  // namespace gptc::perf
