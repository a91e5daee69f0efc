// SHA-256 (FIPS 180-4). The container's FNV-1a-64 trailer finds damage;
// finding two files with equal FNV hashes is easy, so what decides whether
// native code is trusted (Note [trusted emulator libraries] in
// tools/common/trusted_libraries.h) names it by SHA-256 instead.
#ifndef GPTC_COMPILER_SUPPORT_SHA256_H_
#define GPTC_COMPILER_SUPPORT_SHA256_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace gptc {

std::array<uint8_t, 32> Sha256(std::string_view bytes);
// The digest as 64 lowercase hex digits.
std::string Sha256Hex(std::string_view bytes);

}  // namespace gptc

#endif  // GPTC_COMPILER_SUPPORT_SHA256_H_
