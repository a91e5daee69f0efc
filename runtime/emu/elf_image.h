// Note [emulator library checks]: the artifact's `emu` section is a shared
// object gptrun hands to dlopen. The dynamic loader trusts what it maps: a
// program header past the end of the file makes the first touch of that page
// a SIGBUS, a missing symbol a null function. So before dlopen the image is
// checked as an ELF file: an x86-64 little-endian shared object (ET_DYN)
// whose every program header, segment and section lies inside it, and whose
// dynamic symbol table defines every symbol the emulator will look up (the
// ABI's three and each kernel's). The checks are for damage and crafted
// layouts; they do not make foreign code safe to run, which is why gptrun
// loads a library only from a trusted artifact (docs/EMULATOR.md).
#ifndef GPTC_RUNTIME_EMU_ELF_IMAGE_H_
#define GPTC_RUNTIME_EMU_ELF_IMAGE_H_

#include <span>
#include <string>
#include <string_view>

#include "compiler/support/status.h"

namespace gptc::rt::emu {

// Checks `image` as above; `symbols` must each be defined (not undefined,
// not local) in its .dynsym. The error is one phrase naming what is wrong
// ("program header 2 [4096, +8192) lies past its end (6000 bytes)"); the
// caller names the file.
Status CheckElfImage(std::string_view image, std::span<const std::string> symbols);

}  // namespace gptc::rt::emu

#endif  // GPTC_RUNTIME_EMU_ELF_IMAGE_H_
