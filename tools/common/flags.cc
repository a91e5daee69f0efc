#include "tools/common/flags.h"

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gptc_version.h"

namespace gptc::tools {
namespace {

constexpr size_t kWidth = 100;      // of --help lines
constexpr size_t kHelpColumn = 26;  // where a flag's help starts

// Appends `text` word by word, breaking lines at kWidth; continuation lines
// start at `indent`. `column` is the current line's length.
void Wrap(std::string& out, const std::string& text, size_t column, size_t indent) {
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find(' ', i);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(i, end - i);
    if (column > indent && column + 1 + word.size() > kWidth) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    i = end + 1;
  }
}

}  // namespace

Flags& Flags::Value(std::string name, std::string metavar, std::string help,
                    std::string default_value) {
  specs_.push_back(
      {std::move(name), true, 0, std::move(metavar), std::move(help), std::move(default_value)});
  return *this;
}

Flags& Flags::Bool(std::string name, std::string help) {
  specs_.push_back({std::move(name), false, 0, "", std::move(help), ""});
  return *this;
}

Flags& Flags::Short(char letter) {
  specs_.back().short_name = letter;
  return *this;
}

Flags& Flags::Section(std::string title) {
  specs_.push_back({"", false, 0, "", std::move(title), ""});
  return *this;
}

const Flags::Spec* Flags::Find(const std::string& name) const {
  for (const Spec& s : specs_) {
    if (!s.name.empty() && s.name == name) return &s;
  }
  return nullptr;
}

Status Flags::Parse(int argc, char** argv, int first) {
  Status error = Status::Ok();
  auto fail = [&](Status s) {
    if (error.ok()) error = std::move(s);
  };
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    if (arg == "--version") {
      version_ = true;
      continue;
    }
    if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      auto spec = std::find_if(specs_.begin(), specs_.end(),
                               [&](const Spec& s) { return s.short_name == arg[1]; });
      if (spec != specs_.end()) {  // -o FILE, -oFILE
        arg = "--" + spec->name +
              (arg.size() > 2 ? "=" + arg.substr(2)
               : i + 1 < argc ? "=" + std::string(argv[++i])
                              : "");
      }
    }
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
    const Spec* spec = Find(name);
    if (spec == nullptr) {
      fail(UsageError("unknown flag --{} (see {} --help)", name, program_));
    } else if (!spec->takes_value) {
      if (value && *value != "true" && *value != "false") {
        fail(UsageError("--{} takes no value (or true/false), got '{}'", name, *value));
      } else if (value.value_or("true") == "true") {
        values_[name] = "true";
      }
    } else {
      if (!value) {
        if (i + 1 >= argc) {
          fail(UsageError("--{} needs a value", name));
          continue;
        }
        value = argv[++i];
      }
      values_[name] = *value;
      all_values_[name].push_back(*value);
    }
  }
  if (error.ok()) error = CheckRules();
  // --help next to a mistake still helps.
  return help_ || version_ ? Status::Ok() : error;
}

Flags& Flags::Requires(std::string other, std::string value) {
  rules_.push_back({specs_.back().name, std::move(other), std::move(value), false});
  return *this;
}

Flags& Flags::Conflicts(std::string other, std::string value) {
  rules_.push_back({specs_.back().name, std::move(other), std::move(value), true});
  return *this;
}

Status Flags::CheckRules() const {
  for (const Rule& r : rules_) {
    if (!Has(r.flag)) continue;
    const auto other = values_.find(r.other);
    const bool present =
        other != values_.end() && (r.value.empty() || other->second == r.value);
    const std::string spelled = r.value.empty() ? "--" + r.other : "--" + r.other + " " + r.value;
    if (r.conflict && present) {
      return r.value.empty() ? UsageError("--{} and --{} contradict", r.flag, r.other)
                             : UsageError("--{} does not apply to {}", r.flag, spelled);
    }
    if (!r.conflict && !present) return UsageError("--{} applies with {}", r.flag, spelled);
  }
  return Status::Ok();
}

std::optional<int> Flags::HandleHelpAndVersion() const {
  if (help_) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (version_) {
    std::printf("%s %s\n", program_.c_str(), GPTC_VERSION);
    return 0;
  }
  return std::nullopt;
}

