// Training checkpoints: a directory of two safetensors files and the model's
// configuration.
//
//   DIR/model.safetensors  the parameters, f32, with Hugging Face GPT-2 names
//                          (wte.weight, wpe.weight, h.0.ln_1.weight, h.0.attn.c_attn.weight, ...)
//   DIR/optim.safetensors  the AdamW moments, adam_m.<name> and adam_v.<name>
//   DIR/config.json        the model (Note [checkpoint config])
//
// Both files carry the same __metadata__ (runtime/checkpoint_metadata.h, which
// range-checks every field when it reads them): "format": "pt", "gptc.step"
// (optimizer steps done), the data loader's position "gptc.data.epoch",
// "gptc.data.shard", "gptc.data.sequence", and "gptc.vocab" / "gptc.wte_rows";
// then, when known, the run that wrote it, "gptc.run_id" (Note [checkpoint
// ownership] in tools/gptrun/checkpoint_dir.h), and what its data loader read,
// "gptc.data.train", "gptc.data.files", "gptc.data.seq", "gptc.data.seed"
// (Note [data source]); and "gptc.checksum" over all of it (Note [checkpoint
// checksums]).
//
// Note [padded wte]: our token table has padded_vocab rows (50304 for GPT-2)
// where Hugging Face's has 50257. The checkpoint stores the padded table as it
// is, so that resuming is exact (the padding rows are trained by weight decay
// only, but they are state); "gptc.wte_rows" says how many rows it has and
// "gptc.vocab" how many are real. An exporter to HF keeps the first 50257 rows.
//
// Note [checkpoint config]: config.json holds the model's configuration with
// the keys of the artifact manifest's "model" object:
//   {"name": "gpt2-124m", "layers": 12, "heads": 12, "width": 768,
//    "positions": 1024, "vocab": 50257, "padded_vocab": 50304}
// so that a checkpoint says what it is without the artifact that trained it;
// `gptc export-hf` needs it (the head count is in no tensor's shape). It is
// gptc's own file, not Hugging Face's (it has no "model_type", so transformers
// refuses the directory instead of misreading it); export-hf writes theirs.
// Checkpoints from before it have none and still resume.
//
// Each file is written atomically (temp name, fsync, rename), config.json
// and the optimizer file first: a crash leaves every file whole, and a model
// file newer than its optimizer file is caught at load by comparing their
// steps.
#ifndef GPTC_RUNTIME_CHECKPOINT_H_
#define GPTC_RUNTIME_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/support/status.h"
#include "compiler/program/param.h"
#include "runtime/cpu_device.h"
#include "runtime/checkpoint_metadata.h"
#include "runtime/data_loader.h"
#include "compiler/program/model_config.h"
#include "runtime/safetensors.h"
#include "runtime/trainer.h"

namespace gptc::rt {

// Everything a checkpoint holds, independent of the device that trains.
struct CheckpointData {
  int64_t step = 0;
  DataLoader::State data;
  DataSource data_source;
  std::string run_id;          // empty in checkpoints from before run ids
  program::ModelConfig model;  // config.json; model.vocab: the real rows of wte.weight (Note [padded wte])
  std::vector<program::ParamSpec> params;
  std::vector<std::vector<float>> values, adam_m, adam_v;  // parallel to params
  std::map<std::string, std::string> extra_metadata;       // written to both files
};

// Writes DIR/config.json, DIR/optim.safetensors and DIR/model.safetensors
// (creating DIR); fails naming config.json when data.model is not a valid
// config or its padded_vocab is not the rows of wte.weight.
Status SaveCheckpoint(const std::string& dir, const CheckpointData& data);
// Reads a checkpoint whose parameters must be exactly `params` (names, shapes).
// Without config.json (an older checkpoint) only model.vocab is known. With
// kModelOnly (generation) optim.safetensors is not read and the moments are
// zero. A Hugging Face model directory is refused, pointing to gptc
// import-hf.
enum class CheckpointParts { kAll, kModelOnly };
StatusOr<CheckpointData> LoadCheckpoint(const std::string& dir,
                                        const std::vector<program::ParamSpec>& params,
                                        CheckpointParts parts = CheckpointParts::kAll);

// DIR/config.json, checked: sizes positive, heads dividing the width, vocab
// within padded_vocab. Errors name the file and the key; a Hugging Face
// config.json (one with "model_type": gptc export-hf's) says to import it.
StatusOr<program::ModelConfig> ReadCheckpointConfig(const std::string& dir);
// DIR/model.safetensors, its checksum verified (Note [checkpoint checksums]).
StatusOr<SafeTensors> ReadCheckpointModel(const std::string& dir);

// Any trainer's state as checkpoint data (through the host), and back.
StatusOr<CheckpointData> CaptureTrainer(Trainer& trainer,
                                        const std::vector<program::ParamSpec>& params,
                                        const DataLoader::State& data, const program::ModelConfig& model);
Status RestoreTrainer(const CheckpointData& data, Trainer* trainer);

// The CPU trainer's state as checkpoint data, and back.
CheckpointData CaptureCpuTrainer(const CpuTrainer& trainer,
                                 const std::vector<program::ParamSpec>& params,
                                 const DataLoader::State& data, const program::ModelConfig& model);
void RestoreCpuTrainer(const CheckpointData& data, CpuTrainer* trainer);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_CHECKPOINT_H_
