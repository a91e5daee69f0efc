#include "runtime/tokenizer.h"

#include <algorithm>
#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "compiler/support/file.h"

namespace gptc::rt {
namespace {

// --- Unicode classes (Note [unicode classes]) -------------------------------

struct Range {
  char32_t lo, hi;
};

// Letters (\p{L}), sorted. Ranges follow the Unicode general categories
// Lu/Ll/Lt/Lm/Lo of the listed blocks, leaving out their marks and symbols.
constexpr Range kLetters[] = {
    {0x41, 0x5A},     {0x61, 0x7A},       {0xAA, 0xAA},     {0xB5, 0xB5},     {0xBA, 0xBA},
    {0xC0, 0xD6},     {0xD8, 0xF6},       {0xF8, 0x2C1},    {0x2C6, 0x2D1},   {0x2E0, 0x2E4},
    {0x2EC, 0x2EC},   {0x2EE, 0x2EE},     {0x370, 0x374},   {0x376, 0x377},   {0x37A, 0x37D},
    {0x37F, 0x37F},   {0x386, 0x386},     {0x388, 0x38A},   {0x38C, 0x38C},   {0x38E, 0x3A1},
    {0x3A3, 0x3F5},   {0x3F7, 0x481},     {0x48A, 0x52F},   {0x531, 0x556},   {0x559, 0x559},
    {0x560, 0x588},   {0x5D0, 0x5EA},     {0x5EF, 0x5F2},   {0x620, 0x64A},   {0x66E, 0x66F},
    {0x671, 0x6D3},   {0x6D5, 0x6D5},     {0x904, 0x939},   {0x93D, 0x93D},   {0x950, 0x950},
    {0x958, 0x961},   {0x971, 0x980},     {0xE01, 0xE30},   {0xE32, 0xE33},   {0xE40, 0xE46},
    {0x10A0, 0x10C5}, {0x10D0, 0x10FA},   {0x10FC, 0x1248}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D},   {0x1F50, 0x1F57}, {0x1F59, 0x1F7D}, {0x1F80, 0x1FB4},
    {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2071, 0x2071},
    {0x207F, 0x207F}, {0x2090, 0x209C},   {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D},   {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2139},   {0x2C00, 0x2CE4}, {0x3005, 0x3006}, {0x3031, 0x3035},
    {0x303B, 0x303C}, {0x3041, 0x3096},   {0x309D, 0x309F}, {0x30A1, 0x30FA}, {0x30FC, 0x30FF},
    {0x3105, 0x312F}, {0x3131, 0x318E},   {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xA000, 0xA48C},
    {0xAC00, 0xD7A3}, {0xF900, 0xFA6D},   {0xFB00, 0xFB06}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A},
    {0xFF66, 0xFFBE}, {0x20000, 0x2FA1D},
};

// Numbers (\p{N}: Nd, Nl, No), sorted.
constexpr Range kNumbers[] = {
    {0x30, 0x39},     {0xB2, 0xB3},     {0xB9, 0xB9},     {0xBC, 0xBE},     {0x660, 0x669},
    {0x6F0, 0x6F9},   {0x966, 0x96F},   {0xE50, 0xE59},   {0x2070, 0x2070}, {0x2074, 0x2079},
    {0x2080, 0x2089}, {0x2150, 0x2182}, {0x2185, 0x2189}, {0x2460, 0x249B}, {0x24EA, 0x24FF},
    {0x2776, 0x2793}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0x3038, 0x303A}, {0x3192, 0x3195},
    {0x3220, 0x3229}, {0x3248, 0x324F}, {0x3251, 0x325F}, {0x3280, 0x3289}, {0x32B1, 0x32BF},
    {0xFF10, 0xFF19},
};

template <size_t N>
bool InRanges(const Range (&ranges)[N], char32_t c) {
  const Range* it = std::upper_bound(std::begin(ranges), std::end(ranges), c,
                                     [](char32_t v, const Range& r) { return v < r.lo; });
  return it != std::begin(ranges) && c <= (it - 1)->hi;
}

// JavaScript's \s (the reference encoder's regex engine).
bool IsSpace(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return true;
  if (c < 0x80) return false;
  return c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

enum class CharClass { kLetter, kNumber, kSpace, kOther };

CharClass Classify(char32_t c) {
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return CharClass::kLetter;
    if (c >= '0' && c <= '9') return CharClass::kNumber;
    return IsSpace(c) ? CharClass::kSpace : CharClass::kOther;
  }
  if (IsSpace(c)) return CharClass::kSpace;
  if (InRanges(kLetters, c)) return CharClass::kLetter;
  if (InRanges(kNumbers, c)) return CharClass::kNumber;
  return CharClass::kOther;
}

