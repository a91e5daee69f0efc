#include "compiler/perf/request_costs.h"

#include <algorithm>
#include <unordered_map>

namespace gptc::perf {
namespace {

constexpr double kSharedBuffer = 1.5;

enum class Level { kL1, kL2, kDram };

// Note [memory levels] over one block's requests.
class Coster {
 public:
  Coster(const BlockWalk& walk, const std::vector<double>& sharing, int64_t l1_bytes,
         const MachineModel& m)
      : walk_(walk), sharing_(sharing), window_(std::max<int64_t>(l1_bytes / 32, 1)), m_(m) {}

  RequestCost Cost(const MemoryRequest& r, const PtxInst* in) {
    RequestCost c;
    if (!r.executed) {
      c.latency = 0;
      return c;
    }
    if (r.space == PtxSpace::kShared) {
      c.mio_clocks = std::max<uint16_t>(r.wavefronts, 1);
      const bool ldmatrix = in && in->op == PtxOp::kLdmatrix;
      c.latency = static_cast<uint16_t>((ldmatrix ? m_.ldmatrix_latency : m_.shared_latency) +
                                        c.mio_clocks - 1);
      c.wait = Wait::kShort;
      return c;
    }
    if (r.space == PtxSpace::kLocal) {
      c.mio_clocks = static_cast<uint16_t>(std::max<uint32_t>((r.bytes + 127) / 128, 1));
      c.latency = static_cast<uint16_t>(m_.l1_latency);
      return c;
    }
    return Global(r, in);
  }

 private:
  RequestCost Global(const MemoryRequest& r, const PtxInst* in) {
    const bool store = in && in->op == PtxOp::kSt;
    const bool bypass_l1 = in && (in->op == PtxOp::kCpAsync || in->op == PtxOp::kAtom);
    const double share =
        r.param >= 0 && r.param < static_cast<int>(sharing_.size()) ? sharing_[r.param] : 1.0;
    Level worst = Level::kL1;
    double dram = 0, l2 = 0;
    auto sector = [&](bool hit) {
      if (hit && !bypass_l1 && !store) return;
      l2 += 32;
      if (share > kSharedBuffer && !store) {
        worst = std::max(worst, Level::kL2);
        dram += 32 / share;
      } else {
        worst = Level::kDram;
        dram += 32;
      }
    };
    if (r.listed == r.sectors && r.sectors > 0) {
      for (uint32_t s = 0; s < r.listed; ++s) {
        const uint64_t sec = walk_.sectors[r.first_sector + s];
        auto it = last_use_.find(sec);
        const bool hit = it != last_use_.end() && touched_ - it->second <= window_;
        ++touched_;
        if (!store) last_use_[sec] = touched_;
        sector(hit);
      }
    } else {  // addresses from loaded data: assume no reuse
      for (uint32_t s = 0; s < r.sectors; ++s) sector(false);
      touched_ += r.sectors;
    }
    if (in && in->op == PtxOp::kAtom) worst = std::max(worst, Level::kL2);
    RequestCost c;
    c.mio_clocks = static_cast<uint16_t>(std::max<uint32_t>((r.sectors + 3) / 4, 1));
    c.dram_bytes = static_cast<float>(dram);
    c.l2_bytes = static_cast<float>(l2);
    c.latency = static_cast<uint16_t>(worst == Level::kDram ? m_.dram_latency
                                      : worst == Level::kL2 ? m_.l2_latency
                                                            : m_.l1_latency);
    c.wait = Wait::kLong;
    return c;
  }

  const BlockWalk& walk_;
  const std::vector<double>& sharing_;
  const int64_t window_;
  const MachineModel& m_;
  std::unordered_map<uint64_t, int64_t> last_use_;
  int64_t touched_ = 0;  // sectors so far
};

}  // namespace

std::vector<std::vector<RequestCost>> RequestCosts(const PtxKernel& k, const BlockWalk& walk,
                                                   const std::vector<double>& sharing,
                                                   int64_t l1_bytes, const MachineModel& m) {
  const size_t warps = walk.warps.size();
  std::vector<std::vector<RequestCost>> costs(warps);
  // The memory instructions along each path, to pair each request with its
  // instruction.
  std::vector<std::vector<const PtxInst*>> insts(warps);
  size_t most = 0;
  for (size_t w = 0; w < warps; ++w) {
    for (int32_t b : walk.warps[w].blocks) {
      for (const PtxInst& in : k.blocks[b].insts) {
        if (IsMemoryInstruction(in)) insts[w].push_back(&in);
      }
    }
    costs[w].resize(walk.warps[w].requests.size());
    most = std::max(most, walk.warps[w].requests.size());
  }
  Coster coster(walk, sharing, l1_bytes, m);
  for (size_t i = 0; i < most; ++i) {
    for (size_t w = 0; w < warps; ++w) {
      if (i >= walk.warps[w].requests.size()) continue;
      costs[w][i] =
          coster.Cost(walk.warps[w].requests[i], i < insts[w].size() ? insts[w][i] : nullptr);
    }
  }
  return costs;
}

}  // namespace gptc::perf
