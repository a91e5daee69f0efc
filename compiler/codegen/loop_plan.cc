#include "compiler/codegen/loop_plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/emitter_util.h"
#include "compiler/codegen/fused_emitter.h"  // Describe, StorageBytes

namespace gptc::codegen {
namespace {

constexpr int64_t kBlock = 256;
constexpr int64_t kMaxBlocks = 132 * 16;  // H100 SMs x 16: enough to fill the GPU

// The members of a group (Note [member classes]): outputs joined by a shared
// parameter of `n` elements, in order of first output.
std::vector<LoopMember> Members(const std::vector<const ir::Instruction*>& outputs,
                                const std::vector<int64_t>& slots, int64_t n) {
  std::vector<size_t> parent(outputs.size());
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::map<const ir::Instruction*, size_t> owner;
  for (size_t o = 0; o < outputs.size(); ++o) {
    for (const ir::Instruction* p : MemberCone({outputs[o]}, nullptr)) {
      if (p->shape().num_elements() != n) continue;
      auto [it, inserted] = owner.emplace(p, o);
      if (!inserted) parent[find(o)] = find(it->second);
    }
  }
  std::vector<LoopMember> members;
  std::map<size_t, size_t> member_of_root;
  for (size_t o = 0; o < outputs.size(); ++o) {
    auto [it, inserted] = member_of_root.emplace(find(o), members.size());
    if (inserted) members.emplace_back();
    members[it->second].outputs.push_back(outputs[o]);
    members[it->second].output_slots.push_back(slots[o]);
  }
  return members;
}

}  // namespace

std::vector<const ir::Instruction*> MemberCone(const std::vector<const ir::Instruction*>& outputs,
                                         std::string* key) {
  std::map<const ir::Instruction*, int64_t> numbers;
  std::vector<const ir::Instruction*> params;
  // Iterative post order: (instruction, next operand to visit).
  std::vector<std::pair<const ir::Instruction*, int64_t>> stack;
  for (const ir::Instruction* out : outputs) {
    if (!numbers.contains(out)) stack.emplace_back(out, 0);
    while (!stack.empty()) {
      auto& [inst, next] = stack.back();
      if (next < inst->operand_count()) {
        const ir::Instruction* op = inst->operand(next++);
        if (!numbers.contains(op)) stack.emplace_back(op, 0);
        continue;
      }
      const ir::Instruction* done = inst;
      stack.pop_back();
      if (numbers.contains(done)) continue;
      if (done->opcode() == ir::Opcode::kParameter) {
        if (key) *key += fmt::format("param {} {}\n", params.size(), done->shape().ToString());
        params.push_back(done);
      } else if (key) {
        *key += CanonicalInstruction(*done, numbers) + "\n";
      }
      numbers.emplace(done, static_cast<int64_t>(numbers.size()));
    }
  }
  if (key) {
    *key += "outputs";
    for (const ir::Instruction* out : outputs) *key += fmt::format(" {}", numbers.at(out));
  }
  return params;
}

StatusOr<LoopPlan> PlanLoop(const ir::Instruction& fusion) {
  ASSIGN_OR_RETURN(const ir::Computation* fused, FusedComputation(fusion));
  std::vector<const ir::Instruction*> outputs = FusionOutputs(*fused);
  std::vector<ir::Instruction*> params = fused->parameters();

  // Output groups by shape (Note [loop groups]), in order of first output.
  LoopPlan plan;
  std::vector<std::vector<const ir::Instruction*>> group_outputs;
  std::vector<std::vector<int64_t>> group_slots;
  for (size_t o = 0; o < outputs.size(); ++o) {
    const ir::Shape& s = outputs[o]->shape();
    if (s.is_tuple()) {
      return Error("%{}: tuple-shaped output {}", fusion.name(), Describe(*outputs[o]));
    }
    auto it = std::find_if(plan.groups.begin(), plan.groups.end(),
                           [&](const LoopGroup& g) { return g.dims == s.dims(); });
    size_t g = it - plan.groups.begin();
    if (it == plan.groups.end()) {
      plan.groups.push_back(LoopGroup{s.dims(), s.num_elements()});
      group_outputs.emplace_back();
      group_slots.emplace_back();
    }
    group_outputs[g].push_back(outputs[o]);
    group_slots[g].push_back(static_cast<int64_t>(params.size() + o));
  }

  int64_t max_iterations = 0, max_elements = 0;
  bool single_member = plan.groups.size() == 1;
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    LoopGroup& g = plan.groups[gi];
    // Note [loop vectorisation]: 16 bytes of the widest dtype moved.
    int64_t widest = 1;
    for (const ir::Instruction* out : group_outputs[gi])
      widest = std::max(widest, StorageBytes(out->shape().dtype()));
    for (const ir::Instruction* p : params) {
      if (p->shape().num_elements() == g.n)
        widest = std::max(widest, StorageBytes(p->shape().dtype()));
    }
    g.width = std::min<int64_t>(8, 16 / widest);
    while (g.width > 1 && g.n % g.width != 0) g.width /= 2;
    g.iterations = g.n / g.width;
    max_iterations = std::max(max_iterations, g.iterations);
    max_elements = std::max(max_elements, g.n);

    // Note [member classes]: members with one canonical cone share a class.
    std::map<std::string, size_t> class_of_key;
    for (LoopMember& m : Members(group_outputs[gi], group_slots[gi], g.n)) {
      std::string key;
      m.params = MemberCone(m.outputs, &key);
      auto [it, inserted] = class_of_key.emplace(std::move(key), g.classes.size());
      if (inserted) g.classes.emplace_back();
      g.classes[it->second].members.push_back(std::move(m));
    }
    single_member = single_member && g.classes.size() == 1 && g.classes[0].members.size() == 1;
  }

  plan.block = single_member
                   ? std::min(kBlock, std::max<int64_t>(32, (max_iterations + 31) / 32 * 32))
                   : kBlock;
  for (LoopGroup& g : plan.groups) {
    for (LoopClass& c : g.classes) {
      const int64_t members = static_cast<int64_t>(c.members.size());
      c.first_block = plan.grid;
      c.blocks_per_member = std::max<int64_t>(
          1, std::min(kMaxBlocks / members, (g.iterations + plan.block - 1) / plan.block));
      plan.grid += c.blocks();
    }
  }
  plan.wide = max_elements + kMaxBlocks * plan.block >= std::numeric_limits<int32_t>::max() ||
              plan.grid * plan.block >= std::numeric_limits<int32_t>::max();
  return plan;
}

}  // namespace gptc::codegen
