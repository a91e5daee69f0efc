// Lists the functions longer than a limit in C++ sources, and with
// --file-lines the files longer than another, for the style tests (tests/
// CMakeLists.txt: 80-line functions and 800-line files in compiler/, passes/
// and runtime/, 120-line functions in tools/). A function is a brace block
// whose header (the text since the previous `;`, `{` or `}`) has a parameter
// list and is no control statement, namespace or type; its lambdas count as
// its lines. Comments and string and character literals are blanked first.
//   function_length LIMIT [--file-lines N] FILE...   (exit 1 when one is longer)
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

// `src` with comments and literals replaced by spaces, newlines kept.
std::string Blank(const std::string& src) {
  std::string out = src;
  size_t i = 0;
  auto blank_to = [&](size_t end) {
    for (; i < end && i < out.size(); ++i) {
      if (out[i] != '\n') out[i] = ' ';
    }
  };
  while (i < out.size()) {
    if (src.compare(i, 2, "//") == 0) {
      blank_to(src.find('\n', i));
    } else if (src.compare(i, 2, "/*") == 0) {
      size_t end = src.find("*/", i + 2);
      blank_to(end == std::string::npos ? src.size() : end + 2);
    } else if (src.compare(i, 3, "R\"(") == 0 || (src[i] == 'R' && i + 1 < src.size() &&
                                                   src[i + 1] == '"')) {
      size_t open = src.find('(', i);
      std::string delim = ")" + src.substr(i + 2, open - i - 2) + "\"";
      size_t end = src.find(delim, open);
      blank_to(end == std::string::npos ? src.size() : end + delim.size());
    } else if (src[i] == '"' || src[i] == '\'') {
      const char quote = src[i];
      size_t j = i + 1;
      while (j < src.size() && src[j] != quote && src[j] != '\n') j += src[j] == '\\' ? 2 : 1;
      blank_to(j + 1);
    } else {
      ++i;
    }
  }
  return out;
}

struct Block {
  bool function;
  int line;
  std::string name;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: function_length LIMIT [--file-lines N] FILE...\n");
    return 2;
  }
  const int limit = std::stoi(argv[1]);
  int first_file = 2, file_limit = 0;
  if (std::string(argv[2]) == "--file-lines" && argc > 4) {
    file_limit = std::stoi(argv[3]);
    first_file = 4;
  }
  const std::regex control(R"(^\s*(if|for|while|switch|else|do|catch|namespace|class|struct|enum|union)\b)");
  const std::regex name(R"(([\w:~]+)\s*\()");
  int too_long = 0;
  for (int a = first_file; a < argc; ++a) {
    std::ifstream in(argv[a]);
    if (!in) {
      std::fprintf(stderr, "function_length: cannot read %s\n", argv[a]);
      return 2;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = Blank(ss.str());
    std::vector<Block> stack;
    std::string head;
    int line = 1;
    for (char c : text) {
      if (c == '\n') ++line;
      if (c == ';') {
        head.clear();
      } else if (c == '{') {
        bool in_function = false;
        for (const Block& b : stack) in_function |= b.function;
        std::smatch m;
        const bool function = !in_function && head.find(')') != std::string::npos &&
                              !std::regex_search(head, control) &&
                              std::regex_search(head, m, name);
        stack.push_back({function, line, function ? m[1].str() : ""});
        head.clear();
      } else if (c == '}') {
        if (!stack.empty()) {
          const Block b = stack.back();
          stack.pop_back();
          const int lines = line - b.line + 1;
          if (b.function && lines > limit) {
            std::printf("%s:%d: %s is %d lines (limit %d)\n", argv[a], b.line, b.name.c_str(),
                        lines, limit);
            ++too_long;
          }
        }
        head.clear();
      } else {
        head += c;
      }
    }
    if (file_limit > 0 && line - 1 > file_limit) {
      std::printf("%s: %d lines (limit %d)\n", argv[a], line - 1, file_limit);
      ++too_long;
    }
  }
  return too_long > 0 ? 1 : 0;
}
