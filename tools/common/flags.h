// A small command-line flag parser shared by the gptc tools.
//
// Accepts `--name=value`, `--name value` and bare boolean `--name`; anything
// not starting with `--` is positional. Unknown flags, missing values and
// malformed numbers are errors naming the flag, so tools can print one line
// and exit 2.
#ifndef GPTC_TOOLS_COMMON_FLAGS_H_
#define GPTC_TOOLS_COMMON_FLAGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::tools {

class Flags {
 public:
  // Declares the flags a command accepts: value flags take an argument,
  // bool flags do not.
  Flags& Value(std::string name) { value_flags_.push_back(std::move(name)); return *this; }
  Flags& Bool(std::string name) { bool_flags_.push_back(std::move(name)); return *this; }

  Status Parse(int argc, char** argv, int first);

  const std::vector<std::string>& positional() const { return positional_; }
  bool Has(const std::string& name) const { return values_.contains(name); }
  std::string Get(const std::string& name, std::string fallback = "") const;
  StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  StatusOr<double> GetDouble(const std::string& name, double fallback) const;

 private:
  std::vector<std::string> value_flags_, bool_flags_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_COMMON_FLAGS_H_
