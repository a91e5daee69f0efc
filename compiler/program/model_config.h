// A GPT-2 model's configuration as the artifact and the checkpoints record
// it: the manifest's "model" object and a checkpoint's config.json, written
// and read by the one codec below (docs/ARTIFACT.md, docs/CHECKPOINTS.md).
#ifndef GPTC_COMPILER_PROGRAM_MODEL_CONFIG_H_
#define GPTC_COMPILER_PROGRAM_MODEL_CONFIG_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "compiler/support/status.h"

namespace gptc::program {

inline constexpr int64_t kGpt2Vocab = 50257;        // GPT-2's BPE tokens
inline constexpr int64_t kGpt2PaddedVocab = 50304;  // rows of its token table, a multiple of 128

struct ModelConfig {
  std::string name;  // "gpt2-tiny"
  int64_t layers = 0, heads = 0, width = 0;
  int64_t positions = 0;                    // rows of wpe.weight: the longest sequence
  int64_t vocab = kGpt2Vocab;               // real tokens
  int64_t padded_vocab = kGpt2PaddedVocab;  // rows of wte.weight (Note [padded wte] in
                                            // runtime/checkpoint.h)

  bool operator==(const ModelConfig&) const = default;
};

// The integer fields with their JSON keys, in the order written.
struct ModelConfigInt {
  const char* key;
  int64_t ModelConfig::*field;
};
std::span<const ModelConfigInt> ModelConfigInts();

// {"name", "layers", "heads", "width", "positions", "vocab", "padded_vocab"},
// in that order.
nlohmann::ordered_json ModelConfigJson(const ModelConfig& model);
// The config in `j`; errors name `where` and the field ("config.json: no
// 'heads'", "model: 'layers' is \"1\", not an integer"). Checks only the
// types: the readers check the values they need.
StatusOr<ModelConfig> ReadModelConfig(const nlohmann::json& j, std::string_view where);

// What the values of a config must satisfy: every integer positive and at
// most 2^24, heads dividing width, vocab at most padded_vocab. Errors start with `where`
// ("config.json: 'heads' 5 does not divide 'width' 64").
Status CheckModelConfig(const ModelConfig& model, std::string_view where);

}  // namespace gptc::program

#endif  // GPTC_COMPILER_PROGRAM_MODEL_CONFIG_H_
