#include "runtime/hf_import.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "compiler/ir/shape.h"
#include "compiler/program/gpt2_params.h"
#include "compiler/support/file.h"
#include "compiler/support/float_bits.h"
#include "runtime/checkpoint.h"

namespace gptc::rt {
namespace {

using program::Gpt2Param;
using program::kHfLmHead;
using program::kHfPrefix;

// Each tensor is read as it is: a row HF stores transposed would need a
// transpose here and in runtime/hf_export.cc.
static_assert(std::ranges::none_of(program::kGpt2ParamTable,
                                   &program::Gpt2ParamKind::hf_transposed));

// config.json's `key`, a positive integer.
StatusOr<int64_t> PositiveInt(const nlohmann::json& j, const std::string& key,
                              const std::string& path) {
  auto it = j.find(key);
  if (it == j.end()) return Error("{}: no '{}'", path, key);
  if (!it->is_number_integer() || it->get<int64_t>() < 1) {
    return Error("{}: '{}' is {}, not a positive integer", path, key, it->dump());
  }
  return it->get<int64_t>();
}

// The f32 values of `t`, widened from F16 or BF16 (exactly: each of their
// values is an f32 value), refusing other dtypes and non-finite values.
StatusOr<std::vector<float>> F32Of(const SafeTensor& t, const std::string& path) {
  std::vector<float> v;
  if (t.dtype == "F32") {
    v = F32Values(t);
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    v.resize(t.data.size() / 2);
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, t.data.data() + 2 * i, 2);
      v[i] = t.dtype == "F16" ? F16BitsToF32(bits) : BF16BitsToF32(bits);
    }
  } else {
    return Error("{}: tensor '{}' is {}, not F32, F16 or BF16", path, t.name, t.dtype);
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      return Error("{}: tensor '{}' holds {} at element {}", path, t.name, v[i], i);
    }
  }
  return v;
}

// GPT2Model's name of an HF tensor: GPT2LMHeadModel's without its "transformer.".
std::string WithoutPrefix(const std::string& hf_name) {
  return hf_name.starts_with(kHfPrefix) ? hf_name.substr(kHfPrefix.size()) : hf_name;
}

}  // namespace

StatusOr<program::ModelConfig> ReadHfConfig(const std::string& hf_dir) {
  struct stat st;
  if (stat(hf_dir.c_str(), &st) != 0) return Error("{}: {}", hf_dir, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    return Error(
        "{}: not a directory (a Hugging Face model is a directory holding config.json "
        "and model.safetensors)",
        hf_dir);
  }
  const std::string path = hf_dir + "/config.json";
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Error("{}: not a JSON object", path);
  // Without model_type the file is read as GPT-2's, as GPT2LMHeadModel reads
  // it; another model type has other tensors and other arithmetic.
  if (auto it = j.find("model_type"); it != j.end() && *it != "gpt2") {
    return Error("{}: 'model_type' is {}, not \"gpt2\"", path, it->dump());
  }
  program::ModelConfig model;
  ASSIGN_OR_RETURN(model.layers, PositiveInt(j, "n_layer", path));
  ASSIGN_OR_RETURN(model.heads, PositiveInt(j, "n_head", path));
  ASSIGN_OR_RETURN(model.width, PositiveInt(j, "n_embd", path));
  // Older configs also have n_ctx, the attention mask's size; n_positions,
  // the rows of wpe, is the one read when both are there.
  const char* positions =
      j.contains("n_positions") || !j.contains("n_ctx") ? "n_positions" : "n_ctx";
  ASSIGN_OR_RETURN(model.positions, PositiveInt(j, positions, path));
  ASSIGN_OR_RETURN(model.vocab, PositiveInt(j, "vocab_size", path));
  model.padded_vocab = model.vocab;
  if (model.width % model.heads != 0) {
    return Error("{}: 'n_head' {} does not divide 'n_embd' {}", path, model.heads, model.width);
  }
  // GPT2Config's n_inner is the MLP's width, null for 4 * n_embd, which ours
  // always is (models/gpt2.cc).
  if (auto it = j.find("n_inner"); it != j.end() && !it->is_null() && *it != 4 * model.width) {
    return Error("{}: 'n_inner' is {}, not null or 4 * 'n_embd' ({}), the only MLP width gptc has",
                 path, it->dump(), 4 * model.width);
  }
  return model;
}

