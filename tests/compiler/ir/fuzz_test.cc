// Robustness of the parser, verifier and printer on mutated IR text.
//
// Valid modules are mutated at random (truncation, byte edits, token swaps,
// line duplication and deletion, numbers replaced by edge values), with a
// fixed seed. Every mutant must parse and verify cleanly (ok, or an error with
// a located message), and a mutant that is accepted must print to text that
// parses, verifies and prints back identically. Under ASan/UBSan this also
// checks the IR code for memory errors, leaks and undefined behaviour.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/ir/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"

namespace gptc::ir {
namespace {

constexpr std::string_view kSeedEverything = R"(module everything

%fused.add {
  %p0 = f32[2,3] parameter(0)
  %p1 = f32[2,3] parameter(1)
  ROOT %sum = f32[2,3] add(%p0, %p1)
}

%attn {
  %q = f32[1,2,4,8] parameter(0)
  %k = f32[1,2,4,8] parameter(1)
  %v = f32[1,2,4,8] parameter(2)
  %s = f32[1,2,4,4] dot(%q, %k), lhs_batch={0,1}, rhs_batch={0,1}, lhs_contracting={3}, rhs_contracting={3}
  %m = f32[1,2,4] reduce(%s), dimensions={3}, kind=max
  %mb = f32[1,2,4,4] broadcast(%m), dimensions={0,1,2}
  %e = f32[1,2,4,4] exp(%s)
  ROOT %o = f32[1,2,4,8] dot(%e, %v), lhs_batch={0,1}, rhs_batch={0,1}, lhs_contracting={3}, rhs_contracting={2}
}

%sce {
  %logits = f32[4,10] parameter(0)
  %targets = s32[4] parameter(1)
  %lmax = f32[4] reduce(%logits), dimensions={1}, kind=max
  %tf = f32[4] convert(%targets)
  ROOT %loss = f32[4] sub(%lmax, %tf)
}

ENTRY %main {
  %x = f32[2,3] parameter(0), meta="x in"
  %y = f32[2,3] parameter(1)
  %h = bf16[2,3] parameter(2)
  %ids = s32[5] parameter(3)
  %table = f32[10,3] parameter(4)
  %q = f32[1,2,4,8] parameter(5)
  %logits = f32[4,10] parameter(6)
  %targets = s32[4] parameter(7)
  %c = f32[] constant(0.1)
  %io = s32[2,3] iota(), iota_dimension=1
  %cv = f32[2,3] convert(%io)
  %cp = f32[2,3] copy(%x)
  %b = f32[2,3] broadcast(%c), dimensions={}
  %rs = f32[3,2] reshape(%x)
  %tr = f32[3,2] transpose(%x), dimensions={1,0}
  %sl = f32[1,3] slice(%x), slice={[0:2:2],[0:3]}
  %pd = f32[3,6] pad(%x, %c), low={0,1}, high={1,2}
  %cc = f32[4,3] concatenate(%x, %y), dimensions={0}
  %lt = pred[2,3] compare(%x, %y), direction=LT
  %sel = f32[2,3] select(%lt, %x, %y)
  %neg = f32[2,3] neg(%x)
  %tanh = f32[2,3] tanh(%neg)
  %erf = f32[2,3] erf(%tanh)
  %pow = f32[2,3] pow(%x, %erf)
  %rsum = f32[2] reduce(%x), dimensions={1}, kind=sum
  %rmax = f32[] reduce(%x), dimensions={0,1}, kind=max
  %rh = f32[3] reduce(%h), dimensions={0}, kind=sum
  %dot = f32[2,2] dot(%x, %y), lhs_contracting={1}, rhs_contracting={1}
  %g = f32[5,3] gather(%table, %ids), axis=0
  %sa = f32[10,3] scatter-add(%table, %ids, %g), axis=0
  %ar = f32[2,3] all-reduce(%x), kind=sum
  %f = f32[2,3] fusion(%x, %y), kind=loop, calls=%fused.add
  %f.opt = f32[2,3] fusion(%x, %cp), kind=optimizer, calls=%fused.add
  %att = f32[1,2,4,8] attention(%q, %q, %q), causal=true, scale=0.125, calls=%attn
  %loss = f32[4] softmax-cross-entropy(%logits, %targets), num_classes=9, calls=%sce
  %inner = (f32[], s32[5]) tuple(%rmax, %ids)
  %tup = (f32[2,3], f32[4], (f32[], s32[5])) tuple(%f, %loss, %inner)
  %gte = f32[4] get-tuple-element(%tup), index=1
  ROOT %out = (f32[4], f32[1,2,4,8], f32[2,3]) tuple(%gte, %att, %sel), meta="outputs"
}
)";

constexpr std::string_view kSeedConstants = R"(module constants

ENTRY %main {
  %f0 = f32[] constant(0.1)
  %f1 = f32[8] constant({0, -0, 1e-38, 1e-45, inf, -inf, nan, 3.4028235e+38})
  %b0 = bf16[4] constant({1, 1.0078125, -3.3895314e+38, 9.1835e-41})
  %h0 = f16[4] constant({65504, -65504, 6.1035156e-05, 5.9604645e-08})
  %s0 = s32[4] constant({-2147483648, -1, 0, 2147483647})
  %u0 = u16[3] constant({0, 1, 65535})
  %p0 = pred[2] constant({true, false})
  %e = f32[0] constant({})
  %w = f32[2,2] constant({1, 2, 3, 4})
  ROOT %t = (f32[], pred[2], f32[2,2]) tuple(%f0, %p0, %w)
}
)";

