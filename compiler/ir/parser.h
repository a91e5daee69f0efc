// The IR text parser (the inverse of printer.h).
//
// Grammar (one instruction per line; `//` starts a comment):
//   module    := 'module' NAME computation*
//   computation := ['ENTRY'] '%'NAME '{' instruction* '}'
//   instruction := ['ROOT'] '%'NAME '=' shape OPCODE '(' operands ')' (',' KEY '=' VALUE)*
// Errors read `FILE:LINE:COL: expected ']' after dimensions`. The parser
// checks syntax and names (operands defined before use, called computations
// defined before their callers); types are the verifier's job.
#ifndef GPTC_COMPILER_IR_PARSER_H_
#define GPTC_COMPILER_IR_PARSER_H_

#include <memory>
#include <string_view>
#include <vector>

#include "compiler/ir/module.h"
#include "compiler/support/status.h"

namespace gptc::ir {

StatusOr<std::unique_ptr<Module>> ParseModule(std::string_view text,
                                              std::string_view filename = "<input>");
// Several modules one after another in one text (`module a ... module b ...`),
// as `gptc compile --grad-accum K` writes them. Single-module text gives one.
StatusOr<std::vector<std::unique_ptr<Module>>> ParseModules(
    std::string_view text, std::string_view filename = "<input>");
// Parses and then verifies (see verifier.h).
StatusOr<std::unique_ptr<Module>> ParseAndVerifyModule(std::string_view text,
                                                       std::string_view filename = "<input>");

StatusOr<Shape> ParseShape(std::string_view text);

}  // namespace gptc::ir

#endif  // GPTC_COMPILER_IR_PARSER_H_
