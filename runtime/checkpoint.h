// Training checkpoints: a directory of two safetensors files.
//
//   DIR/model.safetensors  the parameters, f32, with Hugging Face GPT-2 names
//                          (wte.weight, wpe.weight, h.0.ln_1.weight, h.0.attn.c_attn.weight, ...)
//   DIR/optim.safetensors  the AdamW moments, adam_m.<name> and adam_v.<name>
//
// Both files carry the same __metadata__: "format": "pt", "gptc.step" (optimizer
// steps done), the data loader's position "gptc.data.epoch", "gptc.data.shard",
// "gptc.data.sequence", and "gptc.vocab" / "gptc.wte_rows".
//
// Note [padded wte]: our token table has padded_vocab rows (50304 for GPT-2)
// where Hugging Face's has 50257. The checkpoint stores the padded table as it
// is, so that resuming is exact (the padding rows are trained by weight decay
// only, but they are state); "gptc.wte_rows" says how many rows it has and
// "gptc.vocab" how many are real. An exporter to HF keeps the first 50257 rows.
//
// Each file is written atomically (temp name, fsync, rename), the optimizer
// file first: a crash leaves every file whole, and a model file newer than
// its optimizer file is caught at load by comparing their steps.
#ifndef GPTC_RUNTIME_CHECKPOINT_H_
#define GPTC_RUNTIME_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/support/status.h"
#include "frontend/param.h"
#include "runtime/cpu_device.h"
#include "runtime/data_loader.h"
#include "runtime/trainer.h"

namespace gptc::rt {

// Everything a checkpoint holds, independent of the device that trains.
struct CheckpointData {
  int64_t step = 0;
  DataLoader::State data;
  int64_t vocab = 50257;  // real rows of wte.weight (Note [padded wte])
  std::vector<frontend::ParamSpec> params;
  std::vector<std::vector<float>> values, adam_m, adam_v;  // parallel to params
  std::map<std::string, std::string> extra_metadata;       // written to both files
};

// Writes DIR/model.safetensors and DIR/optim.safetensors (creating DIR).
Status SaveCheckpoint(const std::string& dir, const CheckpointData& data);
// Reads a checkpoint whose parameters must be exactly `params` (names, shapes).
StatusOr<CheckpointData> LoadCheckpoint(const std::string& dir,
                                        const std::vector<frontend::ParamSpec>& params);

// Any trainer's state as checkpoint data (through the host), and back.
StatusOr<CheckpointData> CaptureTrainer(Trainer& trainer,
                                        const std::vector<frontend::ParamSpec>& params,
                                        const DataLoader::State& data, int64_t vocab);
Status RestoreTrainer(const CheckpointData& data, Trainer* trainer);

// The CPU trainer's state as checkpoint data, and back.
CheckpointData CaptureCpuTrainer(const CpuTrainer& trainer,
                                 const std::vector<frontend::ParamSpec>& params,
                                 const DataLoader::State& data, int64_t vocab);
void RestoreCpuTrainer(const CheckpointData& data, CpuTrainer* trainer);

}  // namespace gptc::rt

#endif  // GPTC_RUNTIME_CHECKPOINT_H_
