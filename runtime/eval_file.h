// Multiple-choice evaluation sets (HellaSwag) in llm.c's eval file format.
//
// The file: a header of 256 little-endian int32 (magic 20240522, version 1,
// the number of examples, the longest example in bytes, the rest zero), then
// every example as a stream of uint16:
//   65535 (the start marker), the example's size in bytes (its whole stream,
//   marker included), its index, its label (the correct completion), the
//   number of completions, the context's length and tokens, then for each
//   completion its length and tokens.
// gpt-tokenize --eval hellaswag writes it (docs/EVAL.md); llm.c's
// dev/data/hellaswag.py writes the same bytes.
//
//   ASSIGN_OR_RETURN(EvalSet set, ReadEvalFile("hellaswag_val.bin"));
//   for (const EvalExample& e : set.examples) ... e.context, e.completions[e.label] ...
#ifndef GPTC_RUNTIME_EVAL_FILE_H_
#define GPTC_RUNTIME_EVAL_FILE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/program/model_config.h"
#include "compiler/support/status.h"

namespace gptc::rt {

inline constexpr int32_t kEvalMagic = 20240522;
inline constexpr int32_t kEvalVersion = 1;
inline constexpr int64_t kEvalHeaderBytes = 256 * 4;
inline constexpr uint16_t kEvalStartMarker = 65535;
// Marker, size, index, label, completion count, context length.
inline constexpr int64_t kEvalExampleFields = 6;

// One question: a context and its candidate completions, `label` the right one.
struct EvalExample {
  int64_t index = 0;
  int64_t label = 0;
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> completions;
  bool operator==(const EvalExample&) const = default;
};

// The examples of an eval file, in file order.
struct EvalSet {
  std::vector<EvalExample> examples;
  int64_t longest_example_bytes = 0;  // as the header says (and the examples confirm)
};

// The bytes of an eval file holding `examples` (their own index fields are
// written). Refuses what the format cannot hold: no examples, 65536 or more,
// a label outside the completions, no completions, a token id of 65535 or
// more, an example of 65536 bytes or more.
StatusOr<std::string> EncodeEvalFile(const std::vector<EvalExample>& examples);

// Reads and validates an eval file: every header field, every example's
// marker, size, label, completion count and lengths (which must fill the
// example's size exactly), every token id (< `vocab`), and nothing after the
// last example. Errors are one line naming the file, the example (position,
// index, byte offset) and the field; a damaged file is kCorrupt, a missing
// one kNotFound.
StatusOr<EvalSet> ReadEvalFile(const std::string& path, int64_t vocab = program::kGpt2Vocab);
// The same for a file's bytes, read from `name` (for errors).
StatusOr<EvalSet> ParseEvalFile(std::string_view bytes, const std::string& name,
                                int64_t vocab = program::kGpt2Vocab);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_EVAL_FILE_H_
