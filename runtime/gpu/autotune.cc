#include "runtime/gpu/autotune.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "runtime/gpu/backend.h"

namespace gptc::rt::gpu {

namespace {

std::string AlgorithmHex(const cublasLtMatmulHeuristicResult_t& r) {
  std::string out;
  for (uint64_t word : r.algo.data) out += fmt::format("{:016x}", word);
  return out;
}

std::string LayoutKey(const program::GemmLayout& l) {
  return fmt::format("{} {}x{} ld {} stride {}", program::GemmDTypeName(l.dtype), l.rows, l.cols,
                     l.ld, l.batch_stride);
}

}  // namespace

std::string_view TunedPathName(TunedPath path) {
  return path == TunedPath::kFallback ? "fallback" : "epilogue";
}

std::string TuningKey(const GemmConfig& config, bool has_fallback) {
  // Summary has the problem, A, B and D but not C or the batch strides.
  return fmt::format("{} | C {} | batch strides {} {} {} | {} | aux ld {} | workspace {}{}",
                     config.Summary(), LayoutKey(config.c), config.a.batch_stride,
                     config.b.batch_stride, config.d.batch_stride,
                     program::GemmComputeName(config.compute_type), config.aux_ld,
                     config.workspace_bytes, has_fallback ? " | fallback" : "");
}

GemmAutotuner::GemmAutotuner(const RuntimeApi& cuda, AutotuneOptions options,
                             std::string device_key, std::vector<std::string>& warnings)
    : cuda_(cuda),
      options_(std::move(options)),
      cache_(options_.mode == AutotuneMode::kOff ? "" : options_.cache_path,
             std::move(device_key)) {
  for (std::string& w : cache_.Load(options_.mode == AutotuneMode::kOn)) {
    warnings.push_back(std::move(w));
  }
}

GemmAutotuner::~GemmAutotuner() {
  if (start_ != nullptr) cuda_.EventDestroy(start_);
  if (stop_ != nullptr) cuda_.EventDestroy(stop_);
}

StatusOr<std::optional<double>> GemmAutotuner::TimeUs(
    const std::function<Status(cudaStream_t)>& run, cudaStream_t stream, std::string* refused) {
  for (cudaEvent_t* e : {&start_, &stop_}) {
    if (*e == nullptr) {
      RETURN_IF_ERROR(cuda_.Check(cuda_.EventCreate(e), "autotune: cudaEventCreate"));
    }
  }
  // A call that fails enqueues nothing (cuBLASLt checks before it launches).
  auto call = [&]() -> bool {
    Status s = run(stream);
    if (!s.ok()) *refused = std::string(s.message());
    return s.ok();
  };
  for (int i = 0; i < options_.warmup; ++i) {
    if (!call()) return std::optional<double>();
  }
  RETURN_IF_ERROR(cuda_.Check(cuda_.EventRecord(start_, stream), "autotune: cudaEventRecord"));
  const int reps = std::max(options_.reps, 1);
  for (int i = 0; i < reps; ++i) {
    if (!call()) {
      // Let the runs enqueued so far finish before the next candidate.
      RETURN_IF_ERROR(
          cuda_.Check(cuda_.StreamSynchronize(stream), "autotune: cudaStreamSynchronize"));
      return std::optional<double>();
    }
  }
  RETURN_IF_ERROR(cuda_.Check(cuda_.EventRecord(stop_, stream), "autotune: cudaEventRecord"));
  RETURN_IF_ERROR(cuda_.Check(cuda_.EventSynchronize(stop_), "autotune: cudaEventSynchronize"));
  float ms = 0;
  RETURN_IF_ERROR(
      cuda_.Check(cuda_.EventElapsedTime(&ms, start_, stop_), "autotune: cudaEventElapsedTime"));
  return std::optional<double>(1000.0 * ms / reps);
}

bool GemmAutotuner::ApplyCached(const GemmCandidates& g, cublasLtHandle_t handle,
                                GemmChoice& choice) {
  const CachedGemm* cached = cache_.Find(g.key);
  if (cached == nullptr) return false;
  const TunedPath path = cached->path == TunedPathName(TunedPath::kFallback) ? TunedPath::kFallback
                                                                             : TunedPath::kEpilogue;
  GemmRunner* runner = path == TunedPath::kFallback ? g.plain : g.epilogue;
  if (runner == nullptr) return false;  // that path is not offered here
  StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> answers =
      runner->Candidates(handle, options_.max_candidates);
  if (!answers.ok()) return false;
  for (size_t i = 0; i < answers->size(); ++i) {
    if (AlgorithmHex((*answers)[i]) != cached->algorithm) continue;
    runner->UseAlgorithm(handle, (*answers)[i]);
    choice.path = path;
    choice.algorithm = static_cast<int>(i);
    choice.candidates = cached->candidates;
    choice.us = cached->us;
    choice.from_cache = true;
    choice.result = (*answers)[i];
    return true;
  }
  return false;  // cuBLASLt no longer offers it: tune again
}

StatusOr<TunedPath> GemmAutotuner::Time(const GemmCandidates& g, cublasLtHandle_t handle,
                                        cudaStream_t stream, GemmChoice& choice) {
  struct Best {
    TunedPath path;
    int index;
    double us;
    cublasLtMatmulHeuristicResult_t result;
  };
  std::optional<Best> best;
  std::vector<std::string> skipped;
  auto try_path = [&](TunedPath path, GemmRunner* runner, double extra_us) -> Status {
    StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> offered =
        runner->Candidates(handle, options_.max_candidates);
    if (!offered.ok()) {  // no algorithm on this path: the other may have one
      skipped.push_back(std::string(offered.status().message()));
      return Status::Ok();
    }
    const std::vector<cublasLtMatmulHeuristicResult_t>& answers = *offered;
    for (size_t i = 0; i < answers.size(); ++i) {
      runner->UseAlgorithm(handle, answers[i]);
      std::string refused;
      ASSIGN_OR_RETURN(
          std::optional<double> us,
          TimeUs([runner](cudaStream_t s) { return runner->Run(s); }, stream, &refused));
      if (!us) {  // a candidate cublasLtMatmul refuses is skipped
        skipped.push_back(std::move(refused));
        continue;
      }
      ++choice.candidates;
      const double total = *us + extra_us;
      if (path == TunedPath::kEpilogue && i == 0) choice.first_us = total;
      if (!best || total < best->us) best = Best{path, static_cast<int>(i), total, answers[i]};
    }
    return Status::Ok();
  };
  if (g.epilogue != nullptr) {
    RETURN_IF_ERROR(try_path(TunedPath::kEpilogue, g.epilogue, 0));
  }
  if (g.plain != nullptr) {
    std::string failed;
    ASSIGN_OR_RETURN(std::optional<double> kernel_us, TimeUs(g.kernel, stream, &failed));
    if (!kernel_us) return Error("{}: autotune: the fallback kernel: {}", g.thunk, failed);
    RETURN_IF_ERROR(try_path(TunedPath::kFallback, g.plain, *kernel_us));
  }
  if (!best) {
    return Error("{}: autotune: no candidate ran ({})", g.thunk,
                 skipped.empty() ? "none offered" : skipped.front());
  }
  (best->path == TunedPath::kFallback ? g.plain : g.epilogue)->UseAlgorithm(handle, best->result);
  choice.algorithm = best->index;
  choice.us = best->us;
  choice.result = best->result;
  cache_.Put(g.key, CachedGemm{.path = std::string(TunedPathName(best->path)),
                               .algorithm = AlgorithmHex(best->result),
                               .us = best->us,
                               .candidates = choice.candidates});
  return best->path;
}

StatusOr<TunedPath> GemmAutotuner::Tune(const GemmCandidates& g, cublasLtHandle_t handle,
                                        cudaStream_t stream) {
  if (g.epilogue == nullptr && g.plain == nullptr) {
    return Error("{}: autotune: no way to run the gemm", g.thunk);
  }
  if (auto it = by_key_.find(g.key); it != by_key_.end()) {
    GemmChoice& c = choices_[it->second];
    c.thunks.push_back(g.thunk);
    (c.path == TunedPath::kFallback ? g.plain : g.epilogue)->UseAlgorithm(handle, c.result);
    return c.path;
  }
  GemmChoice c{.key = g.key, .flops = g.flops, .thunks = {g.thunk}};
  if (options_.mode != AutotuneMode::kOff && ApplyCached(g, handle, c)) {
    ++cached_;
  } else if (options_.mode == AutotuneMode::kOn) {
    if (options_.progress) {
      options_.progress(fmt::format("autotuning gemm {}: {}", timed_ + 1, g.thunk));
    }
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(c.path, Time(g, handle, stream, c));
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++timed_;
  } else {
    // The heuristic's first answer, with the epilogue where cuBLASLt has one.
    c.path = g.epilogue != nullptr ? TunedPath::kEpilogue : TunedPath::kFallback;
    GemmRunner* runner = c.path == TunedPath::kFallback ? g.plain : g.epilogue;
    ASSIGN_OR_RETURN(std::vector<cublasLtMatmulHeuristicResult_t> first,
                     runner->Candidates(handle, 1));
    runner->UseAlgorithm(handle, first[0]);
    c.result = first[0];
  }
  by_key_[g.key] = choices_.size();
  choices_.push_back(std::move(c));
  return choices_.back().path;
}

void GemmAutotuner::Finish(std::vector<std::string>& warnings) {
  if (Status s = cache_.Save(); !s.ok()) {
    warnings.push_back(
        fmt::format("the autotune cache cannot be written ({}): the tuning holds for this run only",
                    s.message()));
  }
}

std::string GemmAutotuner::Summary() const {
  int reordered = 0, fallback = 0, candidates = 0;
  for (const GemmChoice& c : choices_) {
    const bool plain = c.path == TunedPath::kFallback;
    fallback += plain;
    reordered += c.algorithm != 0 || plain;
    if (!c.from_cache) candidates += c.candidates;
  }
  const std::string cache = cache_.path().empty() ? "no cache" : "cache " + cache_.path();
  return fmt::format(
      "autotune ({}, {}): {} distinct gemm{}: {} timed ({} candidates, {:.2f} s), {} from the "
      "cache, {} untimed; {} not the heuristic's first answer, {} of them the gemm without its "
      "epilogue plus its kernel",
      AutotuneModeName(options_.mode), cache, choices_.size(), choices_.size() == 1 ? "" : "s",
      timed_, candidates, seconds_, cached_, choices_.size() - timed_ - cached_, reordered,
      fallback);
}

std::string GemmAutotuner::Table() const {
  std::string out = fmt::format("gemms ({}; one row per descriptor):\n", Summary());
  out += fmt::format("{:>9}  {:>8}  {:>9}  {:<16}  {:>5}  {}\n", "us/call", "TFLOP/s", "first us",
                     "choice", "calls", "thunks");
  for (const GemmChoice& c : choices_) {
    const std::string us = c.us > 0 ? fmt::format("{:.1f}", c.us) : "-";
    const std::string tflops = c.us > 0 ? fmt::format("{:.1f}", c.flops / c.us / 1e6) : "-";
    const std::string first = c.first_us > 0 ? fmt::format("{:.1f}", c.first_us) : "-";
    const std::string choice =
        fmt::format("{} #{}{}", TunedPathName(c.path), c.algorithm, c.from_cache ? " (cache)" : "");
    out += fmt::format("{:>9}  {:>8}  {:>9}  {:<16}  {:>5}  {}{}\n", us, tflops, first, choice,
                       c.thunks.size(), c.thunks.front(),
                       c.thunks.size() > 1 ? fmt::format(" (+{})", c.thunks.size() - 1) : "");
  }
  out.pop_back();
  return out;
}

}  // namespace gptc::rt::gpu
