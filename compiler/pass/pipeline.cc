#include "compiler/pass/pipeline.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"

namespace gptc::pass {
namespace {

// "0007.after-dce.ir" (or its ".tmp"): a dump DumpWriter numbered.
bool IsNumberedDump(const std::string& name) {
  if (name.size() < 8 || name[4] != '.') return false;
  for (int i = 0; i < 4; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return name.ends_with(".ir") || name.ends_with(".ir.tmp");
}

}  // namespace

Status DumpWriter::Dump(const ir::Module& module, std::string_view label) {
  if (dir_.empty()) return Status::Ok();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return Error("--dump-dir {}: {}", dir_, ec.message());
  if (!cleared_) {
    cleared_ = true;
    std::vector<std::filesystem::path> stale;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      if (IsNumberedDump(entry.path().filename().string())) stale.push_back(entry.path());
    }
    if (ec) return Error("--dump-dir {}: {}", dir_, ec.message());
    for (const std::filesystem::path& path : stale) {
      std::filesystem::remove(path, ec);
      if (ec) return Error("{}: cannot remove an earlier dump: {}", path.string(), ec.message());
    }
  }
  std::string path = fmt::format("{}/{:04}.{}.ir", dir_, next_++, label);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << ir::PrintModule(module);
    out.flush();
    if (!out) return Error("{}: cannot write dump", tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Error("{}: {}", path, ec.message());
  return Status::Ok();
}

Pipeline::Pipeline(std::string name, PipelineOptions options)
    : name_(std::move(name)), options_(std::move(options)) {
  if (!options_.dump_pass_re.empty()) dump_re_.emplace(options_.dump_pass_re);
  dump_ = std::make_shared<DumpWriter>(options_.dump_dir);
}

StatusOr<bool> Pipeline::Run(ir::Module& module) {
  bool changed = false;
  for (const auto& pass : passes_) {
    std::string pass_name(pass->Name());
    if (options_.disabled.contains(pass_name)) continue;
    if (auto* nested = dynamic_cast<Pipeline*>(pass.get())) nested->set_dump_writer(dump_);
    if (auto* fixed = dynamic_cast<FixedPoint*>(pass.get())) fixed->inner().set_dump_writer(dump_);
    auto start = std::chrono::steady_clock::now();
    auto lap = [&](std::string_view what) {
      auto now = std::chrono::steady_clock::now();
      if (options_.timings != nullptr) {
        options_.timings->emplace_back(what, std::chrono::duration<double>(now - start).count());
      }
      start = now;
    };
    if (options_.on_pass && dynamic_cast<Pipeline*>(pass.get()) == nullptr) {
      options_.on_pass(pass_name);
    }
    StatusOr<bool> result = pass->Run(module);
    if (!result.ok()) return result.status().WithPrefix(fmt::format("pass {}", pass_name));
    changed |= *result;
    // A nested pipeline reports its own passes.
    if (dynamic_cast<Pipeline*>(pass.get()) == nullptr) lap(pass_name);
    // A pass that changed nothing cannot have broken the module, and a nested
    // pipeline verified after each of its own passes.
    const bool nested = dynamic_cast<Pipeline*>(pass.get()) != nullptr ||
                        dynamic_cast<FixedPoint*>(pass.get()) != nullptr;
    if (options_.verify_each && *result && !nested) {
      Status verified = ir::VerifyModule(module);
      lap("verify");
      if (!verified.ok()) {
        return verified.WithPrefix(fmt::format("after pass {}, the module does not verify",
                                               pass_name));
      }
    }
    if (dump_->enabled() && (!dump_re_ || std::regex_search(pass_name, *dump_re_))) {
      RETURN_IF_ERROR(dump_->Dump(module, "after-" + pass_name));
    }
  }
  return changed;
}

StatusOr<bool> FixedPoint::Run(ir::Module& module) {
  bool changed = false;
  for (int i = 0; i < kMaxIterations; ++i) {
    ASSIGN_OR_RETURN(bool iteration_changed, inner_->Run(module));
    if (!iteration_changed) return changed;
    changed = true;
  }
  return Error("{} did not reach a fixed point in {} iterations", name_, kMaxIterations);
}

}  // namespace gptc::pass
