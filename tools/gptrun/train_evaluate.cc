#include "tools/gptrun/train_evaluate.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/data_loader.h"
#include "tools/gptrun/sampler.h"

namespace gptc::tools {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace

Status EvaluatePhase::Prepare() {
  const TrainOptions& o = run_.o;
  sample_every_ = o.bench ? 0 : o.sample_every;
  if (sample_every_ > 0 && run_.logits == nullptr) {
    run_.console.Line(fmt::format(
        "note: {} has no logits entry (compiled with --no-logits): no samples, no validation",
        o.artifact));
    sample_every_ = 0;
  } else if (sample_every_ > 0) {
    StatusOr<rt::Tokenizer> tok = rt::Tokenizer::Load(o.tokenizer_dir);
    if (!tok.ok() && o.tokenizer_given) {  // asked for by name: as gpt-tokenize does
      return tok.status().WithPrefix("--tokenizer " + o.tokenizer_dir);
    }
    if (!tok.ok()) {
      run_.console.Line(fmt::format("note: no tokenizer at {} (run scripts/data): samples skipped",
                                    o.tokenizer_dir));
      sample_every_ = 0;
    } else {
      tokenizer_.emplace(std::move(tok).value());
    }
  }
  validate_ = run_.val.has_value() && (run_.eval != nullptr || run_.logits != nullptr);
  return Status::Ok();
}

Status EvaluatePhase::AfterStep(int64_t step, bool last) {
  const TrainOptions& o = run_.o;
  if (validate_ && ((o.val_every > 0 && step % o.val_every == 0) || last)) {
    RETURN_IF_ERROR(Validate(step).WithPrefix("validation"));
  }
  if (sample_every_ > 0 && (step % sample_every_ == 0)) {
    RETURN_IF_ERROR(Sample(step).WithPrefix("sample"));
  }
  return Status::Ok();
}

Status EvaluatePhase::Validate(int64_t step) {
  const TrainOptions& o = run_.o;
  auto t0 = Clock::now();
  RETURN_IF_ERROR(run_.val->Restore(rt::DataLoader::State{}));
  double sum = 0;
  for (int64_t i = 0; i < o.val_steps; ++i) {
    ASSIGN_OR_RETURN(rt::MicroBatch mb, run_.val->Next());
    ASSIGN_OR_RETURN(double loss, run_.eval != nullptr ? EvalLoss(*run_.trainer, *run_.eval, mb)
                                                       : ForwardLoss(*run_.trainer, *run_.logits,
                                                                     mb, run_.model().vocab));
    sum += loss;
  }
  const double loss = sum / static_cast<double>(o.val_steps);
  last_val_ = {step, loss};
  run_.summary->val_losses.push_back(last_val_);
  run_.console.Line(fmt::format("val loss {:.4f} | step {} | {} batches | {:.1f} s", loss, step,
                                o.val_steps, Seconds(t0)));
  run_.log->Write(
      json{{"event", "val"}, {"step", step}, {"val_loss", loss}, {"batches", o.val_steps}});
  return Status::Ok();
}

Status EvaluatePhase::Sample(int64_t step) {
  const TrainOptions& o = run_.o;
  auto t0 = Clock::now();
  SampleOptions so{.length = o.sample_len,
                   .top_k = o.top_k,
                   .seed = o.seed,
                   .salt = static_cast<uint64_t>(step),
                   .vocab = run_.model().vocab};
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, SampleTokens(*run_.trainer, *run_.logits, so));
  const std::string text = tokenizer_->Decode(ids);
  run_.console.Line(fmt::format("sample | step {} | {} tokens, top-k {} | {:.1f} s\n{}\n---", step,
                                o.sample_len, o.top_k, Seconds(t0), text));
  run_.log->Write(json{{"event", "sample"}, {"step", step}, {"tokens", ids}, {"text", text}});
  return Status::Ok();
}

}  // namespace gptc::tools
