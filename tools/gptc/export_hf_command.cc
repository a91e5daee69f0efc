// gptc export-hf CKPT_DIR OUT_DIR: a training checkpoint as a Hugging Face
// GPT-2 model directory (runtime/hf_export.h has the mapping).
#include <cstdio>
#include <filesystem>
#include <optional>

#include "runtime/hf_export.h"
#include "tools/common/flags.h"
#include "tools/gptc/commands.h"

namespace gptc::tools {

int ExportHfCommand(int argc, char** argv) {
  Flags flags("gptc export-hf", "CKPT_DIR OUT_DIR",
              "Writes a gptrun checkpoint (a step_NNNNNN directory of --ckpt-dir) as a Hugging "
              "Face transformers GPT-2 model: OUT_DIR/config.json (GPT2Config) and "
              "OUT_DIR/model.safetensors (GPT2LMHeadModel's weights, f32, the token table cut to "
              "the real vocabulary), for GPT2LMHeadModel.from_pretrained(OUT_DIR). OUT_DIR is "
              "created; it must not be the checkpoint itself, and a non-empty OUT_DIR is "
              "refused unless --force (its config.json and model.safetensors are then "
              "replaced).");
  flags.Bool("force", "write into a non-empty OUT_DIR, replacing its config.json and "
                      "model.safetensors");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  if (flags.positional().size() != 2) {
    return Fail(UsageError("export-hf takes CKPT_DIR OUT_DIR (gptc export-hf --help)"));
  }
  const std::string& ckpt = flags.positional()[0];
  const std::string& out = flags.positional()[1];
  // The checkpoint's own config.json and model.safetensors have the names
  // the HF files take: writing there would leave it unresumable.
  if (Status s =
          CheckHfOutputDir("export-hf", ckpt, "the checkpoint", out, "OUT_DIR", flags.Has("force"));
      !s.ok()) {
    return Fail(s.WithCode(StatusCode::kUsage));
  }
  StatusOr<rt::HfExportSummary> done = rt::ExportHuggingFace(ckpt, out);
  if (!done.ok()) return Fail(kExitFailure, done.status());
  const program::ModelConfig& m = done->model;
  std::printf(
      "exported %s (%s at step %lld: layers %lld, heads %lld, width %lld, vocab %lld) to "
      "%s: %lld tensors, %s values\n",
      ckpt.c_str(), m.name.c_str(), static_cast<long long>(done->step),
      static_cast<long long>(m.layers), static_cast<long long>(m.heads),
      static_cast<long long>(m.width), static_cast<long long>(m.vocab), out.c_str(),
      static_cast<long long>(done->tensors), WithThousands(done->values).c_str());
  return 0;
}

Status CheckHfOutputDir(std::string_view command, const std::string& in, std::string_view in_what,
                        const std::string& out, std::string_view out_name, bool force) {
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && std::filesystem::exists(in, ec) &&
      std::filesystem::equivalent(in, out, ec)) {
    return Error(
        "{}: {} {} is {} {} itself: its config.json and model.safetensors would be "
        "replaced",
        command, out_name, out, in_what, in);
  }
  if (std::filesystem::is_directory(out, ec) && !std::filesystem::is_empty(out, ec) && !force) {
    return Error("{}: {} {} is not empty (--force writes into it)", command, out_name, out);
  }
  return Status::Ok();
}

}  // namespace gptc::tools
