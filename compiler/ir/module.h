// Module: the unit the compiler works on, a set of computations of which one
// is the entry (the function a caller runs); the others are called by fusion
// instructions or are the decompositions of composite ops.
#ifndef GPTC_COMPILER_IR_MODULE_H_
#define GPTC_COMPILER_IR_MODULE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/computation.h"

namespace gptc::ir {

class Module {
 public:
  explicit Module(std::string name) : name_(std::move(name)) {}
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // The file the module was parsed from, for error locations ("" if built in memory).
  const std::string& source_file() const { return source_file_; }
  void set_source_file(std::string file) { source_file_ = std::move(file); }

  // In definition order; a computation is defined before any computation that calls it.
  const std::vector<std::unique_ptr<Computation>>& computations() const { return computations_; }
  Computation* entry() const { return entry_; }
  void set_entry(Computation* entry) { entry_ = entry; }

  Computation* AddComputation(std::unique_ptr<Computation> computation);
  // Inserts `computation` right before `before` in definition order (nullptr
  // appends), so a pass can define a callee ahead of its existing caller.
  Computation* AddComputationBefore(std::unique_ptr<Computation> computation,
                                    const Computation* before);
  // Inserts all of `computations`, in order, before `before` (at the end
  // when null) in one pass: a pass adding a callee per fusion must not shift
  // the list once per callee.
  void AddComputationsBefore(std::vector<std::unique_ptr<Computation>> computations,
                             const Computation* before);
  // Adds a new empty computation named `name` (made unique if taken).
  Computation* AddComputation(std::string_view name);
  Computation* FindComputation(std::string_view name) const;
  // Removes computations that neither the entry nor any reachable computation calls.
  int64_t RemoveUnreachableComputations();

  // A deep copy with identical names, shapes, attributes and order.
  std::unique_ptr<Module> Clone() const;

 private:
  std::string name_;
  std::string source_file_;
  std::vector<std::unique_ptr<Computation>> computations_;
  Computation* entry_ = nullptr;
};

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_MODULE_H_