std::string Flags::Usage() const {
  std::string out = "usage: " + program_ + " " + synopsis_ + "\n";
  if (!about_.empty()) {
    Wrap(out, about_, 0, 0);
    out += "\n";
  }
  bool heading = false;
  auto line = [&](const std::string& left, const std::string& help) {
    out += "  " + left;
    size_t column = 2 + left.size();
    if (column + 2 > kHelpColumn) {
      out += "\n";
      column = 0;
    }
    out += std::string(kHelpColumn - column, ' ');
    Wrap(out, help, kHelpColumn, kHelpColumn);
    out += "\n";
  };
  for (const Spec& s : specs_) {
    if (s.name.empty()) {
      out += "\n" + s.help + ":\n";
      heading = true;
      continue;
    }
    if (!heading) {
      out += "\nflags:\n";
      heading = true;
    }
    std::string help = s.help;
    if (!s.default_value.empty()) help += " (default: " + s.default_value + ")";
    const std::string shown =
        s.short_name ? fmt::format("-{}, --{}", s.short_name, s.name) : "--" + s.name;
    line(shown + (s.takes_value ? " " + s.metavar : ""), help);
  }
  out += "\n";
  line("-h, --help", "print this help and exit");
  line("--version", "print the version and exit");
  out += "Exit status: 0 on success, 1 when the work fails, 2 for a usage error.\n";
  return out;
}

std::string Flags::Get(const std::string& name) const {
  const Spec* spec = Find(name);
  return Get(name, spec == nullptr ? "" : spec->default_value);
}

std::vector<std::string> Flags::GetAll(const std::string& name) const {
  auto it = all_values_.find(name);
  return it == all_values_.end() ? std::vector<std::string>() : it->second;
}

std::string Flags::Get(const std::string& name, std::string fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

StatusOr<int64_t> Flags::GetInt(const std::string& name) const {
  const Spec* spec = Find(name);
  const std::string s = Get(name);
  if (s.empty() && (spec == nullptr || spec->default_value.empty())) {
    return InternalError("--{} has no default (a defect of {})", name, program_);
  }
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    return UsageError("--{} expects an integer, got '{}'", name, s);
  }
  return v;
}

StatusOr<int64_t> Flags::GetInt(const std::string& name, int64_t fallback) const {
  if (!values_.contains(name)) return fallback;
  return GetInt(name);
}

Status Flags::ReadInts(std::initializer_list<IntField> fields) const {
  for (const IntField& f : fields) {
    StatusOr<int64_t> v = GetInt(f.name, *f.field);
    if (!v.ok()) return v.status().WithCode(StatusCode::kUsage);
    if (Has(f.name) && *v < f.min)
      return UsageError("--{} must be >= {}, got {}", f.name, f.min, *v);
    *f.field = *v;
  }
  return Status::Ok();
}

StatusOr<double> Flags::GetDouble(const std::string& name) const {
  const Spec* spec = Find(name);
  const std::string s = Get(name);
  if (s.empty() && (spec == nullptr || spec->default_value.empty())) {
    return InternalError("--{} has no default (a defect of {})", name, program_);
  }
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    return UsageError("--{} expects a number, got '{}'", name, s);
  }
  return v;
}

StatusOr<double> Flags::GetDouble(const std::string& name, double fallback) const {
  if (!values_.contains(name)) return fallback;
  return GetDouble(name);
}

int ExitCodeOf(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kUsage:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

int FailWith(const std::string& program, const Status& status) {
  return FailWith(program, ExitCodeOf(status), status);
}

int FailWith(const std::string& program, int code, const Status& status) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), status.message().c_str());
  return code;
}

int ExitWithStdoutChecked(const std::string& program, int code) {
  errno = 0;
  // A failed run has said why in its one line already.
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return code;
  if (code != 0) return code;
  const int error = errno;
  std::fprintf(stderr, "%s: writing standard output: %s\n", program.c_str(),
               error != 0 ? std::strerror(error) : "write error");
  return kExitFailure;
}

}  // namespace gptc::tools
