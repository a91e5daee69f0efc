// A GPT-2 model's configuration as the runtime knows it, without the
// compiler's models library: read from an artifact's manifest (LoadProgram)
// or a checkpoint's config.json (ReadCheckpointConfig). Its fields and their
// JSON keys are those of the manifest's "model" object (docs/ARTIFACT.md).
#ifndef GPTC_RUNTIME_MODEL_CONFIG_H_
#define GPTC_RUNTIME_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

namespace gptc::rt {

struct ModelConfig {
  std::string name;  // "gpt2-tiny"
  int64_t layers = 0, heads = 0, width = 0;
  int64_t positions = 0;         // rows of wpe.weight: the longest sequence
  int64_t vocab = 50257;         // real tokens
  int64_t padded_vocab = 50304;  // rows of wte.weight (Note [padded wte] in checkpoint.h)

  bool operator==(const ModelConfig&) const = default;
};

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_MODEL_CONFIG_H_
