#include "tools/gptc/compile_options.h"

#include <fmt/format.h>

namespace gptc::tools {

std::string RematText(const passes::RematOptions& remat) {
  if (remat.policy == passes::RematPolicy::kAuto) {
    return remat.layers.empty() ? "auto" : "auto: " + passes::FormatRematPlan(remat.layers);
  }
  if (!remat.layers.empty()) return passes::FormatRematPlan(remat.layers);
  return std::string(passes::RematPolicyName(remat.policy));
}

// Note [compile inputs]: left out of the line, as they shape no byte of the
// output: batch_note (CompileProgram's own record of what --batch auto
// chose), dump_dir and print_*_report (reports beside the output),
// train.pipeline (verification, dumps and timings) and train.dumps.
// roofline_gpu is a row of the GPU table, written by its name.
std::string CompileInputs(const CompileOptions& o) {
  const models::GptConfig& c = o.config;
  const passes::TrainStepOptions& t = o.train;
  // Doubles by their shortest round-trip text: equal values, equal keys.
  return fmt::format(
      "model {} layers {} heads {} width {} positions {} vocab {} padded_vocab {}; batch {} seq "
      "{} score_seq {}; grad_accum {} world {} zero {} grad_comm {} bucket_bytes {} "
      "first_bucket_bytes {} beta1 {} beta2 "
      "{} eps {} "
      "weight_decay {} clip_norm {}; "
      "precision {} remat {} budget {} optimize {}; artifact {} target {} attention_mma {} emu {} "
      "codegen {} forward_entries {} forward_only {}; batch_auto {} tokens_per_step {}; "
      "roofline_gpu {}",
      c.name, c.layers, c.heads, c.width, c.positions, c.vocab, c.padded_vocab, o.batch, o.seq,
      o.score_seq, t.grad_accum, t.world_size, t.zero_stage, ir::DTypeName(t.grad_comm),
      t.all_reduce_bucket_bytes, t.first_bucket_bytes, t.adamw.beta1, t.adamw.beta2, t.adamw.eps,
      t.adamw.weight_decay, t.adamw.clip_norm, passes::PrecisionPolicyName(t.precision.policy),
      RematText(t.remat), o.memory_budget, t.optimize, o.artifact, codegen::TargetName(o.target),
      codegen::AttentionMmaName(o.attention_mma), o.emu, o.codegen, o.forward_entries,
      o.forward_only, o.batch_auto, o.tokens_per_step, o.roofline_gpu.name);
}

}  // namespace gptc::tools
