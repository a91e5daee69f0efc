#include "compiler/pass/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace gptc::pass {

void PassRegistry::Register(std::string name, std::string description, Factory factory) {
  entries_[std::move(name)] = Entry{std::move(description), std::move(factory)};
}

StatusOr<std::unique_ptr<Pass>> PassRegistry::Create(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::vector<std::string_view> names;
    for (const auto& [known, entry] : entries_) names.push_back(known);
    return Error("unknown pass '{}' (known: {})", name, fmt::join(names, ", "));
  }
  return it->second.factory();
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
