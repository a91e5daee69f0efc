#include "tools/gptrun/generate.h"

#include <chrono>
#include <cstdio>
#include <optional>

#include "compiler/program/container.h"
#include "runtime/checkpoint.h"
#include "runtime/program_loader.h"
#include "runtime/tokenizer.h"
#include "tools/gptrun/checkpoint_dir.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/distributed.h"
#include "tools/gptrun/sampler.h"

namespace gptc::tools {
namespace {

class Generation {
 public:
  Generation(const GenerateOptions& o, GenerateResult* result) : o_(o), result_(result) {}

  int Run() {
    if (int code = Load(); code != 0) return code;
    if (int code = Restore(); code != 0) return code;
    if (int code = Prepare(); code != 0) return code;
    return Draw();
  }

 private:
  int Fail(int code, const Status& s) {
    result_->error = s.message();
    return code;
  }

  // The artifact, its logits entry and the device's trainer.
  int Load() {
    StatusOr<program::Artifact> artifact = program::ReadArtifact(o_.artifact);
    if (!artifact.ok()) return Fail(1, artifact.status());
    artifact_.emplace(std::move(artifact).value());
    StatusOr<rt::LoadedProgram> loaded = rt::LoadProgram(*artifact_, o_.artifact);
    if (!loaded.ok()) return Fail(1, loaded.status());
    loaded_.emplace(std::move(loaded).value());
    if (loaded_->program.world_size > 1) {
      return Fail(2, Error("{} was compiled with --dp {}: generate runs one process (compile "
                           "without --dp)",
                           o_.artifact, loaded_->program.world_size));
    }
    logits_ = loaded_->program.Find(program::EntryRole::kLogits);
    if (logits_ == nullptr) {
      return Fail(2, Error("{} has no logits entry (compiled with --no-logits): nothing to "
                           "generate with",
                           o_.artifact));
    }
    TrainOptions t;
    t.artifact = o_.artifact;  // the devices' errors name it
    t.device = o_.device;
    t.gpu = o_.gpu;
    t.emu_checks = o_.emu_checks;
    t.trust_artifact = o_.trust_artifact;
    result_->device = ChooseDevice(t, *loaded_).name;
    StatusOr<Distributed> dist = JoinDistributed(1, o_.artifact, result_->device, o_.gpu);
    if (!dist.ok()) return Fail(1, dist.status());
    dist_.emplace(std::move(dist).value());
    StatusOr<std::unique_ptr<rt::Trainer>> trainer =
        MakeTrainer(result_->device, t, *artifact_, &loaded_->program, *dist_);
    if (!trainer.ok()) return Fail(1, trainer.status());
    trainer_ = std::move(trainer).value();
    return 0;
  }

  int Restore() {
    // The weights alone: generation needs no optimizer state.
    StatusOr<rt::CheckpointData> ckpt = rt::LoadCheckpoint(
        o_.checkpoint, loaded_->program.params, rt::CheckpointParts::kModelOnly);
    if (!ckpt.ok()) return Fail(1, ckpt.status().WithPrefix("--resume"));
    if (Status s = CheckCheckpointModel(ckpt->model, loaded_->model); !s.ok()) {
      return Fail(1, s.WithPrefix("--resume " + o_.checkpoint));
    }
    if (Status s = rt::RestoreTrainer(*ckpt, trainer_.get()); !s.ok()) {
      return Fail(1, s.WithPrefix("--resume " + o_.checkpoint));
    }
    step_ = ckpt->step;
    return 0;
  }

  // The tokenizer and the prompt's context, which must fit the window.
  int Prepare() {
    StatusOr<rt::Tokenizer> tok = rt::Tokenizer::Load(o_.tokenizer_dir);
    if (!tok.ok()) return Fail(1, tok.status().WithPrefix("--tokenizer " + o_.tokenizer_dir));
    tokenizer_.emplace(std::move(tok).value());
    result_->context = {rt::kEndOfText};
    tokenizer_->EncodeTo(o_.prompt, &result_->context);
    StatusOr<std::pair<int64_t, int64_t>> shape = LogitsShape(*logits_);
    if (!shape.ok()) return Fail(1, shape.status().WithPrefix(o_.artifact));
    const int64_t window = shape->first;
    const int64_t n = static_cast<int64_t>(result_->context.size());
    if (n > window) {
      return Fail(2, Error("the prompt is {} tokens; with the <|endoftext|> before it that is more "
                           "than the {} the artifact's logits entry reads (gptc compile --seq; "
                           "the model's context is {})",
                           n - 1, window, loaded_->model.positions));
    }
    std::fprintf(stderr,
                 "gptrun generate: %s at step %lld on %s | prompt %lld tokens | up to %lld new, "
                 "temperature %g, top-k %lld, seed %llu\n",
                 o_.checkpoint.c_str(), static_cast<long long>(step_), result_->device.c_str(),
                 static_cast<long long>(n - 1), static_cast<long long>(o_.max_tokens),
                 o_.temperature, static_cast<long long>(o_.top_k),
                 static_cast<unsigned long long>(o_.seed));
    return 0;
  }

  int Draw() {
    const auto t0 = std::chrono::steady_clock::now();
    SampleOptions so{.length = o_.max_tokens,
                     .top_k = o_.top_k,
                     .temperature = o_.temperature,
                     .seed = o_.seed,
                     .salt = 0,
                     .vocab = loaded_->model.vocab,
                     .prompt = result_->context,
                     .stop_at_end_of_text = o_.stop_at_end_of_text};
    if (o_.stream) {
      so.on_token = [this](int32_t id) {
        const std::string piece = tokenizer_->DecodeOne(id);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      };
    }
    StatusOr<std::vector<int32_t>> tokens = SampleTokens(*trainer_, *logits_, so);
    if (!tokens.ok()) return Fail(1, tokens.status().WithPrefix("generate"));
    result_->tokens = std::move(tokens).value();
    result_->text = tokenizer_->Decode(result_->tokens);
    if (o_.stream) {
      std::fputc('\n', stdout);
      std::fflush(stdout);  // the text before the note on stderr, also into one file
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool ended = static_cast<int64_t>(result_->tokens.size()) < o_.max_tokens;
    std::fprintf(stderr, "gptrun generate: %zu tokens in %.2f s%s\n", result_->tokens.size(),
                 seconds, ended ? " (stopped at <|endoftext|>)" : "");
    return 0;
  }

  const GenerateOptions& o_;
  GenerateResult* result_;
  std::optional<program::Artifact> artifact_;
  std::optional<rt::LoadedProgram> loaded_;
  const program::TrainEntry* logits_ = nullptr;
  std::optional<Distributed> dist_;
  std::unique_ptr<rt::Trainer> trainer_;
  std::optional<rt::Tokenizer> tokenizer_;
  int64_t step_ = 0;
};

}  // namespace

int Generate(const GenerateOptions& options, GenerateResult* result) {
  *result = GenerateResult{};
  return Generation(options, result).Run();
}

}  // namespace gptc::tools
