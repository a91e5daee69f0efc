// gptrun generate: text from a trained checkpoint and a prompt, on any
// device, through the artifact's logits entry (the sampler of
// tools/gptrun/sampler.h, which also makes the samples during training).
//
//   gptrun generate gpt2-tiny.gptx --resume out/ckpt/step_000400 --prompt "The"
//          --max-tokens 50 --temperature 0.8 --top-k 40 --seed 1
//
// The prompt starts a document: the context is <|endoftext|> and the prompt's
// tokens, which must fit the logits entry's window (the artifact's --seq).
// The generated text goes to standard output as it is drawn; notes go to
// standard error. Temperature 0 is greedy (the likeliest token each time), and
// the same seed draws the same text on every device that computes the same
// logits.
#ifndef GPTC_TOOLS_GPTRUN_GENERATE_H_
#define GPTC_TOOLS_GPTRUN_GENERATE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gptc::tools {

struct GenerateOptions {
  std::string artifact;
  std::string device;  // "cpu", "gpu", "emu", or empty: as gptrun chooses for training
  int gpu = -1;
  bool emu_checks = true;
  bool trust_artifact = false;  // as TrainOptions::trust_artifact
  std::string checkpoint;  // a step_NNNNNN directory
  std::string prompt;      // text; empty: generate from <|endoftext|> alone
  std::string tokenizer_dir;
  int64_t max_tokens = 64;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 0;
  bool stop_at_end_of_text = true;  // end at a generated <|endoftext|>
  bool stream = true;               // write the text to stdout as it is drawn
};

struct GenerateResult {
  std::vector<int32_t> context;  // <|endoftext|> and the prompt's tokens
  std::vector<int32_t> tokens;   // the generated tokens
  std::string text;              // their text
  std::string device;
  std::string error;  // the one-line error of a failed call, else empty
};

// Generates; returns the exit code (0; 1 when the input or the work fails; 2
// for a bad request) and fills `result`.
int Generate(const GenerateOptions& options, GenerateResult* result);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_GENERATE_H_