constexpr std::string_view kSeedTraining = R"(module train_step
// One MLP layer with a loss, its gradient pieces and an optimizer update.

%gelu {
  %x = bf16[8,64] parameter(0)
  %t = bf16[8,64] tanh(%x)
  %s = bf16[8,64] mul(%x, %t)
  ROOT %r = bf16[8,64] add(%x, %s)
}

%update {
  %w = f32[64,16] parameter(0)
  %gw = f32[64,16] parameter(1)
  %lr = f32[] constant(0.001)
  %lrb = f32[64,16] broadcast(%lr), dimensions={}
  %step = f32[64,16] mul(%gw, %lrb)
  ROOT %nw = f32[64,16] sub(%w, %step)
}

%xent {
  %l = f32[8,16] parameter(0)
  %t = s32[8] parameter(1)
  ROOT %m = f32[8] reduce(%l), dimensions={1}, kind=max
}

ENTRY %main {
  %tokens = s32[8] parameter(0), meta="batch.tokens"
  %targets = s32[8] parameter(1)
  %wte = f32[100,32] parameter(2), meta="wte"
  %w1 = f32[32,64] parameter(3)
  %w2 = f32[64,16] parameter(4)
  %emb = f32[8,32] gather(%wte, %tokens), axis=0, meta="h.0.\"emb\""
  %h1 = f32[8,64] dot(%emb, %w1), lhs_contracting={1}, rhs_contracting={0}, meta="h.0.mlp.c_fc"
  %h1b = bf16[8,64] convert(%h1)
  %act = bf16[8,64] fusion(%h1b), kind=loop, calls=%gelu, meta="h.0.mlp\\gelu"
  %actf = f32[8,64] convert(%act)
  %logits = f32[8,16] dot(%actf, %w2), lhs_contracting={1}, rhs_contracting={0}
  %loss = f32[8] softmax-cross-entropy(%logits, %targets), calls=%xent
  %total = f32[] reduce(%loss), dimensions={0}, kind=sum
  %gw2 = f32[64,16] dot(%actf, %logits), lhs_contracting={0}, rhs_contracting={0}
  %gw2s = f32[64,16] all-reduce(%gw2), kind=sum
  %nw2 = f32[64,16] fusion(%w2, %gw2s), kind=optimizer, calls=%update
  %gemb = f32[8,32] dot(%h1, %w1), lhs_contracting={1}, rhs_contracting={1}
  %gwte = f32[100,32] scatter-add(%wte, %tokens, %gemb), axis=0
  %mask = pred[8] compare(%tokens, %targets), direction=NE
  %zero = f32[8] broadcast(%total), dimensions={}
  %masked = f32[8] select(%mask, %loss, %zero)
  %first = f32[4] slice(%masked), slice={[0:8:2]}
  ROOT %out = (f32[], f32[64,16], f32[100,32], f32[4]) tuple(%total, %nw2, %gwte, %first)
}
)";

