#include "passes/all_reduce_combiner.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "compiler/analysis/kernel_count.h"
#include "compiler/ir/all_reduce_bucket.h"

namespace gptc::passes {

using ir::Instruction;

StatusOr<AllReduceCombinerOptions> ParseAllReduceCombinerOptions(
    const std::map<std::string, std::string>& options) {
  AllReduceCombinerOptions o;
  for (const auto& [key, value] : options) {
    if (key != "bucket-mib" && key != "first-bucket-mib") {
      return Error("all-reduce-combiner: unknown option '{}' (known: bucket-mib, first-bucket-mib)",
                   key);
    }
    char* end = nullptr;
    const long long mib = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || mib < 1 || mib > (int64_t{1} << 20)) {
      return Error("all-reduce-combiner: {} must be an integer in [1, 1048576], got '{}'", key,
                   value);
    }
    (key == "bucket-mib" ? o.bucket_bytes : o.first_bucket_bytes) = int64_t{mib} << 20;
  }
  return o;
}

std::vector<std::vector<Instruction*>> GroupCollectives(const ir::Computation& computation,
                                                        const AllReduceCombinerOptions& options) {
  std::unordered_map<const Instruction*, int64_t> position;
  for (const auto& inst : computation.instructions()) {
    position.emplace(inst.get(), static_cast<int64_t>(position.size()));
  }
  const int64_t end = static_cast<int64_t>(position.size());
  // A reader launches work where it is a kernel.
  auto launch_position = [&](const Instruction& reader) -> std::optional<int64_t> {
    if (!analysis::IsKernel(reader)) return std::nullopt;
    return position.at(&reader);
  };
  std::vector<std::vector<Instruction*>> buckets;
  int64_t bytes = 0;        // the open bucket's operands
  int64_t wait_before = 0;  // the first reader of any of its members
  bool open = false;
  for (const auto& owned : computation.instructions()) {
    Instruction* inst = owned.get();
    if (!ir::IsCollective(inst->opcode())) continue;
    const int64_t size = inst->operand(0)->shape().byte_size();
    // Note [all-reduce buckets]: a member's result must not be read before
    // the bucket is issued (at its last member); the cap closes it too, and
    // so does a collective of another opcode.
    const int64_t cap = buckets.size() == 1 && options.first_bucket_bytes > 0
                            ? options.first_bucket_bytes
                            : options.bucket_bytes;
    if (open && (position.at(inst) >= wait_before || bytes + size > cap ||
                 inst->opcode() != buckets.back().back()->opcode())) {
      open = false;
    }
    if (!open) {
      buckets.emplace_back();
      bytes = 0;
      wait_before = end;
      open = true;
    }
    buckets.back().push_back(inst);
    bytes += size;
    wait_before =
        std::min(wait_before, analysis::FirstLaunchingReader(*inst, launch_position, end));
  }
  return buckets;
}

StatusOr<bool> AllReduceCombiner::Run(ir::Module& module) {
  bool changed = false;
  for (const auto& computation : module.computations()) {
    const std::vector<std::vector<Instruction*>> buckets = GroupCollectives(*computation, options_);
    for (int64_t k = 0; k < static_cast<int64_t>(buckets.size()); ++k) {
      for (Instruction* member : buckets[k]) {
        if (ir::CollectiveBucket(*member) == k) continue;
        ir::SetCollectiveBucket(*member, k);
        changed = true;
      }
    }
  }
  return changed;
}

}  // namespace gptc::passes
