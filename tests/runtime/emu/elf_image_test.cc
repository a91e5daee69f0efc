#include "runtime/emu/elf_image.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace gptc::rt::emu {
namespace {

// A shared object defining `a` and `b`, built by the system's C compiler
// (as gptc compile --emu links its libraries), or empty without one.
std::string SmallLibrary() {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("elf_image_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "lib.c") << "int a = 1;\nint b(int x) { return x + a; }\n";
  const std::string command = "cc -shared -fPIC -o " + (dir / "lib.so").string() + " " +
                              (dir / "lib.c").string() + " 2>/dev/null";
  std::string bytes;
  if (std::system(command.c_str()) == 0) {
    std::ifstream in(dir / "lib.so", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove_all(dir);
  return bytes;
}

TEST(ElfImageTest, AcceptsALibraryDefiningTheSymbols) {
  const std::string lib = SmallLibrary();
  if (lib.empty()) GTEST_SKIP() << "no C compiler";
  const std::vector<std::string> symbols = {"a", "b"};
  EXPECT_TRUE(CheckElfImage(lib, symbols).ok()) << CheckElfImage(lib, symbols).message();
  const std::vector<std::string> missing = {"a", "system"};
  EXPECT_EQ(CheckElfImage(lib, missing).message(), "it does not define the symbol system");
}

// Note [emulator library checks]: what would make dlopen fault or map past
// the end is refused, naming the part.
TEST(ElfImageTest, RefusesDamage) {
  const std::string lib = SmallLibrary();
  if (lib.empty()) GTEST_SKIP() << "no C compiler";
  EXPECT_EQ(CheckElfImage("", {}).message(), "0 bytes are too few for an ELF header");
  EXPECT_EQ(CheckElfImage(std::string(64, 'x'), {}).message(), "not an ELF file");
  // Cut short: the section headers (written last) are gone.
  EXPECT_TRUE(CheckElfImage(lib.substr(0, lib.size() / 3), {})
                  .message()
                  .starts_with("its section header table"));
  // A program header whose segment runs past the end.
  Elf64_Ehdr h;
  std::memcpy(&h, lib.data(), sizeof(h));
  std::string long_segment = lib;
  Elf64_Phdr p;
  std::memcpy(&p, lib.data() + h.e_phoff, sizeof(p));
  p.p_filesz = lib.size();
  p.p_offset = 1;
  std::memcpy(long_segment.data() + h.e_phoff, &p, sizeof(p));
  EXPECT_TRUE(CheckElfImage(long_segment, {}).message().starts_with("program header 0 [1, +"))
      << CheckElfImage(long_segment, {}).message();
  // Another machine's object.
  std::string arm = lib;
  h.e_machine = EM_AARCH64;
  std::memcpy(arm.data(), &h, sizeof(h));
  EXPECT_EQ(CheckElfImage(arm, {}).message(), "not an x86-64 shared object (type 3, machine 183)");
}

}  // namespace
}  // namespace gptc::rt::emu
