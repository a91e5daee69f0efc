#include "runtime/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "compiler/program/gpt2_params.h"
#include "compiler/support/file.h"

namespace gptc::rt {
namespace {

constexpr char kModelFile[] = "model.safetensors";
constexpr char kOptimFile[] = "optim.safetensors";
constexpr char kConfigFile[] = "config.json";

Status CheckConfig(const program::ModelConfig& model, const std::string& path) {
  return program::CheckModelConfig(model, path);
}

std::string ConfigJson(const program::ModelConfig& model) {
  return program::ModelConfigJson(model).dump(2) + "\n";
}

StatusOr<program::ModelConfig> ParseConfig(const std::string& text, const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Error("{}: not a JSON object", path);
  if (j.contains("model_type")) {
    const std::string dir = path.substr(0, path.rfind('/'));
    return Error(
        "{}: a Hugging Face model's config (gptc export-hf writes these), not a gptc "
        "checkpoint's: make one with gptc import-hf {} OUT_DIR, then use OUT_DIR",
        path, dir);
  }
  ASSIGN_OR_RETURN(program::ModelConfig model, program::ReadModelConfig(j, path));
  RETURN_IF_ERROR(CheckConfig(model, path));
  return model;
}

std::map<std::string, std::string> Metadata(const CheckpointData& data, int64_t wte_rows) {
  CheckpointMetadata meta{.step = data.step,
                          .data = data.data,
                          .vocab = data.model.vocab,
                          .wte_rows = wte_rows,
                          .run_id = data.run_id,
                          .data_source = data.data_source,
                          .extra = data.extra_metadata};
  return EncodeCheckpointMetadata(meta);
}

// The f32 values of `name`, checked against `spec`'s shape.
StatusOr<std::vector<float>> TensorFor(const SafeTensors& file, const std::string& path,
                                       const std::string& name, const program::ParamSpec& spec) {
  const SafeTensor* t = file.Find(name);
  if (t == nullptr) return Error("{}: no tensor '{}'", path, name);
  if (t->dtype != "F32" || t->shape != spec.shape.dims()) {
    return Error("{}: tensor '{}' is {}{}, the model needs F32{}", path, name, t->dtype,
                 ir::DimsToString(t->shape), ir::DimsToString(spec.shape.dims()));
  }
  return F32Values(*t);
}

std::vector<float> ToFloats(const eval::Literal& l) {
  return std::vector<float>(l.values.begin(), l.values.end());
}

void FromFloats(const std::vector<float>& v, eval::Literal* l) {
  l->values.assign(v.begin(), v.end());
}

}  // namespace

Status SaveCheckpoint(const std::string& dir, const CheckpointData& data) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Error("{}: {}", dir, std::strerror(errno));
  }
  int64_t wte_rows = 0;
  SafeTensors model, optim;
  for (size_t i = 0; i < data.params.size(); ++i) {
    const program::ParamSpec& spec = data.params[i];
    const std::vector<int64_t>& dims = spec.shape.dims();
    if (spec.name == program::Gpt2TokenTable().name && !dims.empty()) wte_rows = dims[0];
    model.tensors.push_back(F32Tensor(spec.name, dims, data.values[i]));
    optim.tensors.push_back(F32Tensor("adam_m." + spec.name, dims, data.adam_m[i]));
    optim.tensors.push_back(F32Tensor("adam_v." + spec.name, dims, data.adam_v[i]));
  }
  const std::string config_path = dir + "/" + kConfigFile;
  RETURN_IF_ERROR(CheckConfig(data.model, config_path));
  if (data.model.padded_vocab != wte_rows) {
    return Error("{}: 'padded_vocab' {} but wte.weight has {} rows", config_path,
                 data.model.padded_vocab, wte_rows);
  }
  model.metadata = optim.metadata = Metadata(data, wte_rows);
  model.metadata[kChecksumKey] = CheckpointChecksum(model);
  optim.metadata[kChecksumKey] = CheckpointChecksum(optim);
  RETURN_IF_ERROR(WriteFileAtomically(config_path, ConfigJson(data.model)));
  // Optimizer first: a model file is never newer than a whole optimizer file
  // without the step check in LoadCheckpoint noticing.
  RETURN_IF_ERROR(WriteSafeTensors(dir + "/" + kOptimFile, optim));
  return WriteSafeTensors(dir + "/" + kModelFile, model);
}

