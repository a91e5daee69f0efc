// Note [compile cache]: `gptc compile -o FILE.gptx` keeps every artifact it
// builds in the cache directory ($XDG_CACHE_HOME/gptc, else ~/.cache/gptc)
// as KEY.gptx, where KEY hashes every input that shapes the artifact
// (CompileInputs, the serialization of the typed options: Note [compile
// inputs] in compile_options.h) and the compiler itself (its version and its
// executable's size and modification time, so a rebuilt gptc misses). A
// compile with the same inputs copies KEY.gptx instead of compiling, and
// says so in its summary line and --timings. KEY.txt holds the summary of
// the compile that built the artifact. --no-cache neither reads nor writes
// the cache; reports (--fusion-report, --memory-report, --dump-dir) need the
// compile itself, so they skip the lookup (and still store). The cache keeps
// the kMaxEntries most recently used artifacts. A cache that cannot be
// written, or no cache directory, is a warning, never a failed compile (with
// --cached the artifact then goes to -o or the temp directory, named on the
// last line `cache: none PATH`, or in --json's record); an entry that does
// not decode (the container's checksum: a flipped byte, a file cut short) is a warning
// and a compile that replaces it, never a damaged artifact handed out.
#ifndef GPTC_TOOLS_GPTC_COMPILE_CACHE_H_
#define GPTC_TOOLS_GPTC_COMPILE_CACHE_H_

#include <optional>
#include <string>

#include "compiler/support/status.h"

namespace gptc::tools {

class CompileCache {
 public:
  static constexpr int kMaxEntries = 16;

  // $XDG_CACHE_HOME/gptc, else $HOME/.cache/gptc; nullopt when neither is set.
  static std::optional<std::string> DefaultDir();

  explicit CompileCache(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // The key of an artifact compiled from `inputs` (CompileInputs) by this
  // executable: 32 hex digits.
  static std::string Key(const std::string& inputs);
  std::string ArtifactPath(const std::string& key) const;

  struct Entry {
    std::string path;     // KEY.gptx
    std::string summary;  // the summary line of the compile that built it
    std::string note;     // its note line, or empty
  };
  // The entry of `key`, if the cache has it (and marks it recently used).
  std::optional<Entry> Lookup(const std::string& key) const;
  // Stores an artifact and its summary, then drops the least recently used
  // entries past kMaxEntries. Returns the error of a cache that cannot be
  // written, naming the path.
  Status Store(const std::string& key, const std::string& bytes, const std::string& summary,
               const std::string& note) const;

 private:
  std::string dir_;
};

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_GPTC_COMPILE_CACHE_H_
