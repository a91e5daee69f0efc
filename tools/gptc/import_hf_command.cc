// gptc import-hf HF_DIR CKPT_DIR: a Hugging Face GPT-2 model directory as a
// gptrun checkpoint at step 0 (runtime/hf_import.h has the mapping), the
// inverse of gptc export-hf.
#include <cstdio>
#include <optional>

#include "models/config.h"
#include "runtime/hf_import.h"
#include "tools/common/flags.h"
#include "tools/gptc/commands.h"

namespace gptc::tools {
namespace {

// Our GPT-2 of HF sizes (ReadHfConfig's): named as the built-in config of
// those sizes, if one is, else "hf-gpt2"; its vocabulary padded as every
// config's is. Checked as a trace of it would be, so that gptrun can compile
// and resume what the checkpoint holds.
StatusOr<program::ModelConfig> OurModel(const program::ModelConfig& sizes,
                                        const std::string& config_path) {
  models::GptConfig config{.name = "hf-gpt2",
                           .layers = sizes.layers,
                           .heads = sizes.heads,
                           .width = sizes.width,
                           .positions = sizes.positions,
                           .vocab = sizes.vocab,
                           .padded_vocab = models::PadVocab(sizes.vocab)};
  for (const models::GptConfig& c : models::GptConfigs()) {
    if (c.layers == config.layers && c.heads == config.heads && c.width == config.width &&
        c.positions == config.positions && c.vocab == config.vocab &&
        c.padded_vocab == config.padded_vocab) {
      config.name = c.name;
    }
  }
  // The shortest sequence: the parameters do not depend on the batch or sequence.
  if (Status s = models::ValidateTraceShape(config, 1, 1); !s.ok()) {
    return s.WithPrefix(config_path);
  }
  return models::ModelConfigOf(config);
}

}  // namespace

int ImportHfCommand(int argc, char** argv) {
  Flags flags("gptc import-hf", "HF_DIR CKPT_DIR",
              "Writes a Hugging Face transformers GPT-2 model (HF_DIR/config.json and "
              "HF_DIR/model.safetensors, as save_pretrained writes them; F32, F16 or BF16) as a "
              "gptrun checkpoint at step 0 with zero optimizer moments, for gptrun --resume "
              "CKPT_DIR. The model is named after the built-in config of its sizes (gptc models), "
              "else hf-gpt2; its token table gets zero padding rows. A tensor missing, misshapen, "
              "unknown, or an lm_head.weight not tied to the token table is refused. CKPT_DIR is "
              "created; it must not be HF_DIR, and a non-empty CKPT_DIR is refused unless "
              "--force (its config.json, model.safetensors and optim.safetensors are then "
              "replaced).");
  flags.Bool("force",
             "write into a non-empty CKPT_DIR, replacing its config.json, "
             "model.safetensors and optim.safetensors");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (flags.positional().size() != 2) {
    return Fail(UsageError("import-hf takes HF_DIR CKPT_DIR (gptc import-hf --help)"));
  }
  const std::string& hf = flags.positional()[0];
  const std::string& ckpt = flags.positional()[1];
  // The checkpoint's config.json and model.safetensors have the names of the
  // HF files: writing there would replace the model being read.
  if (Status s = CheckHfOutputDir("import-hf", hf, "HF_DIR", ckpt, "CKPT_DIR", flags.Has("force"));
      !s.ok()) {
    return Fail(s.WithCode(StatusCode::kUsage));
  }
  StatusOr<program::ModelConfig> sizes = rt::ReadHfConfig(hf);
  if (!sizes.ok()) return Fail(kExitFailure, sizes.status());
  StatusOr<program::ModelConfig> ours = OurModel(*sizes, hf + "/config.json");
  if (!ours.ok()) return Fail(kExitFailure, ours.status());
  StatusOr<rt::HfImportSummary> done = rt::ImportHuggingFace(hf, *ours, ckpt);
  if (!done.ok()) return Fail(kExitFailure, done.status());
  const program::ModelConfig& m = done->model;
  std::printf(
      "imported %s (%s: layers %lld, heads %lld, width %lld, vocab %lld padded to %lld) to %s: "
      "%lld tensors, %s values\n",
      hf.c_str(), m.name.c_str(), static_cast<long long>(m.layers), static_cast<long long>(m.heads),
      static_cast<long long>(m.width), static_cast<long long>(m.vocab),
      static_cast<long long>(m.padded_vocab), ckpt.c_str(), static_cast<long long>(done->tensors),
      WithThousands(done->values).c_str());
  return 0;
}

}  // namespace gptc::tools
