#include "compiler/support/ptx_stats.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string>

namespace gptc {
namespace {

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The opcode's first component: "add" of "add.rn.f32".
std::string_view Head(std::string_view opcode) {
  return opcode.substr(0, std::min(opcode.find('.'), opcode.size()));
}

// Whether the opcode's suffixes name a floating-point type.
bool IsFloatTyped(std::string_view opcode) {
  for (std::string_view t : {".f32", ".f64", ".f16", ".bf16", ".f16x2", ".bf16x2"}) {
    const size_t at = opcode.rfind(t);
    if (at != std::string_view::npos && at + t.size() == opcode.size()) return true;
  }
  return false;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The body of an entry without its comments: `// ...` to the end of a line.
std::string WithoutComments(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '/' && i + 1 < body.size() && body[i + 1] == '/') {
      while (i < body.size() && body[i] != '\n') ++i;
    }
    if (i < body.size()) out.push_back(body[i]);
  }
  return out;
}

// The work of one mma statement in m16n8k16 products of a warp: an mma of
// m M n N k K does M N K / 2048; a wgmma (of a warpgroup: a warp's quarter of
// its M rows) M N K / 8192, so wgmma.m64n64k16 does 8.
double MmaTiles(std::string_view opcode) {
  size_t at = opcode.find(".m");
  while (at != std::string_view::npos &&
         !(at + 2 < opcode.size() && std::isdigit(static_cast<unsigned char>(opcode[at + 2])))) {
    at = opcode.find(".m", at + 1);  // past ".mma_async"
  }
  if (at == std::string_view::npos) return 0;
  int64_t dims[3] = {0, 0, 0};
  size_t i = at + 2;
  for (int d = 0; d < 3; ++d) {
    while (i < opcode.size() && std::isdigit(static_cast<unsigned char>(opcode[i]))) {
      dims[d] = 10 * dims[d] + (opcode[i++] - '0');
    }
    if (d < 2 && (i >= opcode.size() || opcode[i] != "nk"[d])) return 0;
    ++i;
  }
  const double work = static_cast<double>(dims[0] * dims[1] * dims[2]) / 2048;
  return Head(opcode) == "wgmma" ? work / 4 : work;
}

// One statement of Note [counting PTX]: its class, and the labels before it
// and the label it branches to, for the loops.
struct Statement {
  PtxClass cls = PtxClass::kOther;
  double tiles = 0;                 // an mma's warp-level m16n8k16 products (MmaTiles)
  std::vector<std::string> labels;  // defined right before it
  std::string target;               // bra's label, or empty
};

// The statements of an entry's body (between its outer braces); directives
// count nothing but `.shared` arrays add their bytes to `shared_bytes`.
std::vector<Statement> Statements(std::string_view body, int64_t& shared_bytes) {
  std::vector<Statement> out;
  std::vector<std::string> pending_labels;
  const std::string text = WithoutComments(body);
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    std::string_view s = Trim(std::string_view(text).substr(start, end - start));
    start = end + 1;
    // Labels ("$L__BB0_3:") and braces of nested scopes before the statement.
    for (;;) {
      s = Trim(s);
      if (!s.empty() && (s.front() == '{' || s.front() == '}')) {
        s.remove_prefix(1);
        continue;
      }
      const size_t colon = s.find(':');
      const size_t space = s.find_first_of(" \t\n");
      if (colon == std::string_view::npos || (space != std::string_view::npos && space < colon)) {
        break;
      }
      pending_labels.emplace_back(s.substr(0, colon));
      s.remove_prefix(colon + 1);
    }
    if (s.empty()) continue;
    if (s.front() == '.') {  // a directive: `.reg`, `.shared .align 16 .b8 name[18432]`
      if (StartsWith(s, ".shared")) {
        const size_t open = s.rfind('['), close = s.rfind(']');
        const size_t bytes_at = s.find(".b8");
        const std::string_view size = open == std::string_view::npos || close < open
                                          ? std::string_view()
                                          : s.substr(open + 1, close - open - 1);
        if (bytes_at != std::string_view::npos && !size.empty() && size.size() < 12 &&
            std::all_of(size.begin(), size.end(), [](char ch) { return std::isdigit(ch); })) {
          shared_bytes += std::stoll(std::string(size));
        }
      }
      continue;
    }
    if (s.front() == '@') {  // a guard: `@%p1 bra $L__BB0_3`, `@!%p2 st...`
      const size_t space = s.find_first_of(" \t");
      s = space == std::string_view::npos ? std::string_view() : Trim(s.substr(space));
    }
    const size_t space = s.find_first_of(" \t\n");
    const std::string_view opcode = s.substr(0, space);
    Statement st;
    st.cls = ClassifyPtx(opcode);
    if (st.cls == PtxClass::kMma) st.tiles = MmaTiles(opcode);
    st.labels = std::move(pending_labels);
    pending_labels.clear();
    if (Head(opcode) == "bra" && space != std::string_view::npos) {
      st.target = std::string(Trim(s.substr(space)));
    }
    out.push_back(std::move(st));
  }
  return out;
}

