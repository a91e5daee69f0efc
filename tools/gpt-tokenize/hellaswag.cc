#include "tools/gpt-tokenize/hellaswag.h"

#include <nlohmann/json.hpp>

namespace gptc::tools {
namespace {

constexpr size_t kEndings = 4;

// One line's example; `where` is "FILE:LINE" for errors.
StatusOr<rt::EvalExample> RenderLine(std::string_view line, const std::string& where, int64_t index,
                                     rt::Tokenizer& tok) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error("{}: not valid JSON", where);
  if (!j.is_object()) return Error("{}: not a JSON object", where);
  if (!j.contains("ctx") || !j["ctx"].is_string()) {
    return Error("{}: missing field `ctx` (a string)", where);
  }
  if (!j.contains("endings") || !j["endings"].is_array()) {
    return Error("{}: missing field `endings` (an array of {} strings)", where, kEndings);
  }
  if (!j.contains("label") || !j["label"].is_number_integer()) {
    return Error("{}: missing field `label` (an integer 0 to {})", where, kEndings - 1);
  }
  const nlohmann::json& endings = j["endings"];
  if (endings.size() != kEndings) {
    return Error("{}: `endings` has {} entries, expected {}", where, endings.size(), kEndings);
  }
  const int64_t label = j["label"].get<int64_t>();
  if (label < 0 || label >= static_cast<int64_t>(kEndings)) {
    return Error("{}: label {} is out of range 0 to {}", where, label, kEndings - 1);
  }
  rt::EvalExample e;
  e.index = index;
  e.label = label;
  e.context = tok.Encode(j["ctx"].get<std::string>());
  for (size_t k = 0; k < kEndings; ++k) {
    if (!endings[k].is_string()) return Error("{}: `endings[{}]` is not a string", where, k);
    e.completions.push_back(tok.Encode(" " + endings[k].get<std::string>()));
  }
  return e;
}

}  // namespace

StatusOr<std::vector<rt::EvalExample>> RenderHellaswag(std::string_view jsonl,
                                                       const std::string& name,
                                                       rt::Tokenizer& tok) {
  std::vector<rt::EvalExample> examples;
  int64_t line_number = 0;
  for (size_t begin = 0; begin < jsonl.size();) {
    size_t end = jsonl.find('\n', begin);
    if (end == std::string_view::npos) end = jsonl.size();
    const std::string_view line = jsonl.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (line.empty()) continue;
    const std::string where = fmt::format("{}:{}", name, line_number);
    ASSIGN_OR_RETURN(rt::EvalExample e,
                     RenderLine(line, where, static_cast<int64_t>(examples.size()), tok));
    examples.push_back(std::move(e));
  }
  if (examples.empty()) return Error("{}: no examples (empty input)", name);
  return examples;
}

}  // namespace gptc::tools
