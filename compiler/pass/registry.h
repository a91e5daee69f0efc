// PassRegistry: creates passes by name, for gptc-opt and --disable-pass checks.
//
// A pass that takes options is named with them, MLIR style:
// `data-parallel{world=2 mode=apply}` (ParsePassSpec); passes registered
// without options refuse any.
#ifndef GPTC_COMPILER_PASS_REGISTRY_H_
#define GPTC_COMPILER_PASS_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/pass/pass.h"

namespace gptc::pass {

// key -> value of a pass spec's braces.
using PassOptions = std::map<std::string, std::string>;

// "name" or "name{key=value key=value}" (options separated by spaces) ->
// (name, options); errors name the spec.
StatusOr<std::pair<std::string, PassOptions>> ParsePassSpec(std::string_view spec);

// Splits a --pass list at the commas outside braces:
// "dce,data-parallel{world=2},cse" -> three specs.
std::vector<std::string> SplitPassList(std::string_view list);

class PassRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Pass>()>;
  // Validates the options; the error names the key or value at fault.
  using OptionsFactory = std::function<StatusOr<std::unique_ptr<Pass>>(const PassOptions&)>;

  void Register(std::string name, std::string description, Factory factory);
  void RegisterWithOptions(std::string name, std::string description, OptionsFactory factory);
  // An error listing the known names when `name` is unknown, or the factory's
  // error for bad options.
  StatusOr<std::unique_ptr<Pass>> Create(std::string_view name,
                                         const PassOptions& options = {}) const;
  bool Contains(std::string_view name) const;
  // "name: description" lines, sorted by name.
  std::vector<std::string> Describe() const;

 private:
  struct Entry {
    std::string description;
    OptionsFactory factory;
  };
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace gptc::pass

#endif  // GPTC_COMPILER_PASS_REGISTRY_H_
