// Per-thunk timings of profiled steps (gptrun --profile), aggregated by thunk
// kind and name: a kernel shared by several fusions (Note [kernel
// deduplication]) is one row with several calls a step. CUDA-free.
#ifndef GPTC_RUNTIME_GPU_PROFILE_H_
#define GPTC_RUNTIME_GPU_PROFILE_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace gptc::rt::gpu {

struct ThunkTime {
  std::string kind;  // "kernel", "gemm", ...
  std::string name;  // kernel: the PTX entry; others: the instruction
  std::string meta;
  double ms = 0;
  std::string entry;  // the plan's entry ("train_step")
};

class ProfileTable {
 public:
  // Adds one profiled run of an entry (every thunk once, in order).
  void AddRun(std::span<const ThunkTime> times);

  int64_t runs() const { return runs_; }
  double total_ms() const { return total_ms_; }
  // Milliseconds per run of thunks of `kind` (0 when none).
  double KindMsPerRun(const std::string& kind) const;

  // The report: time per step (sum of thunk times), totals by kind with their
  // share, then the `top_n` rows by time with ms/step, share, calls/step,
  // kind, name and meta. "no profiled steps" when empty.
  std::string Format(int top_n = 25) const;

  struct Row {
    std::string kind, name, meta;
    std::string entry;  // the first entry it was seen in
    double ms = 0;      // over all runs
    int64_t calls = 0;
  };
  const std::vector<Row>& rows() const { return rows_; }

 private:
  std::vector<Row> rows_;
  std::map<std::pair<std::string, std::string>, size_t> index_;  // (kind, name) -> row
  std::map<std::string, std::pair<double, int64_t>> by_kind_;    // ms, calls
  double total_ms_ = 0;
  int64_t runs_ = 0;
  int64_t thunks_per_run_ = 0;
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_PROFILE_H_
