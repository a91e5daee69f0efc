#include "runtime/emu/elf_image.h"

#include <elf.h>

#include <cstring>
#include <set>

namespace gptc::rt::emu {

namespace {

// Whether [offset, offset + size) lies inside `total` bytes, without overflow.
bool Inside(uint64_t offset, uint64_t size, uint64_t total) {
  return offset <= total && size <= total - offset;
}

// The struct at `offset`, copied (the image need not be aligned).
template <typename T>
T At(std::string_view image, uint64_t offset) {
  T out;
  std::memcpy(&out, image.data() + offset, sizeof(T));
  return out;
}

Status CheckHeader(std::string_view image, const Elf64_Ehdr& h) {
  if (std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0) return Error("not an ELF file");
  if (h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_ident[EI_DATA] != ELFDATA2LSB ||
      h.e_ident[EI_VERSION] != EV_CURRENT || h.e_version != EV_CURRENT) {
    return Error("not a 64-bit little-endian ELF file of version 1");
  }
  if (h.e_type != ET_DYN || h.e_machine != EM_X86_64) {
    return Error("not an x86-64 shared object (type {}, machine {})", h.e_type, h.e_machine);
  }
  if (h.e_phentsize != sizeof(Elf64_Phdr) || h.e_phnum == 0 ||
      !Inside(h.e_phoff, uint64_t{h.e_phnum} * sizeof(Elf64_Phdr), image.size())) {
    return Error("its program header table ({} entries of {} bytes at {}) is not inside its {} "
                 "bytes",
                 h.e_phnum, h.e_phentsize, h.e_phoff, image.size());
  }
  if (h.e_shentsize != sizeof(Elf64_Shdr) || h.e_shnum == 0 || h.e_shnum >= SHN_LORESERVE ||
      !Inside(h.e_shoff, uint64_t{h.e_shnum} * sizeof(Elf64_Shdr), image.size())) {
    return Error("its section header table ({} entries of {} bytes at {}) is not inside its {} "
                 "bytes",
                 h.e_shnum, h.e_shentsize, h.e_shoff, image.size());
  }
  return Status::Ok();
}

Status CheckSegments(std::string_view image, const Elf64_Ehdr& h) {
  for (uint16_t i = 0; i < h.e_phnum; ++i) {
    const auto p = At<Elf64_Phdr>(image, h.e_phoff + uint64_t{i} * sizeof(Elf64_Phdr));
    if (!Inside(p.p_offset, p.p_filesz, image.size())) {
      return Error("program header {} [{}, +{}) lies past its end ({} bytes)", i, p.p_offset,
                   p.p_filesz, image.size());
    }
    if (p.p_type == PT_LOAD && p.p_filesz > p.p_memsz) {
      return Error("program header {} maps {} bytes of file into {} of memory", i, p.p_filesz,
                   p.p_memsz);
    }
  }
  return Status::Ok();
}

// The names the dynamic symbol table defines (global or weak, in a section).
StatusOr<std::set<std::string, std::less<>>> DefinedSymbols(std::string_view image,
                                                            const Elf64_Ehdr& h) {
  auto section = [&](uint32_t i) {
    return At<Elf64_Shdr>(image, h.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr));
  };
  std::set<std::string, std::less<>> defined;
  bool found = false;
  for (uint16_t i = 0; i < h.e_shnum; ++i) {
    const Elf64_Shdr s = section(i);
    if (s.sh_type != SHT_NOBITS && !Inside(s.sh_offset, s.sh_size, image.size())) {
      return Error("section {} [{}, +{}) lies past its end ({} bytes)", i, s.sh_offset, s.sh_size,
                   image.size());
    }
    if (s.sh_type != SHT_DYNSYM) continue;
    found = true;
    if (s.sh_entsize != sizeof(Elf64_Sym) || s.sh_link >= h.e_shnum) {
      return Error("its dynamic symbol table (section {}) is malformed", i);
    }
    const Elf64_Shdr strings = section(s.sh_link);
    if (strings.sh_type != SHT_STRTAB || !Inside(strings.sh_offset, strings.sh_size, image.size())) {
      return Error("the string table of its dynamic symbols (section {}) is malformed",
                   s.sh_link);
    }
    const std::string_view names = image.substr(strings.sh_offset, strings.sh_size);
    for (uint64_t at = 0; at + sizeof(Elf64_Sym) <= s.sh_size; at += sizeof(Elf64_Sym)) {
      const auto sym = At<Elf64_Sym>(image, s.sh_offset + at);
      const unsigned bind = ELF64_ST_BIND(sym.st_info);
      if (sym.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK)) continue;
      if (sym.st_name >= names.size()) return Error("dynamic symbol {} has no name", at / sizeof(Elf64_Sym));
      const size_t end = names.find('\0', sym.st_name);
      if (end == std::string_view::npos) return Error("dynamic symbol {} has no name", at / sizeof(Elf64_Sym));
      defined.emplace(names.substr(sym.st_name, end - sym.st_name));
    }
  }
  if (!found) return Error("it has no dynamic symbol table");
  return defined;
}

}  // namespace

Status CheckElfImage(std::string_view image, std::span<const std::string> symbols) {
  if (image.size() < sizeof(Elf64_Ehdr)) {
    return Error("{} bytes are too few for an ELF header", image.size());
  }
  const auto header = At<Elf64_Ehdr>(image, 0);
  RETURN_IF_ERROR(CheckHeader(image, header));
  RETURN_IF_ERROR(CheckSegments(image, header));
  ASSIGN_OR_RETURN(const auto defined, DefinedSymbols(image, header));
  for (const std::string& name : symbols) {
    if (!defined.contains(name)) return Error("it does not define the symbol {}", name);
  }
  return Status::Ok();
}

}  // namespace gptc::rt::emu