PtxCounts Count(const std::vector<Statement>& statements, size_t begin, size_t end) {
  PtxCounts c;
  for (size_t i = begin; i < end; ++i) {
    ++c.by_class[static_cast<int>(statements[i].cls)];
    c.mma_tiles += statements[i].tiles;
  }
  return c;
}

// The innermost loops holding an mma (Note [counting PTX]).
std::vector<PtxCounts> MmaLoops(const std::vector<Statement>& statements) {
  std::map<std::string, size_t> label_at;
  for (size_t i = 0; i < statements.size(); ++i) {
    for (const std::string& l : statements[i].labels) label_at[l] = i;
  }
  // Each label's loop: from the label to the last branch back to it.
  std::map<size_t, size_t> loops;  // begin -> end (exclusive)
  for (size_t i = 0; i < statements.size(); ++i) {
    auto it = label_at.find(statements[i].target);
    if (it == label_at.end() || it->second > i) continue;
    size_t& end = loops[it->second];
    end = std::max(end, i + 1);
  }
  // Ranges that overlap without nesting are one loop with two branches
  // back (a uniform branch inside its body): their union.
  for (bool merged = true; merged;) {
    merged = false;
    for (auto a = loops.begin(); a != loops.end() && !merged; ++a) {
      for (auto b = std::next(a); b != loops.end(); ++b) {
        if (b->first < a->second && b->second > a->second) {
          a->second = b->second;
          loops.erase(b);
          merged = true;
          break;
        }
      }
    }
  }
  auto has_mma = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (statements[i].cls == PtxClass::kMma) return true;
    }
    return false;
  };
  std::vector<PtxCounts> out;
  for (const auto& [begin, end] : loops) {
    if (!has_mma(begin, end)) continue;
    const bool holds_inner = std::any_of(loops.begin(), loops.end(), [&](const auto& other) {
      return other.first >= begin && other.second <= end &&
             (other.first != begin || other.second != end) && has_mma(other.first, other.second);
    });
    if (!holds_inner) out.push_back(Count(statements, begin, end));
  }
  return out;
}

}  // namespace

std::string_view PtxClassName(PtxClass c) {
  static constexpr std::array<std::string_view, kNumPtxClasses> kNames = {
      "mma",  "ldmatrix", "exp",   "float",   "convert", "mask",    "integer", "move",
      "load", "store",    "async", "barrier", "shuffle", "control", "other"};
  return kNames[static_cast<int>(c)];
}

