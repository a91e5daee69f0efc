#include "compiler/perf/kernel_model.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_set>

#include "compiler/perf/request_costs.h"
#include "compiler/support/ptx_stats.h"

namespace gptc::perf {
namespace {

constexpr int64_t kMaxSampledBlocks = 4096;

// One kind of block (Note [kernel model], step 1).
struct Kind {
  int64_t signature = 0;  // warp 0's first lane's instructions
  int64_t representative = 0;
  int64_t count = 0;  // blocks of the grid of this kind
  BlockWalk walk;
  std::vector<std::vector<RequestCost>> costs;
  SimResult sim;
  double slot_clocks = 0;  // a resident slot's time for one block of this kind
  double span = 0;         // the simulation's, from the first start
};

class Estimator {
 public:
  Estimator(const KernelLaunch& launch, const MachineModel& m, int64_t resident)
      : k_(*launch.kernel),
        shape_(launch.shape),
        registers_(launch.registers),
        m_(m),
        blocks_(shape_.grid.product()),
        resident_(resident),
        plan_(PlanWalk(k_)) {
    stride_ = std::max<int64_t>(1, (blocks_ + kMaxSampledBlocks - 1) / kMaxSampledBlocks);
    active_sms_ = std::min<int64_t>(m_.sms, (blocks_ + resident_ - 1) / resident_);
    sharing_.assign(k_.params, 1.0);
  }

  KernelTime Run() {
    out_.blocks_per_sm = resident_;
    const int64_t warps = (shape_.block.product() + 31) / 32;
    out_.warps_per_scheduler = (resident_ * warps + m_.sub_partitions - 1) / m_.sub_partitions;
    out_.waves = static_cast<double>(blocks_) / (static_cast<double>(m_.sms) * resident_);
    Sample();
    FormKinds();
    for (Kind& kd : kinds_) Simulate(kd);
    Summarize();
    out_.us = ScheduleGrid() / m_.clock_mhz + m_.launch_us;
    return out_;
  }

 private:
  // Step 1's first lanes, and the buffers' sharing of Note [memory levels]:
  // how many sampled blocks' first lanes touch each sector, on average.
  void Sample() {
    WalkOptions first;
    first.first_lane_only = true;
    std::vector<std::unordered_set<uint64_t>> distinct(k_.params);
    std::vector<double> touches(k_.params, 0);
    for (int64_t b = 0; b < blocks_; b += stride_) {
      BlockWalk w = WalkBlock(k_, plan_, shape_, b, first);
      out_.truncated = out_.truncated || w.truncated;
      signatures_.push_back(w.warps.empty() ? 0 : w.warps[0].instructions);
      std::sort(w.first_lane_sectors.begin(), w.first_lane_sectors.end());
      w.first_lane_sectors.erase(
          std::unique(w.first_lane_sectors.begin(), w.first_lane_sectors.end()),
          w.first_lane_sectors.end());
      for (const auto& [param, sector] : w.first_lane_sectors) {
        if (param < 0) continue;
        distinct[param].insert(sector);
        touches[param] += 1;
      }
    }
    for (int p = 0; p < k_.params; ++p) {
      if (!distinct[p].empty()) sharing_[p] = touches[p] / static_cast<double>(distinct[p].size());
    }
  }

  // Kinds by signature (quantiles beyond kMaxKinds), each walked whole.
  void FormKinds() {
    std::vector<int64_t> values = signatures_;
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    std::vector<int64_t> reps = values;
    if (static_cast<int64_t>(reps.size()) > kMaxKinds) {
      reps.clear();
      for (int q = 0; q < kMaxKinds; ++q) {
        reps.push_back(values[(values.size() - 1) * q / (kMaxKinds - 1)]);
      }
      reps.erase(std::unique(reps.begin(), reps.end()), reps.end());
    }
    kinds_.resize(reps.size());
    for (size_t i = 0; i < reps.size(); ++i) kinds_[i].signature = reps[i];
    std::vector<bool> has_representative(kinds_.size(), false);
    for (size_t i = 0; i < signatures_.size(); ++i) {
      auto it = std::lower_bound(reps.begin(), reps.end(), signatures_[i]);
      if (it == reps.end() ||
          (it != reps.begin() && signatures_[i] - *(it - 1) < *it - signatures_[i])) {
        --it;
      }
      const int kind = static_cast<int>(it - reps.begin());
      sample_kind_.push_back(kind);
      const int64_t block = static_cast<int64_t>(i) * stride_;
      if (!has_representative[kind] && signatures_[i] == reps[kind]) {
        kinds_[kind].representative = block;
        has_representative[kind] = true;
      }
      kinds_[kind].count += std::min(stride_, blocks_ - block);
    }
    out_.kinds = static_cast<int64_t>(kinds_.size());
    for (Kind& kd : kinds_) {
      kd.walk = WalkBlock(k_, plan_, shape_, kd.representative);
      out_.unknown_branches = std::max(out_.unknown_branches, kd.walk.unknown_branches);
      out_.truncated = out_.truncated || kd.walk.truncated;
    }
  }

  double DramBytesPerClock() const {
    return std::min(m_.dram_bytes_per_clock / active_sms_, m_.sm_port_bytes_per_clock);
  }

