// Robustness of everything that reads a .gptx artifact before any of its
// code runs: the container codec (framing, checksum), the manifest, params
// and plan codecs, the program loader (the IR section, the manifest against
// the entries and parameters: Note [manifest against program]), the plan
// reader (Note [launch bounds]) and the emulator library's checks (Note
// [emulator library checks]).
//
// Seeds: small artifacts the build's gptc compiles (one with an emulator
// library; one with --grad-accum 2 --dp 2, whose plan has accumulate, apply,
// arena guests and all-reduce buckets), and the crafted defects of the
// bad-input suite (tests/bad_input/cases/artifacts.sh), which must each be
// refused with their message. Mutants: JSON values replaced by edge values,
// deleted or duplicated (the checksum recomputed, so the checks of meaning
// see them), bytes of the framing, the IR text and the ELF image changed,
// with a fixed seed. Every reader must answer ok or one line naming the file;
// under ASan and UBSan (scripts/test) also without a memory error, leak or
// undefined behaviour. Nothing is dlopened: the mutants stop where a trusted
// library would be loaded.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/program/container.h"
#include "runtime/emu/kernel_library.h"
#include "runtime/gpu/plan_reader.h"
#include "runtime/program_loader.h"

// Under UBSan (scripts/test's ASan build) a finding ends the run, as ASan's
// do, whatever UBSAN_OPTIONS says: its default is to report and go on.
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }

