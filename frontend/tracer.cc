#include "frontend/tracer.h"

#include <fmt/format.h>

#include <cassert>

#include "compiler/ir/verifier.h"

namespace gptc::frontend {

// One computation being traced: the entry, or a decomposition built while
// the entry is suspended.
struct Tracer::Frame {
  // A decomposition frame opens with its name as the outermost scope; the
  // entry uses its name only as the metadata of top-level instructions.
  Frame(ir::Computation* c, std::string fallback_label, std::vector<std::string> initial_scopes)
      : computation(c),
        builder(c),
        label(std::move(fallback_label)),
        scopes(std::move(initial_scopes)),
        layers(scopes.size(), -1) {
    UpdatePath();
  }

  ir::Computation* computation;
  ir::Builder builder;
  std::string label;  // metadata when no scope is open
  std::vector<std::string> scopes;
  std::vector<int32_t> layers;  // per scope: the layer it opens, or -1
  std::string path;             // scopes joined by '.'
  // Entry only: the first instruction that is not a parameter, and the first
  // data input; parameters are inserted before them (Note [entry signature]).
  ir::Instruction* first_compute = nullptr;
  ir::Instruction* first_input = nullptr;

  void UpdatePath() {
    path.clear();
    for (const std::string& s : scopes) {
      if (!path.empty()) path += '.';
      path += s;
    }
    builder.set_metadata(path.empty() ? label : path);
    int32_t layer = -1;
    for (int32_t l : layers) layer = l >= 0 ? l : layer;
    builder.set_role({ir::Phase::kForward, layer});
    builder.set_name_prefix(path);
  }
};

int64_t TracedModule::ParameterValues() const {
  int64_t total = 0;
  for (const ParamSpec& p : params) total += p.shape.num_elements();
  return total;
}

Tracer::Tracer(std::string module_name, std::string entry_name)
    : module_name_(module_name),
      module_(std::make_unique<ir::Module>(std::move(module_name))),
      entry_(std::make_unique<ir::Computation>(entry_name)) {
  frames_.push_back(std::make_unique<Frame>(entry_.get(), entry_name, std::vector<std::string>{}));
}

Tracer::~Tracer() = default;

Tracer::ScopeGuard::~ScopeGuard() {
  if (tracer_ != nullptr) tracer_->PopScope();
}

Tracer::ScopeGuard Tracer::Scope(std::string_view name) {
  PushScope(name, -1);
  return ScopeGuard(this);
}

Tracer::ScopeGuard Tracer::LayerScope(std::string_view name, int64_t layer) {
  if (layer < 0 || layer > ir::kMaxLayer) {
    Fail(Error("layer {} of scope '{}' is outside [0, {}]", layer, name, ir::kMaxLayer));
    layer = -1;
  }
  PushScope(name, static_cast<int32_t>(layer));
  return ScopeGuard(this);
}

void Tracer::PushScope(std::string_view name, int32_t layer) {
  Frame& f = *frames_.back();
  f.scopes.emplace_back(name);
  f.layers.push_back(layer);
  f.UpdatePath();
}

void Tracer::PopScope() {
  Frame& f = *frames_.back();
  assert(!f.scopes.empty() && "scope guards must nest");
  f.scopes.pop_back();
  f.layers.pop_back();
  f.UpdatePath();
}

const std::string& Tracer::scope_path() const { return frames_.back()->path; }

ir::Builder& Tracer::builder() { return frames_.back()->builder; }

ir::Computation* Tracer::computation() const { return frames_.back()->computation; }

std::string Tracer::ErrorScope() const {
  // A decomposition is reported inside its caller: "h.3.attn.attention".
  std::string scope;
  for (const auto& f : frames_) {
    if (f->path.empty()) continue;
    if (!scope.empty()) scope += '.';
    scope += f->path;
  }
  return scope;
}

void Tracer::Fail(const Status& status) {
  if (failed() || status.ok()) return;
  std::string scope = ErrorScope();
  error_ = scope.empty() ? status : status.WithPrefix(scope);
}

Tensor Tracer::Register(ir::Instruction* inst) {
  Frame& f = *frames_.back();
  if (f.first_compute == nullptr && inst->opcode() != ir::Opcode::kParameter) {
    f.first_compute = inst;
  }
  return Tensor(this, inst);
}

void Tracer::FailBuild(const Status& status, std::string_view what) {
  // The builder prefixes its message with the metadata, which is the scope
  // the error already leads with; drop the repetition.
  std::string_view message = status.message();
  const std::string& metadata = builder().metadata();
  if (!metadata.empty() && message.starts_with(metadata) &&
      message.substr(metadata.size()).starts_with(" %")) {
    message.remove_prefix(metadata.size() + 1);
  }
  Fail(Error("{}: {}", what, message));
}

Tensor Tracer::DeclareParameter(std::string_view name, const ir::Shape& shape, int64_t number,
                                ir::Instruction* before) {
  Frame& entry = *frames_.front();
  entry.builder.set_insertion_point(before);
  StatusOr<ir::Instruction*> built = entry.builder.Parameter(number, shape, name);
  entry.builder.set_insertion_point(nullptr);
  return Adopt(built, [&] { return fmt::format("parameter {}", name); });
}

Tensor Tracer::Parameter(std::string_view name, std::vector<int64_t> dims, InitRule init,
                         ir::DType dtype) {
  if (failed()) return Tensor(this, nullptr);
  const std::string& path = scope_path();
  std::string full = path.empty() ? std::string(name) : fmt::format("{}.{}", path, name);
  if (frames_.size() != 1) {
    Fail(Error("parameter {} declared inside a decomposition", full));
    return Tensor(this, nullptr);
  }
  if (entry_->FindInstruction(full) != nullptr) {
    Fail(Error("parameter {} declared twice", full));
    return Tensor(this, nullptr);
  }
  ir::Shape shape(dtype, std::move(dims));
  Frame& entry = *frames_.front();
  ir::Instruction* before = entry.first_input ? entry.first_input : entry.first_compute;
  Tensor t = DeclareParameter(full, shape, static_cast<int64_t>(params_.size()), before);
  if (t.valid()) params_.push_back({full, shape, init});
  return t;
}

Tensor Tracer::Input(std::string_view name, const ir::Shape& shape, program::SlotRole role) {
  if (failed()) return Tensor(this, nullptr);
  if (frames_.size() != 1) {
    Fail(Error("input {} declared inside a decomposition", name));
    return Tensor(this, nullptr);
  }
  if (entry_->FindInstruction(name) != nullptr) {
    Fail(Error("input {} declared twice", name));
    return Tensor(this, nullptr);
  }
  // Numbered for real by Finish, once the parameter count is known; until
  // then a number no parameter can have keeps them apart.
  int64_t placeholder = (int64_t{1} << 40) + static_cast<int64_t>(inputs_.size());
  Frame& entry = *frames_.front();
  Tensor t = DeclareParameter(name, shape, placeholder, entry.first_compute);
  if (!t.valid()) return t;
  if (entry.first_input == nullptr) entry.first_input = t.instruction();
  inputs_.push_back({std::string(name), shape, role});
  input_instructions_.push_back(t.instruction());
  return t;
}

ir::Computation* Tracer::Decomposition(std::string_view name, const std::vector<ir::Shape>& params,
                                       std::string_view attrs_key, const Body& body) {
  if (failed()) return nullptr;
  std::string key = fmt::format("{}(", name);
  for (const ir::Shape& s : params) key += s.ToString() + ",";
  key += fmt::format(") {}", attrs_key);
  if (auto it = decompositions_.find(key); it != decompositions_.end()) return it->second;

  // The entry joins the module only in Finish, so every decomposition lands
  // before it, as the verifier wants callees defined before their callers.
  ir::Computation* c = module_->AddComputation(name);
  frames_.push_back(
      std::make_unique<Frame>(c, std::string(name), std::vector<std::string>{std::string(name)}));
  std::vector<Tensor> args;
  for (size_t i = 0; i < params.size(); ++i) {
    args.push_back(
        Adopt(builder().Parameter(static_cast<int64_t>(i), params[i], fmt::format("p{}", i)),
              [&] { return fmt::format("parameter {}", i); }));
  }
  Tensor root = failed() ? Tensor(this, nullptr) : body(args);
  if (root.valid() && root.instruction()->parent() != c) {
    Fail(Error("decomposition {} returns a value of another computation", name));
  }
  frames_.pop_back();
  if (failed()) return nullptr;
  c->set_root(root.instruction());
  decompositions_.emplace(std::move(key), c);
  return c;
}

namespace {

// Drops instructions nothing uses (parameters stay). Reverse order visits
// users before their operands, so whole dead chains go in one sweep.
void RemoveDeadValues(ir::Computation& c) {
  std::vector<ir::Instruction*> order;
  order.reserve(c.instructions().size());
  for (const auto& inst : c.instructions()) order.push_back(inst.get());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    ir::Instruction* inst = *it;
    if (inst == c.root() || inst->opcode() == ir::Opcode::kParameter) continue;
    if (inst->users().empty()) c.RemoveInstruction(inst);
  }
}

}  // namespace

