// GPT-2 model configurations: the published sizes, a tiny one for tests and
// the CPU demo, command-line overrides, validation and parameter counts.
#ifndef GPTC_MODELS_CONFIG_H_
#define GPTC_MODELS_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/program/model_config.h"
#include "compiler/support/status.h"

namespace gptc::models {

inline constexpr int64_t kGpt2Vocab = program::kGpt2Vocab;
// Rows of the embedding table are padded to a multiple of this, so the
// logits matmul has friendly shapes (50,257 -> 50,304); the padded classes
// are excluded from the softmax.
inline constexpr int64_t kVocabPadMultiple = 128;

struct GptConfig {
  std::string name;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t width = 0;      // C, the residual stream
  int64_t positions = 0;  // rows of the position table: the longest sequence
  int64_t vocab = kGpt2Vocab;
  int64_t padded_vocab = 0;  // rows of the token table, >= vocab

  int64_t head_dim() const { return heads > 0 ? width / heads : 0; }
};

// Field-wise replacements from the command line (--layers --heads --width).
struct ConfigOverrides {
  std::optional<int64_t> layers, heads, width;
};

// Rounds `vocab` up to a multiple of kVocabPadMultiple.
int64_t PadVocab(int64_t vocab);

// gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, in that order.
const std::vector<GptConfig>& GptConfigs();
// The named config, or "unknown model 'x' (known: gpt2-tiny, ...)".
StatusOr<GptConfig> FindGptConfig(std::string_view name);
GptConfig ApplyOverrides(GptConfig config, const ConfigOverrides& overrides);

// Checks sizes are positive and heads divide the width; one-line errors
// naming the config ("gpt2-124m: --heads 7 does not divide --width 768").
Status ValidateGptConfig(const GptConfig& config);
// Also checks a traced batch and sequence: positive, seq within the
// position table, and every activation's element count within int64.
Status ValidateTraceShape(const GptConfig& config, int64_t batch, int64_t seq);

// The config as the artifact and the checkpoints record it.
program::ModelConfig ModelConfigOf(const GptConfig& config);

// Parameters with the token table at `vocab_rows` rows: the published
// counts use the real vocabulary (124,439,808 for gpt2-124m); the traced
// module holds the padded table.
int64_t ParameterCount(const GptConfig& config, int64_t vocab_rows);

}  // namespace gptc::models

#endif  // GPTC_MODELS_CONFIG_H_