constexpr std::string_view kSeedSmall = R"(module small

ENTRY %main {
  %a = f16[4,4] parameter(0)
  %b = u16[3] parameter(1)
  %t = f16[4,4] transpose(%a), dimensions={1,0}
  %g = f16[3,4] gather(%t, %b), axis=0
  %i = f16[3,4] iota(), iota_dimension=0
  %z = f16[] constant(-0)
  %p = f16[5,6] pad(%g, %z), low={1,1}, high={1,1}
  %r = f16[30] reshape(%p)
  %gt = pred[30] compare(%r, %r), direction=GT
  %ge = pred[30] compare(%r, %r), direction=GE
  %eq = pred[30] compare(%r, %r), direction=EQ
  %ab = f16[3,4] abs(%i)
  %sq = f16[3,4] sqrt(%ab)
  %rq = f16[3,4] rsqrt(%sq)
  %lg = f16[3,4] log(%rq)
  %ex = f16[3,4] exp(%lg)
  %mx = f16[3,4] max(%ex, %g)
  %mn = f16[3,4] min(%mx, %g)
  %dv = f16[3,4] div(%mn, %g)
  %e = () tuple()
  ROOT %o = ((), f16[3,4], pred[30]) tuple(%e, %dv, %gt)
}
)";

// A small deterministic generator (std distributions differ across standard libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0.
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }

 private:
  uint64_t state_;
};

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

// Tokens as [begin, end) offsets: runs of name characters, or single other non-space characters.
std::vector<std::pair<size_t, size_t>> Tokens(const std::string& s) {
  std::vector<std::pair<size_t, size_t>> tokens;
  for (size_t i = 0; i < s.size();) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
    } else if (IsWordChar(s[i])) {
      size_t j = i;
      while (j < s.size() && IsWordChar(s[j])) ++j;
      tokens.push_back({i, j});
      i = j;
    } else {
      tokens.push_back({i, i + 1});
      ++i;
    }
  }
  return tokens;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size() - 1;
    lines.push_back(s.substr(start, end - start + 1));
    start = end + 1;
  }
  return lines;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l;
  return out;
}

// Bytes worth inserting: the grammar's punctuation, digits and keyword letters.
constexpr std::string_view kInteresting = "%{}[](),=:\"\\-.+ \n/0123456789eEx_%ROOT";
// Edge values for numbers: extremes of each dtype, of int64, and beyond double.
constexpr std::string_view kEdgeNumbers =
    "0 -1 1 2 65535 65536 -0 2147483647 2147483648 -2147483649 9223372036854775807 "
    "-9223372036854775808 99999999999999999999 1e400 -1e400 1e-400 nan inf -inf 0.5 1e-45 "
    "281474976710656 16777217 true false 3.4028236e+38";

// A random word of the space-separated `words`.
std::string_view PickWord(std::string_view words, Rng& rng) {
  std::vector<std::string_view> list;
  for (size_t start = 0; start < words.size();) {
    size_t end = std::min(words.find(' ', start), words.size());
    list.push_back(words.substr(start, end - start));
    start = end + 1;
  }
  return list[rng.Below(list.size())];
}

// Words of the grammar, to swap one for another: dtypes, opcodes, attribute names and values.
constexpr std::string_view kVocabulary =
    "f32 bf16 f16 s32 u16 pred parameter constant iota convert copy broadcast reshape transpose "
    "slice pad concatenate select compare neg exp abs add mul pow reduce dot gather scatter-add "
    "all-reduce fusion attention softmax-cross-entropy tuple get-tuple-element dimensions axis "
    "index kind calls meta low high lhs_batch rhs_batch lhs_contracting rhs_contracting "
    "iota_dimension num_classes causal scale grad_dtype direction EQ NE LT GE sum max loop gemm "
    "optimizer cross_entropy true false ROOT ENTRY main x q";

