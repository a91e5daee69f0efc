#include "models/config.h"

#include <fmt/format.h>

#include "compiler/program/gpt2_params.h"

namespace gptc::models {

namespace {

// Generous but finite: keeps every product below in int64.
constexpr int64_t kMaxSize = int64_t{1} << 24;

GptConfig Make(std::string name, int64_t layers, int64_t heads, int64_t width, int64_t positions) {
  return GptConfig{std::move(name),     layers, heads, width, positions, kGpt2Vocab,
                   PadVocab(kGpt2Vocab)};
}

// a * b * c ... or nullopt on overflow.
std::optional<int64_t> Product(std::initializer_list<int64_t> xs) {
  int64_t p = 1;
  for (int64_t x : xs) {
    if (__builtin_mul_overflow(p, x, &p)) return std::nullopt;
  }
  return p;
}

}  // namespace

int64_t PadVocab(int64_t vocab) {
  return (vocab + kVocabPadMultiple - 1) / kVocabPadMultiple * kVocabPadMultiple;
}

const std::vector<GptConfig>& GptConfigs() {
  // The published GPT-2 sizes (Radford et al. 2019) and a tiny one with the
  // real vocabulary, small enough for the CPU evaluator.
  static const std::vector<GptConfig>* configs = new std::vector<GptConfig>{
      Make("gpt2-tiny", 2, 4, 64, 64),        Make("gpt2-124m", 12, 12, 768, 1024),
      Make("gpt2-350m", 24, 16, 1024, 1024),  Make("gpt2-774m", 36, 20, 1280, 1024),
      Make("gpt2-1558m", 48, 25, 1600, 1024),
  };
  return *configs;
}

StatusOr<GptConfig> FindGptConfig(std::string_view name) {
  std::string known;
  for (const GptConfig& c : GptConfigs()) {
    if (c.name == name) return c;
    known += known.empty() ? c.name : ", " + c.name;
  }
  return Error("unknown model '{}' (known: {})", name, known);
}

GptConfig ApplyOverrides(GptConfig config, const ConfigOverrides& overrides) {
  if (overrides.layers) config.layers = *overrides.layers;
  if (overrides.heads) config.heads = *overrides.heads;
  if (overrides.width) config.width = *overrides.width;
  return config;
}

Status ValidateGptConfig(const GptConfig& c) {
  struct Field {
    std::string_view name;
    int64_t value, max;
  };
  // Tracing is linear in the layer count; a few thousand is already absurd.
  for (Field f : {Field{"layers", c.layers, 4096}, Field{"heads", c.heads, kMaxSize},
                  Field{"width", c.width, kMaxSize}, Field{"positions", c.positions, kMaxSize},
                  Field{"vocab", c.vocab, kMaxSize}}) {
    if (f.value <= 0 || f.value > f.max) {
      return Error("{}: {} must be in [1, {}], got {}", c.name, f.name, f.max, f.value);
    }
  }
  if (c.width % c.heads != 0) {
    return Error("{}: heads ({}) must divide width ({})", c.name, c.heads, c.width);
  }
  if (c.padded_vocab < c.vocab || c.padded_vocab > kMaxSize) {
    return Error("{}: padded vocabulary {} must be in [{}, {}]", c.name, c.padded_vocab, c.vocab,
                 kMaxSize);
  }
  // Parameters: the widest matrices are 4C x C per layer.
  if (!Product({c.layers, 16, c.width, c.width})) {
    return Error("{}: {} layers of width {} is too large", c.name, c.layers, c.width);
  }
  return Status::Ok();
}

Status ValidateTraceShape(const GptConfig& c, int64_t batch, int64_t seq) {
  RETURN_IF_ERROR(ValidateGptConfig(c));
  if (batch <= 0 || batch > kMaxSize) {
    return Error("{}: batch must be in [1, {}], got {}", c.name, kMaxSize, batch);
  }
  if (seq <= 0) return Error("{}: seq must be positive, got {}", c.name, seq);
  if (seq > c.positions) {
    return Error("{}: seq {} exceeds the position table ({} positions)", c.name, seq, c.positions);
  }
  // The largest activations: attention scores (B, H, T, T), logits (B, T, V)
  // and the MLP hidden state (B, T, 4C).
  if (!Product({batch, c.heads, seq, seq}) || !Product({batch, seq, c.padded_vocab}) ||
      !Product({batch, seq, 4, c.width})) {
    return Error("{}: batch {} x seq {} is too large to index", c.name, batch, seq);
  }
  return Status::Ok();
}

program::ModelConfig ModelConfigOf(const GptConfig& c) {
  return {.name = c.name,
          .layers = c.layers,
          .heads = c.heads,
          .width = c.width,
          .positions = c.positions,
          .vocab = c.vocab,
          .padded_vocab = c.padded_vocab};
}

int64_t ParameterCount(const GptConfig& c, int64_t vocab_rows) {
  program::ModelConfig model = ModelConfigOf(c);
  model.padded_vocab = vocab_rows;
  int64_t count = 0;
  for (const program::Gpt2Param& p : program::Gpt2Params(model)) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    count += n;
  }
  return count;
}

}  // namespace gptc::models