StatusOr<TracedModule> Tracer::Finish(const Tensor& root) {
  if (finished_) return Error("{}: Finish called twice", module_name_);
  finished_ = true;
  if (failed()) return error_;
  if (!root.valid()) return Error("{}: the root is not a traced value", module_name_);
  if (root.instruction()->parent() != entry_.get()) {
    return Error("{}: the root belongs to another computation", module_name_);
  }
  for (size_t i = 0; i < input_instructions_.size(); ++i) {
    input_instructions_[i]->mutable_attrs().index = static_cast<int64_t>(params_.size() + i);
  }
  entry_->set_root(root.instruction());
  RemoveDeadValues(*entry_);
  for (const auto& c : module_->computations()) RemoveDeadValues(*c);
  module_->set_entry(module_->AddComputation(std::move(entry_)));
  // The module leaves with the result; later ops must not touch it.
  error_ = Error("{}: the tracer has finished", module_name_);
  RETURN_IF_ERROR(ir::VerifyModule(*module_).WithPrefix(
      fmt::format("traced module {} does not verify", module_name_)));
  return TracedModule{std::move(module_), std::move(params_), std::move(inputs_)};
}

StatusOr<TracedModule> Tracer::FinishTuple(const std::vector<Tensor>& roots) {
  std::vector<ir::Instruction*> elements;
  for (const Tensor& root : roots) {
    if (!root.valid()) return Finish(root);  // the first error, or "not a traced value"
    elements.push_back(root.instruction());
  }
  Tensor tuple = Adopt(builder().Tuple(std::move(elements)), [] { return std::string("tuple"); });
  return Finish(tuple);
}

}  // namespace gptc::frontend
