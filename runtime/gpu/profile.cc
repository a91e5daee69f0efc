#include "runtime/gpu/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace gptc::rt::gpu {

void ProfileTable::AddRun(std::span<const ThunkTime> times) {
  for (const ThunkTime& t : times) {
    auto [it, inserted] = index_.try_emplace({t.kind, t.name}, rows_.size());
    if (inserted) rows_.push_back({t.kind, t.name, t.meta, t.entry});
    Row& row = rows_[it->second];
    if (!inserted && !t.meta.empty() && row.meta.find(t.meta) == std::string::npos &&
        row.meta.size() < 60) {
      row.meta += row.meta.empty() ? t.meta : "," + t.meta;
    }
    row.ms += t.ms;
    ++row.calls;
    by_kind_[t.kind].first += t.ms;
    ++by_kind_[t.kind].second;
    total_ms_ += t.ms;
  }
  thunks_per_run_ = static_cast<int64_t>(times.size());
  ++runs_;
}

double ProfileTable::KindMsPerRun(const std::string& kind) const {
  auto it = by_kind_.find(kind);
  return it == by_kind_.end() || runs_ == 0 ? 0 : it->second.first / runs_;
}

std::string ProfileTable::Format(int top_n) const {
  if (runs_ == 0) return "profile: no profiled steps";
  const double runs = static_cast<double>(runs_);
  const double per_run = total_ms_ / runs;
  auto share = [&](double ms) { return total_ms_ > 0 ? 100.0 * ms / total_ms_ : 0.0; };
  std::string out = fmt::format(
      "profile: {} step{}, {:.3f} ms/step in {} thunks (sum of per-thunk CUDA event times, "
      "no graph)\n",
      runs_, runs_ == 1 ? "" : "s", per_run, thunks_per_run_);
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> kinds(by_kind_.begin(),
                                                                        by_kind_.end());
  std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) {
    return a.second.first > b.second.first ||
           (a.second.first == b.second.first && a.first < b.first);
  });
  out += "by kind:";
  for (const auto& [kind, v] : kinds) {
    out += fmt::format(" | {} {:.3f} ms ({:.1f}%, {} a step)", kind, v.first / runs, share(v.first),
                       v.second / runs_);
  }
  out += "\n";
  std::vector<const Row*> sorted;
  for (const Row& r : rows_) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](const Row* a, const Row* b) {
    return a->ms > b->ms || (a->ms == b->ms && a->name < b->name);
  });
  const size_t n = std::min<size_t>(sorted.size(), std::max(top_n, 0));
  out += fmt::format("top {} of {} by time:\n", n, sorted.size());
  out += fmt::format("{:>10}  {:>6}  {:>6}  {:>6}  {:<40}  {}\n", "ms/step", "share", "cum",
                     "calls", "kind name", "meta");
  double cumulative = 0;
  for (size_t i = 0; i < n; ++i) {
    const Row& r = *sorted[i];
    cumulative += r.ms;
    out +=
        fmt::format("{:>10.4f}  {:>5.1f}%  {:>5.1f}%  {:>6}  {:<40}  {}\n", r.ms / runs,
                    share(r.ms), share(cumulative), r.calls / runs_, r.kind + " " + r.name, r.meta);
  }
  out.pop_back();  // the last newline
  return out;
}

}  // namespace gptc::rt::gpu
