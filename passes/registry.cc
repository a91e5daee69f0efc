#include "passes/registry.h"

#include "passes/all_reduce_combiner.h"
#include "passes/attention_fusion.h"
#include "passes/attention_operands.h"
#include "passes/autodiff.h"
#include "passes/bf16_bias_gradients.h"
#include "passes/cross_entropy_fusion.h"
#include "passes/cse.h"
#include "passes/data_parallel.h"
#include "passes/dce.h"
#include "passes/distribute_row_sums.h"
#include "passes/fusion.h"
#include "passes/gemm_fusion.h"
#include "passes/horizontal_fusion.h"
#include "passes/loop_fusion.h"
#include "passes/mixed_precision.h"
#include "passes/optimizer.h"
#include "passes/reduction_fusion.h"
#include "passes/remat.h"
#include "passes/schedule.h"
#include "passes/simplify.h"

namespace gptc::passes {

const pass::PassRegistry& AllPasses() {
  static const pass::PassRegistry* registry = [] {
    auto* r = new pass::PassRegistry();
    r->Register("autodiff", "rewrite the entry to return (loss, gradients of float parameters)",
                [] { return std::make_unique<Autodiff>(); });
    r->RegisterWithOptions(
        "optimizer",
        "AdamW step with global-norm clipping on the autodiff output; optimizer{zero=N}: "
        "ZeRO-1 over N ranks",
        [](const pass::PassOptions& options) -> StatusOr<std::unique_ptr<pass::Pass>> {
          ASSIGN_OR_RETURN(OptimizerOptions o, ParseOptimizerOptions(options));
          return std::unique_ptr<pass::Pass>(std::make_unique<Optimizer>(o));
        });
    r->RegisterWithOptions(
        "data-parallel",
        "all-reduce (sum, then 1/world) the gradients and loss: "
        "data-parallel{world=N mode=step|accumulate|apply prescaled=B gradients=B}",
        [](const pass::PassOptions& options) -> StatusOr<std::unique_ptr<pass::Pass>> {
          ASSIGN_OR_RETURN(DataParallelOptions o, ParseDataParallelOptions(options));
          return std::unique_ptr<pass::Pass>(std::make_unique<DataParallel>(o));
        });
    r->Register("fusion", "group instructions into kernels (loop, reduction, gemm, attention, ...)",
                [] { return std::make_unique<Fusion>(); });
    // The fusion pass's steps, each alone (passes/fusion.h lists them in order).
    r->Register("attention-operands",
                "attention reads rounded bf16 operand copies; each backward kernel its own chains",
                [] { return std::make_unique<AttentionOperands>(); });
    r->Register("horizontal-fusion",
                "one kernel each for the optimizer, the gradient norm, the parameter casts",
                [] { return std::make_unique<HorizontalFusion>(); });
    r->Register("cross-entropy-fusion", "loss and dlogits in one kernel per cross-entropy",
                [] { return std::make_unique<CrossEntropyFusion>(); });
    r->Register("attention-fusion", "flash attention kernels with their operand layout chains",
                [] { return std::make_unique<AttentionFusion>(); });
    r->Register("gemm-fusion", "each dot with the cuBLASLt epilogue around it",
                [] { return std::make_unique<GemmFusion>(); });
    r->Register("reduction-fusion", "reductions with their row-local region or producers",
                [] { return std::make_unique<ReductionFusion>(); });
    r->Register("loop-fusion", "converts into their producers, then elementwise/layout groups",
                [] { return std::make_unique<LoopFusion>(); });
    r->Register("dce", "remove unused instructions and uncalled computations",
                [] { return std::make_unique<Dce>(); });
    r->Register("simplify", "algebraic identities, constant folding, transpose/reshape chains",
                [] { return std::make_unique<Simplify>(); });
    r->Register("cse", "merge instructions that compute the same value",
                [] { return std::make_unique<Cse>(); });
    r->Register("schedule", "reorder instructions to keep peak live memory low",
                [] { return std::make_unique<Schedule>(); });
    r->RegisterWithOptions(
        "all-reduce-combiner",
        "group the all-reduces into buckets (bucket=K), after the schedule: "
        "all-reduce-combiner{bucket-mib=N} (default 25)",
        [](const pass::PassOptions& options) -> StatusOr<std::unique_ptr<pass::Pass>> {
          ASSIGN_OR_RETURN(AllReduceCombinerOptions o, ParseAllReduceCombinerOptions(options));
          return std::unique_ptr<pass::Pass>(std::make_unique<AllReduceCombiner>(o));
        });
    r->Register("mixed-precision", "bf16 dot operands with f32 accumulation (run before autodiff)",
                [] { return std::make_unique<MixedPrecision>(); });
    r->Register("bf16-bias-gradients",
                "bias gradients summed from the bf16 copy the weight gradient's dot reads (run "
                "after autodiff)",
                [] { return std::make_unique<Bf16BiasGradients>(); });
    r->Register("distribute-row-sums",
                "split a row sum that reads another row sum's broadcast (run after autodiff)",
                [] { return std::make_unique<DistributeRowSums>(); });
    r->RegisterWithOptions(
        "remat",
        "recompute forward values in the backward: remat{policy=none|dots|wide|block} "
        "(default dots) or remat{plan=block:0,none:1} (a policy per block)",
        [](const pass::PassOptions& options) -> StatusOr<std::unique_ptr<pass::Pass>> {
          ASSIGN_OR_RETURN(RematOptions o, ParseRematPassOptions(options));
          return std::unique_ptr<pass::Pass>(std::make_unique<Remat>(std::move(o)));
        });
    return r;
  }();
  return *registry;
}

}  // namespace gptc::passes
