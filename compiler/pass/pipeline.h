// Pipeline: runs passes in order, verifies after each, dumps after each.
//
//   Pipeline pipeline("compile", options);
//   pipeline.AddPass<passes::Dce>();
//   StatusOr<bool> changed = pipeline.Run(module);
//
// Dumps go to `dump_dir` as `NNNN.after-NAME.ir`, numbered in pipeline order
// across nested pipelines (FixedPoint iterations included).
#ifndef GPTC_COMPILER_PASS_PIPELINE_H_
#define GPTC_COMPILER_PASS_PIPELINE_H_

#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/pass/pass.h"

namespace gptc::pass {

struct PipelineOptions {
  bool verify_each = true;  // run the verifier after every pass that changed the module
  std::string dump_dir;     // empty: no dumps
  std::string dump_pass_re; // dump only after passes whose name matches (empty: all)
  std::set<std::string> disabled;  // pass names that are skipped
  // When set, every pass run appends (pass name, seconds), and the verifier
  // runs append ("verify", seconds): what `gptc compile --timings` prints.
  std::shared_ptr<std::vector<std::pair<std::string, double>>> timings;
  // When set, called with each pass's name before it runs (progress output).
  std::function<void(const std::string&)> on_pass;
};

// Numbers dump files in order and writes them atomically (temp file + rename).
// Its first dump removes the numbered dumps (NNNN.*.ir) an earlier run left in
// the directory, which would otherwise mix with this run's; one run shares
// one writer.
class DumpWriter {
 public:
  explicit DumpWriter(std::string dir, int next_index = 0)
      : dir_(std::move(dir)), next_(next_index) {}
  bool enabled() const { return !dir_.empty(); }
  // Writes `NNNN.LABEL.ir` holding the printed module.
  Status Dump(const ir::Module& module, std::string_view label);

 private:
  std::string dir_;
  int next_;
  bool cleared_ = false;
};

class Pipeline : public Pass {
 public:
  Pipeline(std::string name, PipelineOptions options = {});

  template <typename T, typename... Args>
  T& AddPass(Args&&... args) {
    auto pass = std::make_unique<T>(std::forward<Args>(args)...);
    T& ref = *pass;
    passes_.push_back(std::move(pass));
    return ref;
  }
  void AddPass(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }

  // Shares a dump writer so nested pipelines number their dumps in one sequence.
  void set_dump_writer(std::shared_ptr<DumpWriter> writer) { dump_ = std::move(writer); }
  const std::shared_ptr<DumpWriter>& dump_writer() const { return dump_; }

  std::string_view Name() const override { return name_; }
  StatusOr<bool> Run(ir::Module& module) override;

 private:
  std::string name_;
  PipelineOptions options_;
  std::optional<std::regex> dump_re_;
  std::shared_ptr<DumpWriter> dump_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

// Runs an inner pipeline until it stops changing the module, at most
// kMaxIterations times (then it stops and reports an error: a pass pair
// that undoes each other is a bug, not a fixed point).
class FixedPoint : public Pass {
 public:
  static constexpr int kMaxIterations = 25;
  FixedPoint(std::string name, std::unique_ptr<Pipeline> inner)
      : name_(std::move(name)), inner_(std::move(inner)) {}
  Pipeline& inner() { return *inner_; }
  std::string_view Name() const override { return name_; }
  StatusOr<bool> Run(ir::Module& module) override;

 private:
  std::string name_;
  std::unique_ptr<Pipeline> inner_;
};

}  // namespace gptc::pass

#endif  // GPTC_COMPILER_PASS_PIPELINE_H_
