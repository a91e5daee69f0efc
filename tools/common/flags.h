// The command-line flag parser of the gptc tools, and their --help.
//
// Accepts `--name=value`, `--name value` and bare boolean `--name`; anything
// not starting with `--` is positional. Unknown flags, missing values and
// malformed numbers are errors naming the flag, so tools can print one line
// and exit 2.
//
// Note [self-documenting flags]: every flag is declared with its help line
// and, for value flags, its default; --help is rendered from the
// declarations and Get/GetInt/GetDouble without a fallback return the
// declared default, so the default a user reads is the one the tool uses.
// `--help`/`-h` and `--version` are understood by every tool and command
// (HandleHelpAndVersion), even next to flags that would be errors.
#ifndef GPTC_TOOLS_COMMON_FLAGS_H_
#define GPTC_TOOLS_COMMON_FLAGS_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::tools {

// Exit codes of every tool. ExitCodeOf picks one from a Status's kind.
inline constexpr int kExitFailure = 1;  // the input, the output or the work failed
inline constexpr int kExitUsage = 2;    // a bad flag, value or argument

class Flags {
 public:
  // `program`: "gptc compile"; `synopsis`: what follows "usage: program "
  // (one or more lines); `about`: a paragraph after it.
  Flags(std::string program = "", std::string synopsis = "", std::string about = "")
      : program_(std::move(program)), synopsis_(std::move(synopsis)), about_(std::move(about)) {}

  // A flag that takes a value, shown as `--name METAVAR`. `default_value`
  // (empty: none, or one the help text describes) is what Get* return when
  // the flag is absent.
  Flags& Value(std::string name, std::string metavar = "VALUE", std::string help = "",
               std::string default_value = "");
  // A flag without a value.
  Flags& Bool(std::string name, std::string help = "");
  // Gives the flag declared last a one-letter spelling: `-o FILE`, `-oFILE`.
  Flags& Short(char letter);
  // Note [flag rules]: a flag that only means something next to another
  // (or never next to it) says so in its declaration, and Parse refuses the
  // combinations with a usage error naming both, instead of each tool
  // ignoring some and refusing others case by case.
  // The flag declared last applies only with `other` (with `value`, when
  // given): "--ckpt-every applies with --ckpt-dir".
  Flags& Requires(std::string other, std::string value = "");
  // The flag declared last cannot be given with `other` (with `value`, when
  // given): "--no-codegen and --emu contradict".
  Flags& Conflicts(std::string other, std::string value = "");
  // A heading between groups of flags in --help.
  Flags& Section(std::string title);

  Status Parse(int argc, char** argv, int first);

  // When --help/-h or --version was given: prints the usage or the version
  // on stdout and returns 0 (the tool returns it); else nothing.
  std::optional<int> HandleHelpAndVersion() const;
  // The --help text.
  std::string Usage() const;
  const std::string& program() const { return program_; }

  const std::vector<std::string>& positional() const { return positional_; }
  bool Has(const std::string& name) const { return values_.contains(name); }
  // The value, else the declared default.
  std::string Get(const std::string& name) const;
  // Every value given, in order, for a flag that may be repeated
  // (`--log a.jsonl --log b.jsonl`); Get returns the last.
  std::vector<std::string> GetAll(const std::string& name) const;
  std::string Get(const std::string& name, std::string fallback) const;
  StatusOr<int64_t> GetInt(const std::string& name) const;
  StatusOr<int64_t> GetInt(const std::string& name, int64_t fallback) const;
  StatusOr<double> GetDouble(const std::string& name) const;
  StatusOr<double> GetDouble(const std::string& name, double fallback) const;

  // An integer flag read into `*field` (left as it is when not given) if it
  // is at least `min`.
  struct IntField {
    const char* name;
    int64_t* field;
    int64_t min;
  };
  // Reads each of `fields`; the first bad one is a kUsage error naming it
  // ("--NAME must be >= MIN, got V").
  Status ReadInts(std::initializer_list<IntField> fields) const;

 private:
  struct Spec {
    std::string name;  // empty: a section heading in `help`
    bool takes_value = false;
    char short_name = 0;
    std::string metavar, help, default_value;
  };
  const Spec* Find(const std::string& name) const;
  struct Rule {
    std::string flag, other, value;
    bool conflict = false;
  };
  Status CheckRules() const;

  std::string program_, synopsis_, about_;
  std::vector<Spec> specs_;
  std::vector<Rule> rules_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_values_;
  std::vector<std::string> positional_;
  bool help_ = false, version_ = false;
};

// The exit code of a tool that ends with `status`: 0 when it is ok,
// kExitUsage for a kUsage error, else kExitFailure. The one place where a
// Status's kind becomes an exit code.
int ExitCodeOf(const Status& status);

// Prints `PROGRAM: MESSAGE` on stderr and returns ExitCodeOf(status).
int FailWith(const std::string& program, const Status& status);
// Prints `PROGRAM: MESSAGE` on stderr and returns `code`, for the few exits
// whose code is not a Status's kind (a signal's 128 + N).
int FailWith(const std::string& program, int code, const Status& status);

// Note [checked stdout]: what a tool printed is flushed and checked before
// it exits, so that output lost to a full disk or a closed pipe (stdout to
// /dev/full) is an error, not exit code 0: returns `code`, or, when the
// writes failed and `code` is 0, 1 with one line `PROGRAM: writing standard
// output: REASON`.
int ExitWithStdoutChecked(const std::string& program, int code);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_COMMON_FLAGS_H_
