// PassRegistry: creates passes by name, for gptc-opt and --disable-pass checks.
#ifndef GPTC_COMPILER_PASS_REGISTRY_H_
#define GPTC_COMPILER_PASS_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/pass/pass.h"

namespace gptc::pass {

class PassRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Pass>()>;

  void Register(std::string name, std::string description, Factory factory);
  // An error listing the known names when `name` is unknown.
  StatusOr<std::unique_ptr<Pass>> Create(std::string_view name) const;
  bool Contains(std::string_view name) const;
  // "name: description" lines, sorted by name.
  std::vector<std::string> Describe() const;

 private:
  struct Entry {
    std::string description;
    Factory factory;
  };
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace gptc::pass

#endif  // GPTC_COMPILER_PASS_REGISTRY_H_