PtxClass ClassifyPtx(std::string_view opcode) {
  const std::string_view head = Head(opcode);
  if (head == "mma" || StartsWith(opcode, "wgmma.mma_async")) return PtxClass::kMma;
  if (head == "wgmma") return PtxClass::kBarrier;  // wgmma.fence, commit_group, wait_group
  if (head == "ldmatrix") return PtxClass::kLdmatrix;
  if (head == "ex2" || head == "lg2") return PtxClass::kExp;
  if (head == "cvt" || head == "cvta") return PtxClass::kConvert;
  if (head == "setp" || head == "selp" || head == "set" || head == "slct") return PtxClass::kMask;
  if (head == "mov") return PtxClass::kMove;
  if (head == "ld" || head == "ldu") return PtxClass::kLoad;
  if (head == "st") return PtxClass::kStore;
  if (head == "cp") return PtxClass::kAsyncCopy;
  if (head == "bar" || head == "barrier" || head == "membar" || head == "fence") {
    return PtxClass::kBarrier;
  }
  if (head == "shfl") return PtxClass::kShuffle;
  if (head == "bra" || head == "ret" || head == "call" || head == "exit") return PtxClass::kControl;
  static constexpr std::string_view kArithmetic[] = {
      "add", "sub", "mul",  "mad",   "fma",  "div",  "rem", "min",      "max",  "neg",
      "abs", "rcp", "sqrt", "rsqrt", "shl",  "shr",  "and", "or",       "xor",  "not",
      "bfe", "bfi", "popc", "clz",   "brev", "prmt", "sad", "copysign", "testp"};
  if (std::find(std::begin(kArithmetic), std::end(kArithmetic), head) != std::end(kArithmetic)) {
    return IsFloatTyped(opcode) ? PtxClass::kFloat : PtxClass::kInteger;
  }
  return PtxClass::kOther;
}

int64_t PtxCounts::total() const {
  int64_t n = 0;
  for (int64_t c : by_class) n += c;
  return n;
}

double PtxCounts::PerMma() const {
  return mma_tiles == 0 ? 0.0 : static_cast<double>(total()) / mma_tiles;
}

std::vector<PtxKernelStats> AnalyzePtx(std::string_view ptx) {
  std::vector<PtxKernelStats> out;
  size_t at = 0;
  while ((at = ptx.find(".entry", at)) != std::string_view::npos) {
    size_t name_begin = at + 6;
    while (name_begin < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[name_begin]))) {
      ++name_begin;
    }
    size_t name_end = name_begin;
    while (name_end < ptx.size() &&
           (std::isalnum(static_cast<unsigned char>(ptx[name_end])) || ptx[name_end] == '_' ||
            ptx[name_end] == '$' || ptx[name_end] == '.')) {
      ++name_end;
    }
    // The body: the braces after the parameter list, matched.
    const size_t open = ptx.find('{', ptx.find(')', name_end));
    if (open == std::string_view::npos) break;
    size_t close = open;
    for (int depth = 0; close < ptx.size(); ++close) {
      if (ptx[close] == '{') ++depth;
      if (ptx[close] == '}' && --depth == 0) break;
    }
    PtxKernelStats k;
    k.name = std::string(ptx.substr(name_begin, name_end - name_begin));
    const std::vector<Statement> statements =
        Statements(ptx.substr(open + 1, close - open - 1), k.static_shared_bytes);
    k.whole = Count(statements, 0, statements.size());
    k.mma_loops = MmaLoops(statements);
    out.push_back(std::move(k));
    at = close;
  }
  return out;
}

int64_t BlocksPerSm(int64_t threads, int64_t registers, int64_t shared_bytes) {
  constexpr int64_t kRegisters = 65536, kShared = 228 * 1024, kReserved = 1024;
  constexpr int64_t kThreads = 2048, kBlocks = 32;
  if (threads <= 0) return 0;
  int64_t blocks = std::min(kBlocks, kThreads / threads);
  if (registers > 0) {
    // Registers are allocated per warp, 256 at a time.
    const int64_t warps = (threads + 31) / 32;
    const int64_t per_warp = (registers * 32 + 255) / 256 * 256;
    blocks = std::min(blocks, kRegisters / (per_warp * warps));
  }
  blocks = std::min(blocks, kShared / (shared_bytes + kReserved));
  return blocks;
}

}  // namespace gptc