// Returns a random token (as offsets) whose first character satisfies `pred`, if any.
template <typename Pred>
std::optional<std::pair<size_t, size_t>> PickToken(const std::string& s, Rng& rng, Pred pred) {
  std::vector<std::pair<size_t, size_t>> matching;
  for (auto t : Tokens(s)) {
    if (pred(s[t.first])) matching.push_back(t);
  }
  if (matching.empty()) return std::nullopt;
  return matching[rng.Below(matching.size())];
}

std::string Mutate(std::string s, Rng& rng) {
  if (s.empty()) return s;
  auto is_digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  auto is_alpha = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
  switch (rng.Below(14)) {
    case 0:  // truncate
      s.resize(rng.Below(s.size()));
      break;
    case 1:  // flip one bit
      s[rng.Below(s.size())] ^= static_cast<char>(1 << rng.Below(8));
      break;
    case 2:  // overwrite a byte with any byte
      s[rng.Below(s.size())] = static_cast<char>(rng.Below(256));
      break;
    case 3:  // insert a byte the grammar cares about
      s.insert(s.begin() + rng.Below(s.size() + 1), kInteresting[rng.Below(kInteresting.size())]);
      break;
    case 4: {  // delete a short range
      size_t at = rng.Below(s.size());
      s.erase(at, 1 + rng.Below(8));
      break;
    }
    case 5: {  // swap two tokens
      auto tokens = Tokens(s);
      if (tokens.size() < 2) break;
      auto a = tokens[rng.Below(tokens.size())];
      auto b = tokens[rng.Below(tokens.size())];
      if (a.first > b.first) std::swap(a, b);
      if (a.first == b.first || a.second > b.first) break;
      std::string ta = s.substr(a.first, a.second - a.first);
      std::string tb = s.substr(b.first, b.second - b.first);
      s.replace(b.first, tb.size(), ta);  // the later one first keeps offsets valid
      s.replace(a.first, ta.size(), tb);
      break;
    }
    case 6: {  // replace a token by a copy of another one
      auto tokens = Tokens(s);
      if (tokens.size() < 2) break;
      auto a = tokens[rng.Below(tokens.size())];
      auto b = tokens[rng.Below(tokens.size())];
      std::string tb = s.substr(b.first, b.second - b.first);
      s.replace(a.first, a.second - a.first, tb);
      break;
    }
    case 7: {  // replace a number by an edge value
      auto t = PickToken(s, rng, is_digit);
      if (!t) break;
      s.replace(t->first, t->second - t->first, PickWord(kEdgeNumbers, rng));
      break;
    }
    case 8: {  // duplicate a line
      std::vector<std::string> lines = Lines(s);
      size_t i = rng.Below(lines.size());
      lines.insert(lines.begin() + rng.Below(lines.size() + 1), lines[i]);
      s = Join(lines);
      break;
    }
    case 9: {  // delete a line
      std::vector<std::string> lines = Lines(s);
      lines.erase(lines.begin() + rng.Below(lines.size()));
      s = Join(lines);
      break;
    }
    case 10: {  // swap two lines
      std::vector<std::string> lines = Lines(s);
      std::swap(lines[rng.Below(lines.size())], lines[rng.Below(lines.size())]);
      s = Join(lines);
      break;
    }
    case 11:
    case 12: {  // replace a number by a small one (shapes, dims, indices stay plausible)
      auto t = PickToken(s, rng, is_digit);
      if (!t) break;
      s.replace(t->first, t->second - t->first, std::to_string(rng.Below(10)));
      break;
    }
    case 13: {  // replace a word by another word of the grammar
      auto t = PickToken(s, rng, is_alpha);
      if (!t) break;
      s.replace(t->first, t->second - t->first, PickWord(kVocabulary, rng));
      break;
    }
  }
  return s;
}

// "<input>:LINE:COL: " with positive numbers.
bool HasLocation(std::string_view message) {
  constexpr std::string_view kPrefix = "<input>:";
  if (message.substr(0, kPrefix.size()) != kPrefix) return false;
  size_t i = kPrefix.size();
  for (int part = 0; part < 2; ++part) {
    size_t start = i;
    while (i < message.size() && std::isdigit(static_cast<unsigned char>(message[i]))) ++i;
    if (i == start || message[start] == '0' || i >= message.size() || message[i] != ':') {
      return false;
    }
    ++i;
  }
  return message.substr(i, 1) == " ";
}

