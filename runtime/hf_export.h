// A training checkpoint (runtime/checkpoint.h) as a Hugging Face transformers
// GPT-2 model directory, the kind GPT2LMHeadModel.from_pretrained(OUT) loads:
//
//   OUT/config.json        GPT2Config: model_type "gpt2", architectures
//                          ["GPT2LMHeadModel"], the sizes from the checkpoint's
//                          config.json and GPT2Config's defaults for the rest
//   OUT/model.safetensors  GPT2LMHeadModel's state dict, f32, "format": "pt"
//
// Note [HF GPT-2 names and layouts]: what changes from our checkpoint. The
// table of compiler/program/gpt2_params.h holds each parameter's two names,
// its layout and its padding, and the exporter reads them there.
//  * Names: our parameters are named as GPT2Model's (wte.weight,
//    h.0.attn.c_attn.weight, ...); GPT2LMHeadModel holds GPT2Model as
//    `transformer`, so each name gets "transformer." in front, as its
//    save_pretrained writes them. lm_head.weight is left out: it is tied to
//    transformer.wte.weight (tie_word_embeddings, as our logits reuse wte), and
//    save_pretrained leaves tied copies out too. The attention-mask buffers
//    (attn.bias, attn.masked_bias) are not weights; transformers does not
//    expect them.
//  * Layouts: GPT-2's projections are Conv1D, y = x @ W + b with W (in, out);
//    frontend::Linear's weight is (in, out) as well, so c_attn, c_proj and c_fc
//    are copied as they are, not transposed. c_attn's 3C columns are q, k, v
//    in both (models/gpt2.cc slices at 0, C, 2C; GPT2Attention splits at C).
//  * wte.weight keeps its first `vocab` rows (Note [padded wte]): transformers
//    sizes the table by vocab_size, and the padding rows never get a logit.
//  * Arithmetic: our GELU is the tanh approximation ("gelu_new") and our
//    LayerNorm's epsilon 1e-5, GPT2Config's defaults; attention is scaled by
//    1/sqrt(head_dim) (scale_attn_weights).
#ifndef GPTC_RUNTIME_HF_EXPORT_H_
#define GPTC_RUNTIME_HF_EXPORT_H_

#include <cstdint>
#include <string>

#include "compiler/support/status.h"
#include "compiler/program/model_config.h"
#include "runtime/safetensors.h"

namespace gptc::rt {

// OUT/config.json's text: every GPT2Config field, the sizes from `model`.
// bos_token_id and eos_token_id are vocab - 1: GPT-2's <|endoftext|> (50256)
// is the last of its 50257 tokens, and stays within a smaller vocabulary.
std::string HfConfigJson(const program::ModelConfig& model);

// GPT2LMHeadModel's state dict from a checkpoint's model file (read from
// `path`, for errors): its tensors must be exactly the GPT-2 parameters of
// `model`, f32, with their shapes; errors name `path` and the tensor.
StatusOr<SafeTensors> HfStateDict(const SafeTensors& checkpoint, const program::ModelConfig& model,
                                  const std::string& path);

struct HfExportSummary {
  program::ModelConfig model;
  int64_t step = 0;     // of the checkpoint
  int64_t tensors = 0;  // written to OUT/model.safetensors
  int64_t values = 0;   // elements over those tensors
};

// Reads CKPT_DIR (config.json, model.safetensors with its checksum) and writes
// OUT_DIR/model.safetensors and OUT_DIR/config.json, each atomically, creating
// OUT_DIR. Nothing is written when the checkpoint is missing or corrupt; an
// OUT_DIR that exists and is not a directory is refused, naming it.
StatusOr<HfExportSummary> ExportHuggingFace(const std::string& ckpt_dir,
                                            const std::string& out_dir);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_HF_EXPORT_H_
