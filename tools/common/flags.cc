#include "tools/common/flags.h"

#include <algorithm>
#include <charconv>

namespace gptc::tools {

Status Flags::Parse(int argc, char** argv, int first) {
  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (contains(bool_flags_, name)) {
      if (value && *value != "true" && *value != "false") {
        return Error("--{} takes no value (or true/false), got '{}'", name, *value);
      }
      values_[name] = value.value_or("true");
    } else if (contains(value_flags_, name)) {
      if (!value) {
        if (i + 1 >= argc) return Error("--{} needs a value", name);
        value = argv[++i];
      }
      values_[name] = *value;
    } else {
      return Error("unknown flag --{}", name);
    }
  }
  return Status::Ok();
}

std::string Flags::Get(const std::string& name, std::string fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

StatusOr<int64_t> Flags::GetInt(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& s = it->second;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    return Error("--{} expects an integer, got '{}'", name, s);
  }
  return v;
}

StatusOr<double> Flags::GetDouble(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& s = it->second;
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    return Error("--{} expects a number, got '{}'", name, s);
  }
  return v;
}

}  // namespace gptc::tools
