// A Hugging Face transformers GPT-2 model directory as a training checkpoint
// (runtime/checkpoint.h) at step 0, the inverse of runtime/hf_export.h:
//
//   HF_DIR/config.json        GPT2Config: n_layer, n_head, n_embd, n_positions
//                             (or n_ctx), vocab_size
//   HF_DIR/model.safetensors  a GPT2LMHeadModel or GPT2Model state dict, as
//                             save_pretrained writes it or as the released
//                             openai-community/gpt2 files hold it
//
// Note [HF GPT-2 import]: what is accepted, beyond Note [HF GPT-2 names and
// layouts] in runtime/hf_export.h read backwards.
//  * Names: with "transformer." in front (GPT2LMHeadModel's) or without
//    (GPT2Model's, and the released files'), tensor by tensor; the same
//    parameter under both names is refused, as nothing says which to take.
//  * h.N.attn.bias and h.N.attn.masked_bias are GPT2Attention's causal-mask
//    buffers, which older transformers saved with the weights: they are not
//    parameters (our attention is causal by construction) and are skipped.
//  * lm_head.weight, when present, must equal the token table value for value:
//    our logits reuse wte (tied embeddings), so an untied head would be
//    silently lost; it is refused instead.
//  * dtypes F32, F16 and BF16, widened exactly to f32 (every F16 and BF16
//    value is an f32 value); a non-finite value is refused, as gptrun never
//    writes a checkpoint holding one (Note [divergence] in
//    tools/gptrun/train_loop.h).
//  * wte.weight gets its padding rows (Note [padded wte]), zero: the softmax
//    leaves their classes out, so no value of theirs reaches the loss, and
//    zeros keep the checkpoint a function of the HF file alone.
// The checkpoint is a fresh run's: step 0, the data loader at its start, the
// AdamW moments zero, no run id and no data source (the first run to resume
// it owns it, Note [checkpoint ownership] in tools/gptrun/checkpoint_dir.h).
//
// Which of our models the sizes are (its name and padded vocabulary) is the
// caller's decision: runtime/ includes no model (tests/layering), so `gptc
// import-hf` makes it with models/. Its parameters, and their names and
// layouts in HF's files, are compiler/program/gpt2_params.h's table.
#ifndef GPTC_RUNTIME_HF_IMPORT_H_
#define GPTC_RUNTIME_HF_IMPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/program/model_config.h"
#include "compiler/support/status.h"
#include "runtime/safetensors.h"

namespace gptc::rt {

// The metadata key that names the directory a checkpoint was imported from.
inline constexpr char kImportedFromKey[] = "gptc.imported_from";

// The sizes in HF_DIR/config.json, unnamed and unpadded (name "",
// padded_vocab = vocab). Refuses a model_type other than "gpt2", a missing or
// non-positive size, heads not dividing the width, and an n_inner other than
// 4 * n_embd; errors name the file and the key. The other GPT2Config fields
// (activation, epsilon, dropout, ...) are not read.
StatusOr<program::ModelConfig> ReadHfConfig(const std::string& hf_dir);

// The values of `model`'s parameters (program::Gpt2ParamSpecs, in their
// order) from a GPT-2 state dict read from `path` (for errors), f32,
// wte.weight padded to model.padded_vocab rows with zeros. Every parameter
// must be there with its shape (wte.weight with model.vocab rows); any tensor
// that is neither a parameter, a mask buffer nor a tied lm_head.weight is
// refused. Errors name `path` and the tensor as the file names it.
StatusOr<std::vector<std::vector<float>>> HfParamValues(const SafeTensors& hf,
                                                        const program::ModelConfig& model,
                                                        const std::string& path);

struct HfImportSummary {
  program::ModelConfig model;
  int64_t tensors = 0;  // parameters written to CKPT_DIR/model.safetensors
  int64_t values = 0;   // elements over those, padding rows included
};

// Reads HF_DIR/model.safetensors as the parameters of `model` (ReadHfConfig's
// sizes, named and padded by the caller) and writes the checkpoint CKPT_DIR
// (creating it and its parents; its config.json, model.safetensors and
// optim.safetensors are replaced, each atomically), with metadata
// kImportedFromKey = hf_dir. Nothing is written unless every tensor was read
// and checked; a CKPT_DIR that exists and is not a directory is refused.
StatusOr<HfImportSummary> ImportHuggingFace(const std::string& hf_dir,
                                            const program::ModelConfig& model,
                                            const std::string& ckpt_dir);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_HF_IMPORT_H_
