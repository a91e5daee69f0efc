#include "runtime/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

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
  ASSIGN_OR_RETURN(program::ModelConfig model, program::ReadModelConfig(j, path));
  RETURN_IF_ERROR(CheckConfig(model, path));
  return model;
}

std::map<std::string, std::string> Metadata(const CheckpointData& data, int64_t wte_rows) {
  std::map<std::string, std::string> meta = data.extra_metadata;
  meta["format"] = "pt";
  meta["gptc.step"] = std::to_string(data.step);
  meta["gptc.data.epoch"] = std::to_string(data.data.epoch);
  meta["gptc.data.shard"] = std::to_string(data.data.shard);
  meta["gptc.data.sequence"] = std::to_string(data.data.sequence);
  meta["gptc.vocab"] = std::to_string(data.model.vocab);
  meta["gptc.wte_rows"] = std::to_string(wte_rows);
  if (!data.run_id.empty()) meta["gptc.run_id"] = data.run_id;
  if (data.data_source.known()) {
    meta["gptc.data.train"] = data.data_source.train;
    meta["gptc.data.shards"] = data.data_source.shards;
    meta["gptc.data.seq"] = std::to_string(data.data_source.seq);
    meta["gptc.data.seed"] = data.data_source.seed;
  }
  return meta;
}

std::string MetaString(const SafeTensors& file, const std::string& key) {
  auto it = file.metadata.find(key);
  return it == file.metadata.end() ? "" : it->second;
}

StatusOr<int64_t> MetaInt(const SafeTensors& file, const std::string& path,
                          const std::string& key) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) return Error("{}: __metadata__ lacks '{}'", path, key);
  int64_t v = 0;
  const std::string& s = it->second;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return Error("{}: __metadata__ '{}' is '{}', not an integer", path, key, s);
  }
  return v;
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

// Note [checkpoint checksums]: FNV-1a-64 over every tensor's name, dtype,
// shape and bytes, in name order (a reader may list them in any), kept in the file's own
// __metadata__ (so a safetensors reader elsewhere still loads it); --resume recomputes it, so a
// flipped byte in tensor data is refused instead of resumed.
constexpr char kChecksumKey[] = "gptc.checksum";

std::string Checksum(const SafeTensors& file) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](std::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  };
  std::vector<const SafeTensor*> sorted;
  for (const SafeTensor& t : file.tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const SafeTensor* a, const SafeTensor* b) { return a->name < b->name; });
  for (const SafeTensor* p : sorted) {
    const SafeTensor& t = *p;
    mix(t.name);
    mix(t.dtype);
    for (int64_t d : t.shape) mix(std::to_string(d) + ",");
    mix(t.data);
  }
  return fmt::format("fnv1a64:{:016x}", h);
}

Status VerifyChecksum(const SafeTensors& file, const std::string& path) {
  auto it = file.metadata.find(kChecksumKey);
  if (it == file.metadata.end()) return Status::Ok();  // written before checksums
  const std::string actual = Checksum(file);
  if (it->second != actual) {
    return Error(
        "{}: checksum mismatch: __metadata__ says {}, the tensors give {} (the file is "
        "corrupt; resume from another checkpoint)",
        path, it->second, actual);
  }
  return Status::Ok();
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
    if (spec.name == "wte.weight" && !dims.empty()) wte_rows = dims[0];
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
  model.metadata[kChecksumKey] = Checksum(model);
  optim.metadata[kChecksumKey] = Checksum(optim);
  RETURN_IF_ERROR(WriteFileAtomically(config_path, ConfigJson(data.model)));
  // Optimizer first: a model file is never newer than a whole optimizer file
  // without the step check in LoadCheckpoint noticing.
  RETURN_IF_ERROR(WriteSafeTensors(dir + "/" + kOptimFile, optim));
  return WriteSafeTensors(dir + "/" + kModelFile, model);
}

DataSource MakeDataSource(const std::string& pattern, const std::vector<std::string>& shards,
                          int64_t seq, uint64_t seed) {
  // FNV-1a over the file names (not the directories: a dataset moved to
  // another disk is the same data).
  uint64_t hash = 1469598103934665603ull;
  for (const std::string& path : shards) {
    const size_t slash = path.rfind('/');
    for (char c : std::string_view(path).substr(slash == std::string::npos ? 0 : slash + 1)) {
      hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    hash = (hash ^ 0xff) * 1099511628211ull;
  }
  return DataSource{.train = pattern,
                    .shards = fmt::format("{}:{:016x}", shards.size(), hash),
                    .seq = seq,
                    .seed = std::to_string(seed)};
}

StatusOr<CheckpointData> LoadCheckpoint(const std::string& dir,
                                        const std::vector<program::ParamSpec>& params) {
  const std::string model_path = dir + "/" + kModelFile;
  const std::string optim_path = dir + "/" + kOptimFile;
  ASSIGN_OR_RETURN(SafeTensors model, ReadCheckpointModel(dir));
  ASSIGN_OR_RETURN(SafeTensors optim, ReadSafeTensors(optim_path));
  RETURN_IF_ERROR(VerifyChecksum(optim, optim_path));
  CheckpointData data;
  if (access((dir + "/" + kConfigFile).c_str(), F_OK) == 0) {
    ASSIGN_OR_RETURN(data.model, ReadCheckpointConfig(dir));
  }
  ASSIGN_OR_RETURN(data.step, MetaInt(model, model_path, "gptc.step"));
  ASSIGN_OR_RETURN(int64_t optim_step, MetaInt(optim, optim_path, "gptc.step"));
  if (optim_step != data.step) {
    return Error("{}: model is at step {} but {} is at step {}", dir, data.step, kOptimFile,
                 optim_step);
  }
  ASSIGN_OR_RETURN(data.data.epoch, MetaInt(model, model_path, "gptc.data.epoch"));
  ASSIGN_OR_RETURN(data.data.shard, MetaInt(model, model_path, "gptc.data.shard"));
  ASSIGN_OR_RETURN(data.data.sequence, MetaInt(model, model_path, "gptc.data.sequence"));
  ASSIGN_OR_RETURN(data.model.vocab, MetaInt(model, model_path, "gptc.vocab"));
  data.run_id = MetaString(model, "gptc.run_id");
  data.data_source.shards = MetaString(model, "gptc.data.shards");
  if (data.data_source.known()) {
    data.data_source.train = MetaString(model, "gptc.data.train");
    data.data_source.seed = MetaString(model, "gptc.data.seed");
    ASSIGN_OR_RETURN(data.data_source.seq, MetaInt(model, model_path, "gptc.data.seq"));
  }
  for (const auto& [k, v] : model.metadata) {
    if (!k.starts_with("gptc.") && k != "format") data.extra_metadata[k] = v;
  }
  if (model.tensors.size() != params.size()) {
    return Error("{}: {} tensors, the model has {} parameters", model_path, model.tensors.size(),
                 params.size());
  }
  data.params = params;
  for (const program::ParamSpec& spec : params) {
    ASSIGN_OR_RETURN(std::vector<float> v, TensorFor(model, model_path, spec.name, spec));
    ASSIGN_OR_RETURN(std::vector<float> m,
                     TensorFor(optim, optim_path, "adam_m." + spec.name, spec));
    ASSIGN_OR_RETURN(std::vector<float> s,
                     TensorFor(optim, optim_path, "adam_v." + spec.name, spec));
    data.values.push_back(std::move(v));
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
  RETURN_IF_ERROR(VerifyChecksum(model, path));
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
