// The loop rules of fusion (passes/loop_fusion.h).
#include "passes/loop_fusion.h"

#include <vector>

#include "passes/fusion_planner.h"

namespace gptc::passes::fusion_internal {

using ir::FusionKind;
using ir::Instruction;
using ir::Opcode;

void FuseConvertsIntoProducers(Planner& p) {
  // x = <group g>; c = convert(x)  =>  c joins g as one more output (or
  // replaces x's output when c is x's only user). Not into gemms: cuBLASLt
  // writes one result (their epilogue converts are absorbed by FuseGemms).
  for (const Instruction* c : p.WithOpcode(Opcode::kConvert)) {
    if (!p.Claimable(c)) continue;
    std::vector<const Instruction*> sources;
    p.NonFreeSources(c->operand(0), sources);
    if (sources.size() != 1) continue;
    int g = p.group_of(sources.front());
    if (g < 0 || p.groups()[g].kind == FusionKind::kGemm ||
        p.groups()[g].kind == FusionKind::kOptimizer) {
      continue;
    }
    p.TryAdd(g, c);
  }
}

void FuseLoops(Planner& p) {
  for (size_t i = 0; i < p.order().size(); ++i) {
    // Grouped and free ops are passed over by position, without reading the
    // instruction: most are grouped by now, and on a large graph each read
    // misses the caches.
    if (p.group_at(i) >= 0 || p.free_at(i)) continue;
    const Instruction* x = p.order()[i];
    if (!IsLoopOp(*x) || !p.Claimable(x)) continue;
    std::vector<const Instruction*> sources;
    for (const Instruction* op : x->operands()) p.NonFreeSources(op, sources);
    int joined = -1;
    for (const Instruction* s : sources) {
      int g = p.group_of(s);
      if (g < 0 || p.groups()[g].kind != FusionKind::kLoop || g == joined) continue;
      if (joined < 0) {
        if (p.TryAdd(g, x)) joined = g;
      } else {
        p.TryMerge(joined, g);
      }
    }
    // A reshape no loop kernel computes is a view of its operand: left
    // unfused, it costs nothing, where a kernel of its own would copy it.
    if (joined < 0 && x->opcode() != Opcode::kReshape) p.NewGroup(FusionKind::kLoop, x, {x});
  }
  // Free ops (other than constants) an unfused op reads must be materialized.
  // By position: the instruction is read only when it is needed.
  for (size_t i = 0; i < p.order().size(); ++i) {
    if (!p.free_at(i)) continue;
    const Instruction* x = p.order()[i];
    bool needed = p.computation()->root() == x;
    for (int32_t u : p.readers_at(i)) needed |= !p.free_at(u) && p.group_at(u) < 0;
    if (needed && x->opcode() != Opcode::kConstant) p.NewGroup(FusionKind::kLoop, x, {x});
  }
}

}  // namespace gptc::passes::fusion_internal