namespace {

// The tensors of `hf` by GPT2Model's name, with the tied head apart; the
// mask buffers are skipped, and any other tensor that is not one of
// `params` is refused.
struct HfTensors {
  std::map<std::string, const SafeTensor*> by_name;
  const SafeTensor* lm_head = nullptr;
  bool prefixed = false;  // GPT2LMHeadModel's names: a missing one is named so
};

StatusOr<HfTensors> FindHfTensors(const SafeTensors& hf, const program::ModelConfig& model,
                                  const std::vector<Gpt2Param>& params, const std::string& path) {
  std::set<std::string> wanted, buffers;
  for (const Gpt2Param& p : params) wanted.insert(p.hf_name);
  for (int64_t l = 0; l < model.layers; ++l) {
    for (std::string_view buffer : program::kHfBlockBuffers) {
      buffers.insert(program::Gpt2BlockName(l, buffer));
    }
  }
  HfTensors out;
  for (const SafeTensor& t : hf.tensors) {
    if (t.name == kHfLmHead) {
      out.lm_head = &t;
      continue;
    }
    const std::string name = WithoutPrefix(t.name);
    out.prefixed |= name != t.name;
    if (buffers.contains(name)) continue;
    if (!wanted.contains(name)) {
      return Error("{}: tensor '{}' is not a parameter of config.json's GPT-2 ('n_layer' {})", path,
                   t.name, model.layers);
    }
    if (!out.by_name.emplace(name, &t).second) {
      return Error("{}: tensor '{}' is there both as '{}' and as '{}{}'", path, name, name,
                   kHfPrefix, name);
    }
  }
  return out;
}

// The logits reuse the token table: an lm_head that differs from `table`
// (its values, f32, `wte` as the file holds it) would be dropped unseen.
Status CheckTiedHead(const SafeTensor& lm_head, const SafeTensor& wte,
                     const std::vector<float>& table, const std::string& path) {
  if (lm_head.shape != wte.shape) {
    return Error(
        "{}: tensor '{}' is {}{} where '{}' is {}: gptc ties the logits to the token table", path,
        kHfLmHead, lm_head.dtype, ir::DimsToString(lm_head.shape), wte.name,
        ir::DimsToString(wte.shape));
  }
  ASSIGN_OR_RETURN(std::vector<float> head, F32Of(lm_head, path));
  for (size_t i = 0; i < head.size(); ++i) {
    if (std::memcmp(&head[i], &table[i], sizeof(float)) != 0) {
      const int64_t width = wte.shape[1];
      return Error(
          "{}: tensor '{}' differs from '{}' at [{}, {}] ({} vs {}): gptc ties the "
          "logits to the token table, so an untied head cannot be imported",
          path, kHfLmHead, wte.name, static_cast<int64_t>(i) / width,
          static_cast<int64_t>(i) % width, head[i], table[i]);
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<std::vector<float>>> HfParamValues(const SafeTensors& hf,
                                                        const program::ModelConfig& model,
                                                        const std::string& path) {
  const std::vector<Gpt2Param> params = program::Gpt2Params(model);
  ASSIGN_OR_RETURN(HfTensors found, FindHfTensors(hf, model, params, path));
  std::vector<std::vector<float>> values;
  size_t wte = 0;  // the token table's index
  for (const Gpt2Param& p : params) {
    auto it = found.by_name.find(p.hf_name);
    if (it == found.by_name.end()) {
      return Error("{}: no tensor '{}{}', which config.json's GPT-2 has", path,
                   found.prefixed ? kHfPrefix : "", p.hf_name);
    }
    const SafeTensor& t = *it->second;
    std::vector<int64_t> shape = p.shape;
    if (p.kind->padded_rows) shape[0] = model.vocab;  // the real rows only (Note [padded wte])
    if (t.shape != shape) {
      return Error("{}: tensor '{}' is {}{}, config.json's GPT-2 needs {}", path, t.name, t.dtype,
                   ir::DimsToString(t.shape), ir::DimsToString(shape));
    }
    ASSIGN_OR_RETURN(std::vector<float> v, F32Of(t, path));
    v.resize(ir::Shape(ir::DType::kF32, p.shape).num_elements(), 0.0f);  // the padding rows
    if (p.kind->padded_rows) wte = values.size();
    values.push_back(std::move(v));
  }
  if (found.lm_head != nullptr) {
    const SafeTensor& table = *found.by_name.at(params[wte].hf_name);  // there: every parameter is
    RETURN_IF_ERROR(CheckTiedHead(*found.lm_head, table, values[wte], path));
  }
  return values;
}

StatusOr<HfImportSummary> ImportHuggingFace(const std::string& hf_dir,
                                            const program::ModelConfig& model,
                                            const std::string& ckpt_dir) {
  CheckpointData data;
  data.model = model;
  data.params = program::Gpt2ParamSpecs(model);
  data.extra_metadata[kImportedFromKey] = hf_dir;
  {
    // Scoped so that the file (the model's size) is freed before SaveCheckpoint copies it.
    const std::string path = hf_dir + "/model.safetensors";
    const std::string index = hf_dir + "/model.safetensors.index.json";
    if (access(path.c_str(), F_OK) != 0 && access(index.c_str(), F_OK) == 0) {
      return Error(
          "{}: sharded weights are not supported (save_pretrained(DIR, "
          "max_shard_size=\"20GB\") writes one model.safetensors)",
          index);
    }
    ASSIGN_OR_RETURN(SafeTensors hf, ReadSafeTensors(path));
    ASSIGN_OR_RETURN(data.values, HfParamValues(hf, model, path));
  }
  HfImportSummary summary{.model = model, .tensors = static_cast<int64_t>(data.params.size())};
  for (const std::vector<float>& v : data.values) {
    summary.values += static_cast<int64_t>(v.size());
    data.adam_m.emplace_back(v.size(), 0.0f);
    data.adam_v.emplace_back(v.size(), 0.0f);
  }

  // Only now, with everything read and checked, does CKPT_DIR come to exist.
  struct stat st;
  if (stat(ckpt_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return Error("{}: exists and is not a directory", ckpt_dir);
  }
  std::error_code ec;
  std::filesystem::create_directories(ckpt_dir, ec);
  if (ec) return Error("{}: {}", ckpt_dir, ec.message());
  RETURN_IF_ERROR(SaveCheckpoint(ckpt_dir, data));
  return summary;
}

}  // namespace gptc::rt