StatusOr<CheckpointData> LoadCheckpoint(const std::string& dir,
                                        const std::vector<program::ParamSpec>& params,
                                        CheckpointParts parts) {
  const std::string model_path = dir + "/" + kModelFile;
  const std::string optim_path = dir + "/" + kOptimFile;
  CheckpointData data;
  // config.json first: a Hugging Face directory is named as one, not as a
  // checkpoint lacking its optimizer file.
  if (access((dir + "/" + kConfigFile).c_str(), F_OK) == 0) {
    ASSIGN_OR_RETURN(data.model, ReadCheckpointConfig(dir));
  }
  ASSIGN_OR_RETURN(SafeTensors model, ReadCheckpointModel(dir));
  ASSIGN_OR_RETURN(CheckpointMetadata meta, DecodeCheckpointMetadata(model.metadata, model_path));
  SafeTensors optim;
  if (parts == CheckpointParts::kAll) {
    ASSIGN_OR_RETURN(optim, ReadSafeTensors(optim_path));
    RETURN_IF_ERROR(VerifyCheckpointChecksum(optim, optim_path));
    ASSIGN_OR_RETURN(CheckpointMetadata optim_meta,
                     DecodeCheckpointMetadata(optim.metadata, optim_path));
    if (optim_meta.step != meta.step) {
      return Error("{}: model is at step {} but {} is at step {}", dir, meta.step, kOptimFile,
                   optim_meta.step);
    }
  }
  data.step = meta.step;
  data.data = meta.data;
  data.model.vocab = meta.vocab;
  data.run_id = std::move(meta.run_id);
  data.data_source = std::move(meta.data_source);
  data.extra_metadata = std::move(meta.extra);
  if (model.tensors.size() != params.size()) {
    return Error("{}: {} tensors, the model has {} parameters", model_path, model.tensors.size(),
                 params.size());
  }
  data.params = params;
  for (const program::ParamSpec& spec : params) {
    ASSIGN_OR_RETURN(std::vector<float> v, TensorFor(model, model_path, spec.name, spec));
    data.values.push_back(std::move(v));
    if (parts != CheckpointParts::kAll) {  // zero moments: what a fresh optimizer holds
      data.adam_m.emplace_back(data.values.back().size(), 0.0f);
      data.adam_v.emplace_back(data.values.back().size(), 0.0f);
      continue;
    }
    ASSIGN_OR_RETURN(std::vector<float> m,
                     TensorFor(optim, optim_path, "adam_m." + spec.name, spec));
    ASSIGN_OR_RETURN(std::vector<float> s,
                     TensorFor(optim, optim_path, "adam_v." + spec.name, spec));
    data.adam_m.push_back(std::move(m));
    data.adam_v.push_back(std::move(s));
  }
  return data;
}

StatusOr<program::ModelConfig> ReadCheckpointConfig(const std::string& dir) {
  const std::string path = dir + "/" + kConfigFile;
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseConfig(text, path);
}

StatusOr<SafeTensors> ReadCheckpointModel(const std::string& dir) {
  const std::string path = dir + "/" + kModelFile;
  ASSIGN_OR_RETURN(SafeTensors model, ReadSafeTensors(path));
  RETURN_IF_ERROR(VerifyCheckpointChecksum(model, path));
  return model;
}

StatusOr<CheckpointData> CaptureTrainer(Trainer& trainer,
                                        const std::vector<program::ParamSpec>& params,
                                        const DataLoader::State& data, const program::ModelConfig& model) {
  ASSIGN_OR_RETURN(TrainerState state, trainer.ExportState());
  CheckpointData c;
  c.step = state.steps_done;
  c.data = data;
  c.model = model;
  c.params = params;
  c.values = std::move(state.values);
  c.adam_m = std::move(state.adam_m);
  c.adam_v = std::move(state.adam_v);
  return c;
}

Status RestoreTrainer(const CheckpointData& data, Trainer* trainer) {
  TrainerState state;
  state.steps_done = data.step;
  state.values = data.values;
  state.adam_m = data.adam_m;
  state.adam_v = data.adam_v;
  return trainer->ImportState(state);
}

CheckpointData CaptureCpuTrainer(const CpuTrainer& trainer,
                                 const std::vector<program::ParamSpec>& params,
                                 const DataLoader::State& data, const program::ModelConfig& model) {
  CheckpointData c;
  c.step = trainer.steps_done();
  c.data = data;
  c.model = model;
  c.params = params;
  for (size_t i = 0; i < params.size(); ++i) {
    c.values.push_back(ToFloats(trainer.param(i)));
    c.adam_m.push_back(ToFloats(trainer.adam_m(i)));
    c.adam_v.push_back(ToFloats(trainer.adam_v(i)));
  }
  return c;
}

void RestoreCpuTrainer(const CheckpointData& data, CpuTrainer* trainer) {
  for (size_t i = 0; i < data.params.size(); ++i) {
    FromFloats(data.values[i], &trainer->mutable_param(i));
    FromFloats(data.adam_m[i], &trainer->mutable_adam_m(i));
    FromFloats(data.adam_v[i], &trainer->mutable_adam_v(i));
  }
  trainer->set_steps_done(data.step);
}

}  // namespace gptc::rt