struct Tally {
  int mutations = 0;
  int cases = 0;
  int parse_errors = 0;
  int verify_errors = 0;
  int accepted = 0;
  int failures = 0;
};

// Checks one text; returns a description of the broken property, or "".
std::string CheckOne(std::string_view text, Tally& tally) {
  ++tally.cases;
  StatusOr<std::unique_ptr<Module>> parsed = ParseModule(text);
  if (!parsed.ok()) {
    ++tally.parse_errors;
    if (!HasLocation(parsed.status().message())) {
      return "parse error without <input>:line:col: " + parsed.status().message();
    }
    return "";
  }
  const Module& module = **parsed;
  Status verified = VerifyModule(module);
  if (!verified.ok()) {
    ++tally.verify_errors;
    // Everything the parser builds has a location, so every verifier error on parsed
    // text points at an instruction: "<input>:L:C: %name: ...".
    const std::string& m = verified.message();
    if (!HasLocation(m) || m.find(": %") == std::string::npos) {
      return "verifier error that does not locate an instruction: " + m;
    }
    return "";
  }
  ++tally.accepted;
  std::string printed = PrintModule(module);
  StatusOr<std::unique_ptr<Module>> reparsed = ParseAndVerifyModule(printed);
  if (!reparsed.ok()) {
    return fmt::format("printed text is rejected: {}\n--- printed:\n{}",
                       reparsed.status().message(), printed);
  }
  std::string reprinted = PrintModule(**reparsed);
  if (reprinted != printed) {
    return fmt::format("print is not stable\n--- printed:\n{}\n--- reprinted:\n{}", printed,
                       reprinted);
  }
  if (PrintModule(*module.Clone()) != printed) return "clone prints differently";
  return "";
}