  // Step 4: the kind's block beside its resident copies, their starts
  // staggered over a block's issue time. A slot turns a block over in the
  // copies' mean time, unless a unit they share was busier: then in that
  // unit's time (staggered, the copies overlap less than a full
  // multiprocessor's blocks do).
  void Simulate(Kind& kd) {
    if (!sim_kernel_) sim_kernel_ = PrepareSimKernel(k_, m_, registers_);
    const int64_t smem = k_.static_shared_bytes + shape_.dynamic_shared_bytes;
    const int64_t l1 = std::max<int64_t>(m_.l1_bytes - resident_ * smem, 0) / resident_;
    kd.costs = RequestCosts(k_, kd.walk, sharing_, l1, m_);
    const int64_t warps = static_cast<int64_t>(kd.walk.warps.size());
    const int64_t issue = warps == 0 ? 0 : kd.walk.warps[0].instructions * ((warps + 3) / 4);
    std::vector<SimBlock> copies(resident_);
    for (int64_t c = 0; c < resident_; ++c) {
      copies[c] = SimBlock{&kd.walk, &kd.costs, c * issue / resident_};
    }
    kd.sim = SimulateSm(*sim_kernel_, copies, m_, active_sms_);
    double sum = 0;
    for (int64_t c = 0; c < resident_; ++c) sum += kd.sim.finish[c] - copies[c].start;
    double busiest = kd.sim.issued / static_cast<double>(m_.sub_partitions);
    for (int p = 0; p < kNumPipes; ++p) {
      const bool shared_path = p == static_cast<int>(Pipe::kMio);
      busiest = std::max(busiest, kd.sim.pipe_busy[p] / (shared_path ? 1.0 : m_.sub_partitions));
    }
    busiest = std::max(busiest, kd.sim.dram_bytes / DramBytesPerClock());
    busiest = std::max(busiest, kd.sim.l2_bytes / std::min(m_.l2_bytes_per_clock / active_sms_,
                                                           m_.sm_port_bytes_per_clock));
    kd.slot_clocks = std::max({1.0, sum / resident_, busiest});
    kd.span = std::max<double>(1, kd.sim.clocks - copies[0].start);
  }

  // The units' use and stalls over the kinds, weighted by their blocks' time.
  void Summarize() {
    double weighted = 0, issue = 0, tensor = 0, mio = 0, dram = 0, instructions = 0;
    std::array<double, kNumStalls> stalls{};
    for (const Kind& kd : kinds_) {
      const double w = static_cast<double>(kd.count) * kd.slot_clocks;
      weighted += w;
      issue += w * kd.sim.issued / (kd.span * m_.sub_partitions);
      tensor +=
          w * kd.sim.pipe_busy[static_cast<int>(Pipe::kTensor)] / (kd.span * m_.sub_partitions);
      mio += w * kd.sim.pipe_busy[static_cast<int>(Pipe::kMio)] / kd.span;
      dram += w * kd.sim.dram_bytes / (kd.span * DramBytesPerClock());
      for (int s = 0; s < kNumStalls; ++s)
        stalls[s] += static_cast<double>(kd.sim.stalls[s]) * kd.count;
      instructions += static_cast<double>(kd.sim.warp_instructions) * kd.count;
      out_.dram_bytes += kd.sim.dram_bytes / resident_ * kd.count;
    }
    if (weighted > 0) {
      out_.issue_use = issue / weighted;
      out_.tensor_use = tensor / weighted;
      out_.mio_use = mio / weighted;
      out_.dram_use = dram / weighted;
    }
    if (instructions > 0) {
      for (int s = 0; s < kNumStalls; ++s) out_.stalls_per_issue[s] = stalls[s] / instructions;
    }
    const std::pair<double, const char*> uses[] = {{out_.tensor_use, "tensor"},
                                                   {out_.issue_use, "issue"},
                                                   {out_.dram_use, "memory"},
                                                   {out_.mio_use, "shared"}};
    const auto* most = std::max_element(std::begin(uses), std::end(uses));
    out_.bound = most->first >= 0.6 ? most->second : "latency";
  }

  // The grid's blocks, in order, to the resident slot that frees first.
  double ScheduleGrid() const {
    std::priority_queue<double, std::vector<double>, std::greater<double>> slots;
    for (int64_t i = 0; i < m_.sms * resident_; ++i) slots.push(0);
    double end = 0;
    for (int64_t b = 0; b < blocks_; ++b) {
      const size_t sample = std::min<size_t>(b / stride_, sample_kind_.size() - 1);
      const double t = slots.top() + kinds_[sample_kind_[sample]].slot_clocks;
      slots.pop();
      slots.push(t);
      end = std::max(end, t);
    }
    return end;
  }

  const PtxKernel& k_;
  const LaunchShape& shape_;
  const int64_t registers_;
  const MachineModel& m_;
  const int64_t blocks_, resident_;
  const WalkPlan plan_;
  int64_t stride_ = 1, active_sms_ = 1;
  std::vector<double> sharing_;
  std::vector<int64_t> signatures_;  // by sampled block
  std::vector<int> sample_kind_;     // by sampled block
  std::vector<Kind> kinds_;
  std::optional<SimKernel> sim_kernel_;
  KernelTime out_;
};

}  // namespace

StatusOr<KernelTime> EstimateKernel(const KernelLaunch& launch, const MachineModel& m) {
  const PtxKernel& k = *launch.kernel;
  const int64_t blocks = launch.shape.grid.product();
  const int64_t threads = launch.shape.block.product();
  if (blocks <= 0 || threads <= 0) {
    return Error("kernel {}: empty launch ({} blocks of {} threads)", k.name, blocks, threads);
  }
  const int64_t smem = k.static_shared_bytes + launch.shape.dynamic_shared_bytes;
  const int64_t resident = BlocksPerSm(threads, launch.registers, smem);
  if (resident <= 0) {
    return Error(
        "kernel {}: a block of {} threads at {} registers with {} bytes of shared memory "
        "does not fit an H100 multiprocessor",
        k.name, threads, launch.registers, smem);
  }
  Estimator estimator(launch, m, std::min<int64_t>(resident, (blocks + m.sms - 1) / m.sms));
  return estimator.Run();
}

}  // namespace gptc::perf
