// How gemms choose their cuBLASLt algorithm at load (runtime/gpu/autotune.h):
// the options gptrun's --autotune sets. CUDA-free.
#ifndef GPTC_RUNTIME_GPU_AUTOTUNE_OPTIONS_H_
#define GPTC_RUNTIME_GPU_AUTOTUNE_OPTIONS_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace gptc::rt::gpu {

enum class AutotuneMode {
  kOff,     // the heuristic's first answer (no timing, no cache)
  kCached,  // the cache's choice where it has one, else the heuristic's first
  kOn,      // the cache's choice, else tune (and add to the cache)
};
// off|cached|on (gptrun --autotune).
inline std::optional<AutotuneMode> ParseAutotuneMode(std::string_view text) {
  if (text == "off") return AutotuneMode::kOff;
  if (text == "cached") return AutotuneMode::kCached;
  if (text == "on") return AutotuneMode::kOn;
  return std::nullopt;
}
inline std::string_view AutotuneModeName(AutotuneMode mode) {
  switch (mode) {
    case AutotuneMode::kOff:
      return "off";
    case AutotuneMode::kCached:
      return "cached";
    case AutotuneMode::kOn:
      return "on";
  }
  return "?";
}

struct AutotuneOptions {
  // Off unless asked for (gptrun asks, --autotune on being its default):
  // tests that create many trainers need no timing.
  AutotuneMode mode = AutotuneMode::kOff;
  // Note [autotune cache]; empty: none (DefaultAutotuneCachePath gives the usual one).
  std::string cache_path;
  int max_candidates = 16;  // of each path (Note [autotune paths])
  int warmup = 2;           // untimed calls of each candidate
  int reps = 10;            // timed calls between two events
  // Told before each gemm is timed ("autotuning gemm 3: train_step/..."),
  // for a status line; may be empty.
  std::function<void(const std::string&)> progress;
};

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_AUTOTUNE_OPTIONS_H_
