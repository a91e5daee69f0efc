#include "compiler/pass/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace gptc::pass {

StatusOr<std::pair<std::string, PassOptions>> ParsePassSpec(std::string_view spec) {
  const size_t open = spec.find('{');
  if (open == std::string_view::npos) {
    if (spec.find('}') != std::string_view::npos) return Error("pass '{}': unmatched '}}'", spec);
    return std::pair{std::string(spec), PassOptions{}};
  }
  if (spec.back() != '}') return Error("pass '{}': options must end with '}}'", spec);
  std::string name(spec.substr(0, open));
  if (name.empty()) return Error("pass '{}': no name before '{{'", spec);
  PassOptions options;
  std::string_view body = spec.substr(open + 1, spec.size() - open - 2);
  size_t i = 0;
  while (i < body.size()) {
    if (body[i] == ' ') {
      ++i;
      continue;
    }
    size_t end = body.find(' ', i);
    if (end == std::string_view::npos) end = body.size();
    std::string_view item = body.substr(i, end - i);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return Error("pass '{}': option '{}' is not key=value", name, item);
    }
    options[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
    i = end;
  }
  return std::pair{std::move(name), std::move(options)};
}

std::vector<std::string> SplitPassList(std::string_view list) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char ch : list) {
    if (ch == '{') ++depth;
    if (ch == '}') --depth;
    if (ch == ',' && depth == 0) {
      if (!current.empty()) parts.push_back(std::move(current));
      current.clear();
      continue;
    }
    current += ch;
  }
  if (!current.empty()) parts.push_back(std::move(current));
  return parts;
}

void PassRegistry::Register(std::string name, std::string description, Factory factory) {
  std::string pass_name = name;
  RegisterWithOptions(
      std::move(name), std::move(description),
      [pass_name, factory = std::move(factory)](
          const PassOptions& options) -> StatusOr<std::unique_ptr<Pass>> {
        if (!options.empty()) {
          return Error("pass '{}' takes no options (got '{}')", pass_name, options.begin()->first);
        }
        return factory();
      });
}

void PassRegistry::RegisterWithOptions(std::string name, std::string description,
                                       OptionsFactory factory) {
  entries_[std::move(name)] = Entry{std::move(description), std::move(factory)};
}

StatusOr<std::unique_ptr<Pass>> PassRegistry::Create(std::string_view name,
                                                     const PassOptions& options) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::vector<std::string_view> names;
    for (const auto& [known, entry] : entries_) names.push_back(known);
    return Error("unknown pass '{}' (known: {})", name, fmt::join(names, ", "));
  }
  return it->second.factory(options);
}

bool PassRegistry::Contains(std::string_view name) const { return entries_.contains(name); }

std::vector<std::string> PassRegistry::Describe() const {
  std::vector<std::string> lines;
  for (const auto& [name, entry] : entries_) {
    lines.push_back(fmt::format("{}: {}", name, entry.description));
  }
  return lines;
}

}  // namespace gptc::pass
