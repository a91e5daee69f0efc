#include "runtime/hf_export.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "compiler/ir/shape.h"
#include "compiler/program/gpt2_params.h"
#include "compiler/support/file.h"
#include "runtime/checkpoint.h"

namespace gptc::rt {
namespace {

using program::Gpt2Param;

// Each tensor is copied as it is: a row HF stores transposed would need a
// transpose here and in runtime/hf_import.cc.
static_assert(std::ranges::none_of(program::kGpt2ParamTable,
                                   &program::Gpt2ParamKind::hf_transposed));

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::string HfConfigJson(const program::ModelConfig& model) {
  // Every field of transformers' GPT2Config; nlohmann::json sorts the keys,
  // as save_pretrained does.
  nlohmann::json j = {
      {"model_type", "gpt2"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"vocab_size", model.vocab},
      {"n_positions", model.positions},
      {"n_embd", model.width},
      {"n_layer", model.layers},
      {"n_head", model.heads},
      {"n_inner", nullptr},  // 4 * n_embd, as ours
      {"activation_function", "gelu_new"},
      {"resid_pdrop", 0.1},
      {"embd_pdrop", 0.1},
      {"attn_pdrop", 0.1},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"summary_type", "cls_index"},
      {"summary_use_proj", true},
      {"summary_activation", nullptr},
      {"summary_proj_to_labels", true},
      {"summary_first_dropout", 0.1},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"use_cache", true},
      {"bos_token_id", model.vocab - 1},
      {"eos_token_id", model.vocab - 1},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
  };
  return j.dump(2) + "\n";
}

StatusOr<SafeTensors> HfStateDict(const SafeTensors& checkpoint, const program::ModelConfig& model,
                                  const std::string& path) {
  const std::vector<Gpt2Param> params = program::Gpt2Params(model);
  std::set<std::string> names;
  for (const Gpt2Param& p : params) names.insert(p.name);
  for (const SafeTensor& t : checkpoint.tensors) {
    if (!names.contains(t.name)) {
      return Error("{}: tensor '{}' is not a parameter of config.json's model ('layers' {})", path,
                   t.name, model.layers);
    }
  }
  SafeTensors out;
  out.metadata["format"] = "pt";
  for (const Gpt2Param& p : params) {
    const SafeTensor* t = checkpoint.Find(p.name);
    if (t == nullptr) {
      return Error("{}: no tensor '{}', which config.json's model ('layers' {}) has", path, p.name,
                   model.layers);
    }
    if (t->dtype != "F32" || t->shape != p.shape) {
      return Error("{}: tensor '{}' is {}{}, config.json's model needs F32{}", path, p.name,
                   t->dtype, ir::DimsToString(t->shape), ir::DimsToString(p.shape));
    }
    SafeTensor hf{std::string(program::kHfPrefix) + p.hf_name, "F32", p.shape, t->data};
    if (p.kind->padded_rows) {  // the real rows only (Note [padded wte])
      hf.shape[0] = model.vocab;
      hf.data.resize(Elements(hf.shape) * sizeof(float));
    }
    out.tensors.push_back(std::move(hf));
  }
  return out;
}

StatusOr<HfExportSummary> ExportHuggingFace(const std::string& ckpt_dir,
                                            const std::string& out_dir) {
  struct stat st;
  if (stat(ckpt_dir.c_str(), &st) != 0) return Error("{}: {}", ckpt_dir, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    return Error("{}: not a directory (a checkpoint is a directory such as CKPT_DIR/step_000100)",
                 ckpt_dir);
  }
  const std::string config_path = ckpt_dir + "/config.json";
  if (access(config_path.c_str(), F_OK) != 0) {
    return Error(
        "{}: {} (checkpoints from before config.json lack it; docs/CHECKPOINTS.md shows "
        "how to write one)",
        config_path, std::strerror(errno));
  }
  HfExportSummary summary;
  ASSIGN_OR_RETURN(summary.model, ReadCheckpointConfig(ckpt_dir));
  ASSIGN_OR_RETURN(SafeTensors checkpoint, ReadCheckpointModel(ckpt_dir));
  const std::string model_path = ckpt_dir + "/model.safetensors";
  ASSIGN_OR_RETURN(CheckpointMetadata meta,
                   DecodeCheckpointMetadata(checkpoint.metadata, model_path));
  if (meta.vocab != summary.model.vocab) {
    return Error("{}: __metadata__ 'gptc.vocab' is {} but {} says 'vocab' {}", model_path,
                 meta.vocab, config_path, summary.model.vocab);
  }
  ASSIGN_OR_RETURN(SafeTensors hf, HfStateDict(checkpoint, summary.model, model_path));
  summary.step = meta.step;
  summary.tensors = static_cast<int64_t>(hf.tensors.size());
  for (const SafeTensor& t : hf.tensors) summary.values += Elements(t.shape);

  // Only now, with everything read and checked, does OUT_DIR come to exist.
  if (stat(out_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return Error("{}: exists and is not a directory", out_dir);
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Error("{}: {}", out_dir, ec.message());
  // The weights first: a config.json beside them means the export finished.
  RETURN_IF_ERROR(WriteSafeTensors(out_dir + "/model.safetensors", hf));
  RETURN_IF_ERROR(WriteFileAtomically(out_dir + "/config.json", HfConfigJson(summary.model)));
  return summary;
}

}  // namespace gptc::rt
