// The gemm autotuning cache: what the tuning of runtime/gpu/autotune.h
// chose for each gemm descriptor on each GPU, so that a later load takes
// the choice without timing anything.
//
// Note [autotune cache]
// One JSON file, $XDG_CACHE_HOME/gptc/autotune.json (~/.cache/... without
// XDG_CACHE_HOME):
//   {"format": "gptc-autotune-1",
//    "devices": {"<GPU name> | driver <v> | cuBLASLt <v>": {
//        "<descriptor>": {"path": "epilogue", "algorithm": "<hex of the
//                         cublasLtMatmulAlgo_t>", "us": 41.5, "candidates": 9}}}}
// An algorithm is only meaningful to the cuBLASLt and GPU that returned it,
// hence the device key; entries of other devices are kept as they are. The
// cache can only make a load faster, never fail one: a missing file is an
// empty cache, an unreadable or corrupt one (a truncated write, another
// format) a warning and an empty cache that the next save replaces, a
// folder that cannot be written a warning (the tuning then holds for this
// process). Saves are atomic (a temporary file renamed over it) and
// serialized between processes by an flock on "<file>.lock": each save
// reads the file again under the lock and adds its own entries, so two
// processes tuning at once both keep theirs.
//
// Internal to runtime/gpu.
#ifndef GPTC_RUNTIME_GPU_AUTOTUNE_CACHE_H_
#define GPTC_RUNTIME_GPU_AUTOTUNE_CACHE_H_

#include <map>
#include <string>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::rt::gpu {

// One descriptor's choice.
struct CachedGemm {
  std::string path;       // "epilogue" or "fallback" (Note [autotune paths] in autotune.h)
  std::string algorithm;  // the cublasLtMatmulAlgo_t's bytes in hex
  double us = 0;          // per call, when it was tuned
  int candidates = 0;     // how many were timed
  bool operator==(const CachedGemm&) const = default;
};

class AutotuneCache {
 public:
  // `path` empty: no file (nothing is read or written).
  AutotuneCache(std::string path, std::string device_key)
      : path_(std::move(path)), device_key_(std::move(device_key)) {}

  // Reads the file; returns the warnings (a corrupt or unreadable file,
  // and what happens next: tuned again and replaced when `retune`, else the
  // heuristic's first answers, the file left as it is).
  std::vector<std::string> Load(bool retune = true);
  const CachedGemm* Find(const std::string& descriptor) const;
  void Put(const std::string& descriptor, CachedGemm gemm);
  // Writes the entries Put since Load, merged into the file as it is now.
  // An error (for a warning) when the file or its folder cannot be written.
  Status Save();

  const std::string& path() const { return path_; }
  // Entries of this device, and of the others, read by Load.
  size_t size() const { return entries_.size(); }
  size_t other_devices() const { return other_devices_; }

 private:
  std::string path_;
  std::string device_key_;
  std::map<std::string, CachedGemm> entries_;  // this device's
  std::map<std::string, CachedGemm> added_;    // Put since Load
  size_t other_devices_ = 0;
};

// $XDG_CACHE_HOME/gptc/autotune.json, else $HOME/.cache/gptc/autotune.json,
// else empty (no cache).
std::string DefaultAutotuneCachePath();

}  // namespace gptc::rt::gpu

#endif  // GPTC_RUNTIME_GPU_AUTOTUNE_CACHE_H_