// Decodes the code point at `text[i]`; invalid UTF-8 yields one "other" byte.
std::pair<char32_t, size_t> DecodeUtf8(std::string_view text, size_t i) {
  const unsigned char b0 = text[i];
  if (b0 < 0x80) return {b0, 1};
  size_t len = b0 >= 0xF0 && b0 < 0xF8 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
  if (len == 0 || i + len > text.size()) return {0xFFFD, 1};
  char32_t c = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const unsigned char b = text[i + k];
    if ((b & 0xC0) != 0x80) return {0xFFFD, 1};
    c = (c << 6) | (b & 0x3F);
  }
  return {c, len};
}

// --- GPT-2's byte <-> unicode table ----------------------------------------

// GPT-2 writes each byte of a symbol as a printable code point: the bytes
// '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68
// bytes map to 256, 257, ... in byte order.
std::array<char32_t, 256> ByteToUnicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

// The bytes a symbol of encoder.json / vocab.bpe stands for.
StatusOr<std::string> SymbolToBytes(std::string_view symbol) {
  static const auto* decoder = [] {
    auto* map = new std::unordered_map<char32_t, unsigned char>();
    std::array<char32_t, 256> table = ByteToUnicode();
    for (int b = 0; b < 256; ++b) (*map)[table[b]] = static_cast<unsigned char>(b);
    return map;
  }();
  std::string bytes;
  for (size_t i = 0; i < symbol.size();) {
    auto [c, len] = DecodeUtf8(symbol, i);
    auto it = decoder->find(c);
    if (it == decoder->end())
      return Error("symbol '{}' has code point U+{:04X} outside GPT-2's byte table", symbol,
                   static_cast<uint32_t>(c));
    bytes.push_back(static_cast<char>(it->second));
    i += len;
  }
  return bytes;
}

std::string PairKey(std::string_view a, std::string_view b) {
  std::string key;
  key.reserve(a.size() + b.size() + 1);
  key.push_back(static_cast<char>(a.size()));
  key.append(a);
  key.append(b);
  return key;
}

}  // namespace

