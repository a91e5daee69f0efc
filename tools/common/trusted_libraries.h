// Note [trusted emulator libraries]
// An artifact compiled with `gptc compile --emu` carries native code: its
// `emu` section is an x86-64 shared object that `gptrun --device emu` loads
// with dlopen and runs with the user's rights. An artifact from elsewhere
// (a download, a colleague's directory) could hold any code at all, and its
// checksum says only that it is undamaged. So gptrun loads an emulator
// library only when this machine's gptc built it, or when the user says the
// artifact is trusted (--trust-artifact):
//  - `gptc compile --emu` records each library it writes out (compiled, or
//    taken from its compile cache) as the file TRUSTED/SHA256 (an empty
//    record), TRUSTED being `trusted-emu` in the compile cache's directory
//    ($XDG_CACHE_HOME/gptc, else ~/.cache/gptc; Note [compile cache]);
//  - gptrun --device emu looks for the record of the library's SHA-256 and
//    otherwise refuses the artifact in one line saying how to proceed.
// The record names the code, not the file: a copy of the artifact is
// trusted, an artifact whose library differs in one byte is not. It is a
// SHA-256 and not the container's FNV-1a trailer, whose collisions anyone
// can construct. Whoever can write the cache directory can add records, as
// they could replace gptc itself.
#ifndef GPTC_TOOLS_COMMON_TRUSTED_LIBRARIES_H_
#define GPTC_TOOLS_COMMON_TRUSTED_LIBRARIES_H_

#include <optional>
#include <string>
#include <string_view>

#include "compiler/support/status.h"

namespace gptc::tools {

// gptc's cache directory: $XDG_CACHE_HOME/gptc, else $HOME/.cache/gptc;
// nullopt when neither variable is set.
std::optional<std::string> GptcCacheDir();

// The record that trusts `library` (the bytes of an `emu` section), or
// nullopt without a cache directory.
std::optional<std::string> TrustRecordPath(std::string_view library);

// Records `library` as built by this machine's gptc. Errors name the path
// that could not be written.
Status RecordTrustedLibrary(std::string_view library);

// Whether `library` has its record.
bool IsTrustedLibrary(std::string_view library);

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_COMMON_TRUSTED_LIBRARIES_H_