TEST(FuzzTest, MutatedModulesNeverBreakTheParserVerifierOrPrinter) {
  const std::vector<std::string_view> seeds = {kSeedEverything, kSeedConstants, kSeedTraining,
                                               kSeedSmall};
  // The seeds themselves are valid, and canonical unless they have comments.
  for (std::string_view seed : seeds) {
    StatusOr<std::unique_ptr<Module>> m = ParseAndVerifyModule(seed);
    ASSERT_TRUE(m.ok()) << m.status().message();
    if (seed.find("//") == std::string_view::npos) {
      EXPECT_EQ(PrintModule(**m), seed);
    }
  }

  // About 18,000 mutations in all: ~0.5 s in Release, ~25 s under ASan in Debug.
  constexpr int kCasesPerSeed = 2750;
  Tally tally;
  Rng rng(0x67707463);  // "gptc"
  auto start = std::chrono::steady_clock::now();
  for (std::string_view seed : seeds) {
    for (int i = 0; i < kCasesPerSeed; ++i) {
      std::string text(seed);
      // Mostly one mutation (so that many mutants still verify), sometimes a few.
      int mutations = rng.Below(4) == 0 ? 2 + static_cast<int>(rng.Below(4)) : 1;
      for (int k = 0; k < mutations; ++k) text = Mutate(std::move(text), rng);
      tally.mutations += mutations;
      std::string broken = CheckOne(text, tally);
      if (!broken.empty() && ++tally.failures <= 5) {
        ADD_FAILURE() << broken << "\n--- mutant " << i << ":\n" << text;
      }
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("fuzz_seconds", fmt::format("{:.2f}", seconds));
  std::printf(
      "fuzz: %d mutations, %d cases in %.2f s: %d parse errors, %d verifier errors, %d accepted\n",
      tally.mutations, tally.cases, seconds, tally.parse_errors, tally.verify_errors,
      tally.accepted);

  EXPECT_EQ(tally.failures, 0);
  EXPECT_EQ(tally.cases, kCasesPerSeed * static_cast<int>(seeds.size()));
  EXPECT_GE(tally.mutations, 10000);
  EXPECT_GE(tally.cases, 10000);
  // The mutants exercise all three outcomes in earnest.
  EXPECT_GT(tally.parse_errors, tally.cases / 10);
  EXPECT_GT(tally.verify_errors, tally.cases / 20);
  EXPECT_GT(tally.accepted, tally.cases / 20);
}

// Inputs that once slipped through (or could have): each must be handled without UB.
TEST(FuzzTest, EdgeInputsAreHandled) {
  Tally tally;
  const std::string_view cases[] = {
      "",
      "module",
      "module m",
      "module m\nENTRY %main {",
      "module m\nENTRY %main {\n  ROOT %x = f32[",
      "module m\nENTRY %main {\n  ROOT %x = f32[] constant(",
      "module m\nENTRY %main {\n  ROOT %x = f32[] parameter(0), meta=\"\\",
      "module m\nENTRY %main {\n  ROOT %x = f32[] parameter(0), meta=\"\\\"",
      "module m\nENTRY %main {\n  ROOT %x = f32[0,281474976710656,281474976710656] "
      "parameter(0)\n}\n",
      "module m\nENTRY %main {\n  %x = f32[0,4] parameter(0)\n"
      "  ROOT %c = f32[0,8] concatenate(%x, %x), dimensions={1}\n}\n",
      "module m\nENTRY %main {\n  %x = f32[3] parameter(0)\n  %z = f32[] constant(0)\n"
      "  ROOT %p = f32[3] pad(%x, %z), low={9223372036854775807}, high={1}\n}\n",
      "module m\nENTRY %main {\n  %x = f32[3] parameter(0)\n"
      "  ROOT %s = f32[1] slice(%x), slice={[2:3:9223372036854775807]}\n}\n",
      "module m\nENTRY %main {\n  %x = f32[3] parameter(0)\n"
      "  ROOT %s = f32[1] slice(%x), slice={[-9223372036854775808:3]}\n}\n",
      "module m\nENTRY %main {\n  %x = f32[2] parameter(9223372036854775807)\n"
      "  ROOT %y = f32[2] parameter(-9223372036854775808)\n}\n",
      "module m\n%f {\n  ROOT %p = f32[2] parameter(4000000000)\n}\nENTRY %main {\n"
      "  %x = f32[2] parameter(0)\n  ROOT %y = f32[2] fusion(%x), calls=%f\n}\n",
      "module m\nENTRY %main {\n  %x = f32[2,3] parameter(0)\n"
      "  ROOT %t = f32[2,3] transpose(%x), dimensions={-9223372036854775808,1}\n}\n",
      "module m\nENTRY %main {\n  %x = (f32[2]) parameter(0)\n"
      "  ROOT %g = f32[2] get-tuple-element(%x), index=-9223372036854775808\n}\n",
      "module m\nENTRY %main {\n  ROOT %i = s32[2] iota(), iota_dimension=-1\n}\n",
      "module m\nENTRY %main {\n  ROOT %c = s32[2] constant({1e400, -1e400})\n}\n",
      "module m\nENTRY %main {\n  ROOT %c = u16[] constant(nan)\n}\n",
      "module m\nENTRY %main {\n  ROOT %c = pred[] constant(-0)\n}\n",
      "module m\nENTRY %main {\n  %l = f32[4,0] parameter(0)\n  %t = s32[4] parameter(1)\n"
      "  ROOT %x = f32[4] softmax-cross-entropy(%l, %t), num_classes=-1, calls=%main\n}\n",
      "module m\nENTRY %main {\n  %l = f32[] parameter(0)\n  %t = s32[] parameter(1)\n"
      "  ROOT %x = f32[] softmax-cross-entropy(%l, %t), calls=%main\n}\n",
  };
  for (std::string_view text : cases) {
    std::string broken = CheckOne(text, tally);
    EXPECT_EQ(broken, "") << text;
  }
  EXPECT_EQ(tally.cases, static_cast<int>(std::size(cases)));
  // The well-formed ones among them are accepted and round-trip.
  EXPECT_EQ(tally.accepted, 3);  // the empty concatenation, the huge stride, pred -0
}

}  // namespace
}  // namespace gptc::ir
