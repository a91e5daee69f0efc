// HellaSwag's jsonl rendered as llm.c's eval examples (runtime/eval_file.h),
// token for token as llm.c's dev/data/hellaswag.py renders it.
#ifndef GPTC_TOOLS_GPT_TOKENIZE_HELLASWAG_H_
#define GPTC_TOOLS_GPT_TOKENIZE_HELLASWAG_H_

#include <string>
#include <string_view>
#include <vector>

#include "compiler/support/status.h"
#include "runtime/eval_file.h"
#include "runtime/tokenizer.h"

namespace gptc::tools {

// Each non-empty line of `jsonl` (read from `name`) is one object with `ctx`
// (a string), `endings` (4 strings) and `label` (0 to 3); other fields are
// ignored. Example i gets index i, the tokens of `ctx` as its context and,
// for each ending, the tokens of " " + ending (encoded apart from the
// context). Errors name the file and the line.
StatusOr<std::vector<rt::EvalExample>> RenderHellaswag(std::string_view jsonl,
                                                       const std::string& name, rt::Tokenizer& tok);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPT_TOKENIZE_HELLASWAG_H_
