// What the phases of one gptrun run share (tools/gptrun/train_loop.cc): its
// options and hooks, where it reports, and what its setup made (the
// artifact, the device's trainer, the ranks, the data). The setup fills it
// in order; the step, evaluation and checkpoint phases
// (train_step.h, train_evaluate.h, train_checkpoints.h) read it.
#ifndef GPTC_TOOLS_GPTRUN_TRAIN_CONTEXT_H_
#define GPTC_TOOLS_GPTRUN_TRAIN_CONTEXT_H_

#include <memory>
#include <optional>

#include "compiler/program/container.h"
#include "compiler/support/status.h"
#include "runtime/checkpoint_metadata.h"
#include "runtime/data_loader.h"
#include "runtime/program_loader.h"
#include "runtime/trainer.h"
#include "tools/gptrun/devices.h"
#include "tools/gptrun/distributed.h"
#include "tools/gptrun/run_report.h"
#include "tools/gptrun/tensorboard.h"
#include "tools/gptrun/train_loop.h"
#include "tools/gptrun/train_output.h"

namespace gptc::tools {

struct RunContext {
  RunContext(const TrainOptions& options, const TrainHooks& hooks, TrainSummary* summary)
      : o(options), hooks(hooks), summary(summary) {}

  const program::ModelConfig& model() const { return loaded->model; }
  const program::CompileFlags& flags() const { return loaded->flags; }
  program::TrainProgram& program() { return loaded->program; }
  // Rank 0 writes the checkpoints.
  bool WritesCheckpoints() const { return !o.ckpt_dir.empty() && !o.bench && dist->leader(); }
  // gptrun --report's page, rewritten (no-op without --report).
  Status WriteReport() {
    if (!report || !report->enabled()) return Status::Ok();
    return report->Write(*artifact, o.artifact, *trainer, trainer->DeviceName());
  }

  const TrainOptions& o;
  const TrainHooks& hooks;
  TrainSummary* summary;
  Console console;
  std::optional<program::Artifact> artifact;
  std::optional<rt::LoadedProgram> loaded;
  ChosenDevice device;
  std::optional<Distributed> dist;
  const program::TrainEntry* logits = nullptr;
  const program::TrainEntry* eval = nullptr;
  std::optional<rt::DataLoader> train, val;
  rt::DataSource data_source;       // Note [data source]: what train reads, and how
  std::optional<RunReport> report;  // before log, whose mirrors point to them
  std::optional<TensorBoardWriter> tensorboard;
  std::optional<JsonLog> log;
  std::unique_ptr<rt::Trainer> trainer;
  int64_t tokens_per_step = 0;  // over all ranks
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTRUN_TRAIN_CONTEXT_H_
