// Numbers as the tools and reports print them.
#ifndef GPTC_COMPILER_SUPPORT_TEXT_H_
#define GPTC_COMPILER_SUPPORT_TEXT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace gptc {

// 1536 -> "1.50 KiB": binary units with `decimals` digits after the point,
// "512 B" below a KiB.
std::string FormatBytes(int64_t bytes, int decimals = 2);

// 1234567 -> "1,234,567".
std::string WithThousands(int64_t value);

// (1, "block") -> "1 block", (3, "block") -> "3 blocks": a count with its
// noun; `plural` when adding "s" is wrong ("1 entry", "2 entries").
std::string Plural(int64_t n, std::string_view noun, std::string_view plural = {});

// `text` quoted for a one-line message: 'text', control bytes, quotes and
// backslashes as \xNN, and cut after about `max_chars` ("'abc...' (200000
// bytes)"), so that a name read from a file or a socket never makes a long
// or broken line.
std::string Shown(std::string_view text, size_t max_chars = 64);

}  // namespace gptc

#endif  // GPTC_COMPILER_SUPPORT_TEXT_H_
