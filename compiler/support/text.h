// Numbers as the tools and reports print them.
#ifndef GPTC_COMPILER_SUPPORT_TEXT_H_
#define GPTC_COMPILER_SUPPORT_TEXT_H_

#include <cstdint>
#include <string>

namespace gptc {

// 1536 -> "1.50 KiB": binary units with `decimals` digits after the point,
// "512 B" below a KiB.
std::string FormatBytes(int64_t bytes, int decimals = 2);

// 1234567 -> "1,234,567".
std::string WithThousands(int64_t value);

}  // namespace gptc

#endif  // GPTC_COMPILER_SUPPORT_TEXT_H_