namespace gptc {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Sections = std::vector<std::pair<std::string, std::string>>;

constexpr char kPath[] = "f.gptx";

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {  // SplitMix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }

 private:
  uint64_t state_;
};

std::string ReadBytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The artifacts gptc compiles for the seeds, once per process.
const std::vector<std::string>& SeedArtifacts(std::string* why) {
  static const std::vector<std::string>* seeds = [why] {
    auto* out = new std::vector<std::string>;
    const fs::path dir = fs::path(::testing::TempDir()) / fmt::format("artifact_fuzz_{}", getpid());
    fs::create_directories(dir);
    // The compile cache of the test run when ctest gives one, else a private one (never ~/.cache).
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const std::string cache = xdg != nullptr && *xdg != '\0' ? xdg : (dir / "cache").string();
    const std::string common = "--model gpt2-tiny --layers 1 --heads 2 --width 16 --batch 1 --seq 4";
    for (const auto& [name, flags] :
         {std::pair{"emu.gptx", "--no-logits --emu"}, std::pair{"dp.gptx", "--grad-accum 2 --dp 2"}}) {
      const std::string cmd = fmt::format("XDG_CACHE_HOME={} {} compile {} {} -o {} > /dev/null",
                                          cache, GPTC_FUZZ_GPTC, common, flags,
                                          (dir / name).string());
      if (std::system(cmd.c_str()) != 0) {
        *why = "failed: " + cmd;
        break;
      }
      out->push_back(ReadBytes(dir / name));
    }
    fs::remove_all(dir);
    return out;
  }();
  return *seeds;
}

Sections SectionsOf(std::string_view bytes) {
  StatusOr<program::Artifact> a = program::DecodeArtifact(bytes, kPath);
  return a.ok() ? a->sections : Sections{};
}

std::string Encode(const Sections& sections) {
  StatusOr<std::string> bytes = program::EncodeArtifact(sections);
  return bytes.ok() ? *bytes : "";
}

std::string& Section(Sections& s, std::string_view name) {
  for (auto& [n, bytes] : s) {
    if (n == name) return bytes;
  }
  static std::string none;
  return none;
}

// `bytes` with one JSON section edited by `edit`, the container re-encoded.
std::string EditJson(std::string_view bytes, std::string_view section,
                     const std::function<void(json&)>& edit) {
  Sections s = SectionsOf(bytes);
  json j = json::parse(Section(s, section));
  edit(j);
  Section(s, section) = j.dump();
  return Encode(s);
}

struct Tally {
  int cases = 0, refused = 0, accepted = 0, failures = 0;
};

// One line starting with the file's name (or, for the plan reader, naming the entry).
std::string CheckMessage(std::string_view stage, const Status& s, std::string_view prefix) {
  const std::string& m = s.message();
  if (m.find('\n') != std::string::npos || !m.starts_with(prefix)) {
    return fmt::format("{}: the error is not one line starting with '{}': {}", stage, prefix, m);
  }
  return "";
}

// Every reader on `bytes`; the first refusal in `refusal`. Returns a broken
// property, or "".
std::string CheckOne(std::string_view bytes, Tally& tally, std::string* refusal = nullptr) {
  ++tally.cases;
  auto refused = [&](std::string_view stage, const Status& s, std::string_view prefix) {
    ++tally.refused;
    if (refusal != nullptr) *refusal = s.message();
    return CheckMessage(stage, s, prefix);
  };
  StatusOr<program::Artifact> a = program::DecodeArtifact(bytes, kPath);
  if (!a.ok()) return refused("DecodeArtifact", a.status(), "f.gptx: ");
  StatusOr<rt::LoadedProgram> loaded = rt::LoadProgram(*a, kPath);
  if (!loaded.ok()) return refused("LoadProgram", loaded.status(), "f.gptx: ");
  if (a->manifest.flags.codegen) {
    StatusOr<std::vector<program::EntryPlan>> plans = rt::gpu::ReadPlan(a->plan);
    if (!plans.ok()) return refused("ReadPlan", plans.status(), "plan");
    const program::EntryRole micro = loaded->program.grad_accum > 1
                                         ? program::EntryRole::kAccumulate
                                         : program::EntryRole::kTrainStep;
    StatusOr<std::vector<int>> hosts = rt::gpu::CheckArenaHosts(*plans, micro);
    if (!hosts.ok()) return refused("CheckArenaHosts", hosts.status(), "plan entry ");
  }
  if (a->manifest.emu) {
    Status s = rt::emu::KernelLibrary::Check(*a, kPath);
    if (!s.ok()) return refused("KernelLibrary::Check", s, "f.gptx: ");
  }
  ++tally.accepted;
  return "";
}

// Every JSON value of `j` (objects and arrays included), depth first.
void Nodes(json& j, std::vector<json*>& out) {
  out.push_back(&j);
  if (j.is_structured()) {
    for (json& child : j) Nodes(child, out);
  }
}

json EdgeValue(Rng& rng, const json& other) {
  const json values[] = {-1,
                         0,
                         1,
                         2,
                         65535,
                         65536,
                         2147483647,
                         2147483648ll,
                         4294967296ll,
                         int64_t{1} << 40,
                         int64_t{1} << 53,
                         std::numeric_limits<int64_t>::max(),
                         std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<uint64_t>::max(),
                         0.5,
                         -1e308,
                         1e308,
                         "",
                         "x",
                         "train_step",
                         "kernel",
                         nullptr,
                         true,
                         json::array(),
                         json::object()};
  const size_t n = std::size(values);
  const size_t pick = rng.Below(n + 1);
  return pick == n ? other : values[pick];
}

// One JSON mutation: a value replaced (by an edge value or another node), a
// key or element removed, an element duplicated.
void MutateJson(json& j, Rng& rng) {
  std::vector<json*> nodes;
  Nodes(j, nodes);
  json* target = nodes[rng.Below(nodes.size())];
  const json other = *nodes[rng.Below(nodes.size())];
  switch (rng.Below(5)) {
    case 0:
    case 1:
    case 2:
      *target = EdgeValue(rng, other);
      break;
    case 3:  // remove a member or an element
      if (target->is_object() && !target->empty()) {
        auto it = target->begin();
        std::advance(it, rng.Below(target->size()));
        target->erase(it.key());
      } else if (target->is_array() && !target->empty()) {
        target->erase(target->begin() + static_cast<std::ptrdiff_t>(rng.Below(target->size())));
      }
      break;
    case 4:  // duplicate an element
      if (target->is_array() && !target->empty()) {
        target->push_back((*target)[rng.Below(target->size())]);
      }
      break;
  }
}

void MutateBytes(std::string& s, Rng& rng, size_t first = 0) {
  if (s.size() <= first) return;
  const size_t at = first + rng.Below(s.size() - first);
  switch (rng.Below(4)) {
    case 0:
      s[at] ^= static_cast<char>(1 << rng.Below(8));
      break;
    case 1:
      s[at] = static_cast<char>(rng.Below(256));
      break;
    case 2:
      s.resize(at);
      break;
    case 3:
      s.erase(at, 1 + rng.Below(16));
      break;
  }
}

// An artifact to mutate, its sections split once.
struct Seed {
  std::string bytes;
  Sections sections;
};

// A mutant of `seed`, mostly one with a valid checksum.
std::string Mutate(const Seed& seed, Rng& rng) {
  const size_t kind = rng.Below(10);
  if (kind == 0) {  // the framing itself, checksum recomputed half the time
    std::string s = seed.bytes;
    MutateBytes(s, rng);
    if (rng.Below(2) == 0 && s.size() >= 28) {
      const uint64_t sum = program::Fnv1a64(std::string_view(s).substr(0, s.size() - 8));
      for (int i = 0; i < 8; ++i) s[s.size() - 8 + i] = static_cast<char>(sum >> (8 * i));
    }
    return s;
  }
  Sections sections = seed.sections;
  if (kind <= 6) {
    const char* names[] = {"manifest", "plan", "plan", "params"};
    std::string& text = Section(sections, names[rng.Below(std::size(names))]);
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) return Encode(sections);
    const int edits = rng.Below(4) == 0 ? 2 + static_cast<int>(rng.Below(3)) : 1;
    for (int i = 0; i < edits; ++i) MutateJson(j, rng);
    text = j.dump();
  } else if (kind <= 8) {  // the emulator library: mostly its headers and tables
    std::string& image = Section(sections, "emu");
    if (image.empty()) return Encode(sections);
    for (int i = 0; i < 1 + static_cast<int>(rng.Below(3)); ++i) {
      const bool head = rng.Below(2) == 0 && image.size() > 0x1000;
      std::string part = head ? image.substr(0, 0x1000) : image;
      MutateBytes(part, rng);
      image = head && part.size() == 0x1000 ? part + image.substr(0x1000) : part;
    }
  } else {  // the IR text
    MutateBytes(Section(sections, "ir"), rng);
  }
  return Encode(sections);
}

class ArtifactFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    seeds_ = &SeedArtifacts(&why);
    ASSERT_EQ(seeds_->size(), 2u) << why;
  }
  const std::vector<std::string>* seeds_ = nullptr;
};

// The crafted defects of the bad-input suite: each refused with its line.
std::vector<std::pair<std::string, std::string>> CraftedCases(const std::string& emu,
                                                              const std::string& dp) {
  auto set = [](std::string_view bytes, std::string_view section, std::string pointer, json v) {
    return EditJson(bytes, section, [&](json& j) { j[json::json_pointer(pointer)] = v; });
  };
  Sections cut = SectionsOf(emu);
  Section(cut, "emu").resize(Section(cut, "emu").size() / 3);
  std::string grid = EditJson(emu, "plan", [](json& j) {
    for (json& t : j["entries"][0]["thunks"]) {
      if (t["kind"] == "kernel") {
        t["grid"] = {2147483647, 65535, 65535};
        break;
      }
    }
  });
  return {
      {set(emu, "manifest", "/emu/kernels/0/params", 10), "10 parameters, the plan's thunks pass"},
      {Encode(cut), "its emulator library is damaged"},
      {set(emu, "manifest", "/flags/batch", 1000000000), "manifest.flags say batch 1000000000"},
      {set(emu, "manifest", "/flags/seq", int64_t{1} << 40), "seq at most the model's"},
      {set(dp, "manifest", "/flags/batch", 2), "manifest.flags say batch 2"},
      {grid, "launches more blocks than its"},
      {set(emu, "manifest", "/model/vocab", 60000), "'vocab' 60000 exceeds 'padded_vocab'"},
      {set(dp, "manifest", "/model/layers", 3), "(3 layers) has 40 parameters"},
      {set(emu, "manifest", "/model/width", 32), "manifest.model makes it wte.weight"},
  };
}

TEST_F(ArtifactFuzzTest, SeedsAreAcceptedAndCraftedDefectsRefused) {
  Tally tally;
  for (const std::string& seed : *seeds_) EXPECT_EQ(CheckOne(seed, tally), "");
  EXPECT_EQ(tally.accepted, 2);
  for (const auto& [bytes, message] : CraftedCases((*seeds_)[0], (*seeds_)[1])) {
    std::string refusal;
    EXPECT_EQ(CheckOne(bytes, tally, &refusal), "");
    EXPECT_NE(refusal.find(message), std::string::npos) << "want: " << message
                                                        << "\ngot: " << refusal;
  }
}

TEST_F(ArtifactFuzzTest, MutatedArtifactsGetOkOrOneLine) {
  std::vector<Seed> pool;
  for (const std::string& bytes : *seeds_) pool.push_back({bytes, SectionsOf(bytes)});
  for (auto& [bytes, message] : CraftedCases((*seeds_)[0], (*seeds_)[1])) {
    pool.push_back({bytes, SectionsOf(bytes)});
  }
  // A fixed number of mutants, within a time budget that keeps the ASan
  // stage of scripts/test under a minute (the seeds compile first).
  constexpr int kCases = 4000;
  constexpr double kBudgetSeconds = 30;
  Tally tally;
  Rng rng(0x67707478);  // "gptx"
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0;
  for (int i = 0; i < kCases && seconds < kBudgetSeconds; ++i) {
    const std::string mutant = Mutate(pool[rng.Below(pool.size())], rng);
    const std::string broken = CheckOne(mutant, tally);
    if (!broken.empty() && ++tally.failures <= 5) ADD_FAILURE() << "mutant " << i << ": " << broken;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::printf("artifact fuzz: %d mutants in %.1f s: %d refused, %d accepted\n", tally.cases,
              seconds, tally.refused, tally.accepted);
  EXPECT_EQ(tally.failures, 0);
  EXPECT_GE(tally.cases, 100);
  EXPECT_GT(tally.refused, tally.cases / 4);
  EXPECT_GT(tally.accepted, tally.cases / 50);
}

}  // namespace
}  // namespace gptc