std::vector<std::string_view> Tokenizer::PreTokenize(std::string_view text) {
  std::vector<std::string_view> out;
  const size_t n = text.size();
  auto class_at = [&](size_t i) { return Classify(DecodeUtf8(text, i).first); };
  auto next = [&](size_t i) { return i + DecodeUtf8(text, i).second; };
  // End of the run of `cls` starting at i.
  auto run_end = [&](size_t i, CharClass cls) {
    while (i < n && class_at(i) == cls) i = next(i);
    return i;
  };
  size_t i = 0;
  while (i < n) {
    // 's|'t|'re|'ve|'m|'ll|'d
    if (text[i] == '\'' && i + 1 < n) {
      std::string_view rest = text.substr(i + 1, 2);
      size_t len = 0;
      if (rest[0] == 's' || rest[0] == 't' || rest[0] == 'm' || rest[0] == 'd') {
        len = 2;
      } else if (rest == "re" || rest == "ve" || rest == "ll") {
        len = 3;
      }
      if (len > 0) {
        out.push_back(text.substr(i, len));
        i += len;
        continue;
      }
    }
    const CharClass cls = class_at(i);
    // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: an optional space, then a run.
    size_t start = i;
    CharClass run_cls = cls;
    if (text[i] == ' ' && i + 1 < n) {
      CharClass after = class_at(i + 1);
      if (after != CharClass::kSpace) {
        run_cls = after;
        start = i + 1;
      }
    }
    if (run_cls != CharClass::kSpace) {
      size_t end = run_end(start, run_cls);
      out.push_back(text.substr(i, end - i));
      i = end;
      continue;
    }
    // `\s+(?!\S)|\s+`: a run of spaces gives up its last one when a non-space
    // follows, so that " word" keeps its space; a single space run stays whole.
    size_t end = run_end(i, CharClass::kSpace);
    if (end < n) {
      size_t last = i;  // start of the run's last code point
      for (size_t j = i; j < end; j = next(j)) last = j;
      if (last > i) end = last;
    }
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

StatusOr<Tokenizer> Tokenizer::Load(const std::string& dir) {
  const std::string encoder_path = dir + "/encoder.json";
  const std::string merges_path = dir + "/vocab.bpe";
  ASSIGN_OR_RETURN(std::string encoder, ReadFile(encoder_path));
  ASSIGN_OR_RETURN(std::string merges, ReadFile(merges_path));
  return FromContents(encoder, merges, encoder_path, merges_path);
}

StatusOr<Tokenizer> Tokenizer::FromContents(std::string_view encoder_json,
                                            std::string_view vocab_bpe,
                                            std::string_view encoder_name,
                                            std::string_view merges_name) {
  Tokenizer tok;
  nlohmann::json json = nlohmann::json::parse(encoder_json, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Error("{}: not a JSON object of symbol -> id", encoder_name);
  }
  for (const auto& [symbol, id] : json.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 1'000'000) {
      return Error("{}: symbol '{}' has no valid id", encoder_name, symbol);
    }
    const int32_t value = id.get<int32_t>();
    std::string bytes;
    if (symbol == kEndOfTextString) {
      bytes = symbol;
    } else {
      StatusOr<std::string> b = SymbolToBytes(symbol);
      if (!b.ok()) return b.status().WithPrefix(encoder_name);
      bytes = std::move(*b);
    }
    if (static_cast<size_t>(value) >= tok.id_to_bytes_.size()) tok.id_to_bytes_.resize(value + 1);
    tok.id_to_bytes_[value] = bytes;
    if (symbol != kEndOfTextString) tok.bytes_to_id_[bytes] = value;
  }
  if (tok.vocab_size() <= kEndOfText) {
    return Error("{}: {} symbols, GPT-2 needs {}", encoder_name, tok.vocab_size(), kEndOfText + 1);
  }

  // vocab.bpe: a "#version" line, then one merge "a b" per line, by rank.
  size_t pos = 0, line_no = 0;
  int32_t rank = 0;
  while (pos < vocab_bpe.size()) {
    size_t eol = vocab_bpe.find('\n', pos);
    if (eol == std::string_view::npos) eol = vocab_bpe.size();
    std::string_view line = vocab_bpe.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size()) {
      return Error("{}:{}: expected 'a b', got '{}'", merges_name, line_no, line);
    }
    StatusOr<std::string> a = SymbolToBytes(line.substr(0, space));
    StatusOr<std::string> b = SymbolToBytes(line.substr(space + 1));
    if (!a.ok()) return a.status().WithPrefix(fmt::format("{}:{}", merges_name, line_no));
    if (!b.ok()) return b.status().WithPrefix(fmt::format("{}:{}", merges_name, line_no));
    tok.merge_rank_.emplace(PairKey(*a, *b), rank++);
  }
  if (rank == 0) return Error("{}: no merges", merges_name);
  return tok;
}

const std::vector<int32_t>& Tokenizer::EncodeWord(std::string_view word) {
  std::string key(word);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;

  std::vector<std::string> symbols;
  for (char c : word) symbols.emplace_back(1, c);
  while (symbols.size() > 1) {
    // The adjacent pair with the lowest merge rank.
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t best_i = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = merge_rank_.find(PairKey(symbols[i], symbols[i + 1]));
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        best_i = i;
      }
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    // Merge every occurrence of that pair, left to right.
    const std::string first = symbols[best_i], second = symbols[best_i + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(std::move(symbols[i]));
        i += 1;
      }
    }
    symbols = std::move(merged);
  }
  std::vector<int32_t> ids;
  for (const std::string& s : symbols) {
    auto it = bytes_to_id_.find(s);
    if (it != bytes_to_id_.end()) {
      ids.push_back(it->second);
    } else {
      // Cannot happen with GPT-2's files (every byte is a symbol); fall back
      // to the single bytes rather than lose text.
      for (char c : s) {
        auto byte = bytes_to_id_.find(std::string(1, c));
        if (byte != bytes_to_id_.end()) ids.push_back(byte->second);
      }
    }
  }
  return cache_.emplace(std::move(key), std::move(ids)).first->second;
}

void Tokenizer::EncodeTo(std::string_view text, std::vector<int32_t>* out) {
  while (true) {
    const size_t special = text.find(kEndOfTextString);
    std::string_view piece = text.substr(0, special);
    for (std::string_view word : PreTokenize(piece)) {
      const std::vector<int32_t>& ids = EncodeWord(word);
      out->insert(out->end(), ids.begin(), ids.end());
    }
    if (special == std::string_view::npos) break;
    out->push_back(kEndOfText);
    text.remove_prefix(special + kEndOfTextString.size());
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) {
  std::vector<int32_t> ids;
  EncodeTo(text, &ids);
  return ids;
}

std::string Tokenizer::DecodeOne(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "\xEF\xBF\xBD";  // U+FFFD
  return id_to_bytes_[id];
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) text += DecodeOne(id);
  return text;
}

}  // namespace gptc::rt
