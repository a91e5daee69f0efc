#include "tools/gptrun/train_hellaswag.h"

#include <nlohmann/json.hpp>

#include "tools/gptrun/eval_set.h"

namespace gptc::tools {

Status HellaSwagPhase::Prepare() {
  const TrainOptions& o = run_.o;
  if (o.hellaswag.empty()) return Status::Ok();
  score_ = run_.program().Find(program::EntryRole::kScore);
  if (score_ == nullptr) {
    return UsageError(
        "--hellaswag: {} has no score entry (compiled with --no-logits, or by an "
        "older gptc): compile it again without --no-logits",
        o.artifact);
  }
  StatusOr<rt::EvalSet> set =
      LoadEvalSet(o.hellaswag, o.hellaswag_limit, *score_, run_.model().vocab);
  if (!set.ok()) return set.status().WithPrefix("--hellaswag");
  set_.emplace(std::move(set).value());
  return Status::Ok();
}

Status HellaSwagPhase::AfterStep(int64_t step, bool last) {
  const TrainOptions& o = run_.o;
  if (!set_.has_value()) return Status::Ok();
  if (!last && (o.hellaswag_every == 0 || step % o.hellaswag_every != 0)) return Status::Ok();
  const Distributed& dist = *run_.dist;
  StatusOr<EvalSetScores> scores =
      ScoreEvalSet(*run_.trainer, *score_, *set_, dist.env.rank, dist.world());
  if (!scores.ok()) return scores.status().WithPrefix("hellaswag");
  run_.console.Line(fmt::format("{} | step {}", EvalLine("hellaswag", *scores), step));
  nlohmann::json event = TallyJson(scores->tally);
  event["event"] = "hellaswag";
  event["step"] = step;
  event["seconds"] = scores->seconds;
  run_.log->Write(event);
  return Status::Ok();
}

}  // namespace gptc::tools
