// gpt-tokenize: text files to llm.c token shards with the GPT-2 tokenizer.
//
//   gpt-tokenize FILE... -o OUT [--val-fraction F] [--shard-tokens N] [--tokenizer DIR]
//   gpt-tokenize --eval hellaswag FILE.jsonl -o OUT.bin [--tokenizer DIR]
//
// Each file is one or more documents (split at `<|endoftext|>`); every
// document is written as <|endoftext|> followed by its tokens, as llm.c does.
// With --val-fraction F, documents are dealt to the validation split evenly
// (document i goes to val when floor((i+1)F) > floor(iF)), so every part of
// the input is represented. --shard-tokens N cuts each split into shards of at
// most N tokens.
//
// Output names: if OUT ends with '/', it is a directory (created) and the
// files are OUT/train_000.bin, OUT/val_000.bin, ... (always numbered, llm.c
// style). Otherwise OUT names the file: OUT.bin alone; with a val split
// OUT_train.bin and OUT_val.bin; with --shard-tokens a _000, _001, ... suffix.
// Every file is written atomically. One summary line on success; one error
// line and exit 1 (2 for bad usage) on failure.
//
// With --eval hellaswag, the one input is HellaSwag's jsonl and OUT (the file
// name as given) receives llm.c's eval file of it (runtime/eval_file.h,
// docs/EVAL.md).
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/support/file.h"
#include "runtime/data_loader.h"
#include "runtime/eval_file.h"
#include "runtime/tokenizer.h"
#include "tools/common/data_files.h"
#include "tools/common/flags.h"
#include "tools/gpt-tokenize/hellaswag.h"

namespace gptc::tools {
namespace {

constexpr char kAbout[] =
    "Text files to llm.c token shards with the GPT-2 tokenizer. Each file is one or more "
    "documents split at <|endoftext|>; every document is written as <|endoftext|> and its "
    "tokens.";

Flags DeclareFlags() {
  Flags flags("gpt-tokenize", "FILE... -o OUT [flags]", kAbout);
  flags
      .Value("output", "OUT",
             "a file name (OUT.bin, or OUT_train.bin and OUT_val.bin), or a directory ending in "
             "'/' (OUT/train_000.bin, ...)")
      .Short('o')
      .Value("val-fraction", "F", "the share of documents dealt to the validation split", "0")
      .Value("shard-tokens", "N", "at most N tokens a shard; 0 for one shard a split", "0")
      .Value("tokenizer", "DIR",
             "the GPT-2 encoder files, encoder.json and vocab.bpe (default: found in "
             "$GPTC_DATA, the install prefix or the source tree)")
      .Value("encoder", "DIR", "an alias of --tokenizer")
      .Value("eval", "SET",
             "render an evaluation set instead (hellaswag: its jsonl to llm.c's eval file OUT)");
  return flags;
}

std::string ShardPath(const std::string& out, const std::string& split, bool has_val, bool sharded,
                      int64_t index) {
  if (!out.empty() && out.back() == '/') return fmt::format("{}{}_{:03d}.bin", out, split, index);
  std::string stem = out;
  if (stem.size() > 4 && stem.ends_with(".bin")) stem.resize(stem.size() - 4);
  if (has_val) stem += "_" + split;
  if (sharded) stem += fmt::format("_{:03d}", index);
  return stem + ".bin";
}

// Writes `tokens` as shards of at most `shard_tokens`; returns the file count.
StatusOr<int64_t> WriteSplit(const std::vector<int32_t>& tokens, const std::string& out,
                             const std::string& split, bool has_val, int64_t shard_tokens) {
  const bool sharded = shard_tokens > 0;
  const bool dir = !out.empty() && out.back() == '/';
  const int64_t per = sharded ? shard_tokens : static_cast<int64_t>(tokens.size());
  int64_t files = 0;
  for (int64_t begin = 0; begin < static_cast<int64_t>(tokens.size()) || files == 0; begin += per) {
    const int64_t end = std::min<int64_t>(begin + per, tokens.size());
    std::vector<int32_t> part(tokens.begin() + begin, tokens.begin() + end);
    const std::string path = ShardPath(out, split, has_val, sharded || dir, files);
    RETURN_IF_ERROR(WriteFileAtomically(path, rt::EncodeShard(part)));
    ++files;
    if (per == 0) break;
  }
  return files;
}

// A usage error (exit 2), as opposed to a failure (exit 1).
Status Usage(const Status& s) { return UsageError("usage: {}", s.message()); }

// Whether `text` is valid UTF-8; `bad` is the offset of the first invalid byte.
bool ValidUtf8(std::string_view text, size_t* bad) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > text.size()) return *bad = i, false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return *bad = i, false;
    }
    i += n;
  }
  return true;
}

// A corpus's tokens in its two splits, and how many documents each holds.
struct Splits {
  std::vector<int32_t> train, val;
  int64_t docs = 0, val_docs = 0;
};

// The documents of every input (split at <|endoftext|>, each kept as EOT +
// its tokens), every document whose index crosses a multiple of
// 1 / val_fraction going to the validation split.
StatusOr<Splits> TokenizeInputs(rt::Tokenizer& tok, const std::vector<std::string>& paths,
                                double val_fraction) {
  Splits s;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    // Binary input tokenizes without complaint, into nonsense: say so.
    if (const size_t nul = text.find('\0'); nul != std::string::npos) {
      std::fprintf(stderr, "gpt-tokenize: warning: %s: NUL byte at offset %zu (binary input?)\n",
                   path.c_str(), nul);
    } else if (size_t bad = 0; !ValidUtf8(text, &bad)) {
      std::fprintf(stderr, "gpt-tokenize: warning: %s: invalid UTF-8 at byte offset %zu\n",
                   path.c_str(), bad);
    }
    std::vector<int32_t> ids = tok.Encode(text);
    // Split at <|endoftext|> into documents; each is written as EOT + tokens.
    size_t i = 0;
    while (i <= ids.size()) {
      size_t j = i;
      while (j < ids.size() && ids[j] != rt::kEndOfText) ++j;
      if (j > i) {
        const bool to_val =
            std::floor((s.docs + 1) * val_fraction) > std::floor(s.docs * val_fraction);
        std::vector<int32_t>& dst = to_val ? s.val : s.train;
        dst.push_back(rt::kEndOfText);
        dst.insert(dst.end(), ids.begin() + i, ids.begin() + j);
        ++s.docs;
        s.val_docs += to_val;
      }
      i = j + 1;
    }
  }
  return s;
}

// The GPT-2 tokenizer of --tokenizer (or --encoder), else the one found.
StatusOr<rt::Tokenizer> LoadTokenizer(const Flags& flags) {
  std::string tokenizer_dir = flags.Get("tokenizer", flags.Get("encoder"));
  if (tokenizer_dir.empty()) {
    ASSIGN_OR_RETURN(tokenizer_dir, FindTokenizerDir());
  }
  return rt::Tokenizer::Load(tokenizer_dir);
}

// --eval hellaswag FILE.jsonl -o OUT: the jsonl rendered as an eval file.
Status RunEval(const Flags& flags) {
  const std::string set = flags.Get("eval");
  if (set != "hellaswag") return Usage(Error("--eval {}: unknown set (known: hellaswag)", set));
  if (flags.positional().size() != 1 || !flags.Has("output")) {
    return Usage(Error("--eval hellaswag needs one input FILE.jsonl and -o OUT.bin"));
  }
  if (flags.Has("val-fraction") || flags.Has("shard-tokens")) {
    return Usage(Error("--eval takes neither --val-fraction nor --shard-tokens"));
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string& input = flags.positional()[0];
  const std::string out = flags.Get("output");
  ASSIGN_OR_RETURN(rt::Tokenizer tok, LoadTokenizer(flags));
  ASSIGN_OR_RETURN(const std::string jsonl, ReadFile(input));
  ASSIGN_OR_RETURN(const std::vector<rt::EvalExample> examples, RenderHellaswag(jsonl, input, tok));
  StatusOr<std::string> bytes = rt::EncodeEvalFile(examples);
  if (!bytes.ok()) return Error("{}: {}", input, bytes.status().message());
  RETURN_IF_ERROR(WriteFileAtomically(out, *bytes));
  int64_t tokens = 0;
  int32_t longest = 0;  // the header's field, as written
  for (const rt::EvalExample& e : examples) {
    tokens += static_cast<int64_t>(e.context.size());
    for (const std::vector<int32_t>& c : e.completions) tokens += static_cast<int64_t>(c.size());
  }
  std::memcpy(&longest, bytes->data() + 12, 4);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "gpt-tokenize: hellaswag %s: %zu examples, %lld tokens, longest example %lld bytes, "
      "%zu bytes to %s, %.2f s\n",
      input.c_str(), examples.size(), static_cast<long long>(tokens),
      static_cast<long long>(longest), bytes->size(), out.c_str(), seconds);
  return Status::Ok();
}

Status Run(const Flags& flags) {
  if (flags.Has("eval")) return RunEval(flags);
  if (flags.positional().empty() || !flags.Has("output")) {
    return Usage(Error("needs input FILEs and -o OUT (see gpt-tokenize --help)"));
  }
  std::string out = flags.Get("output");
  // OUT is a prefix (OUT.bin, OUT_train.bin) or a directory: an existing
  // directory named without its '/' is still one; a device or FIFO is
  // neither (writing "/dev/full.bin" beside it helps no one).
  if (std::error_code ec; !out.empty() && out.back() != '/') {
    const std::filesystem::file_status st = std::filesystem::status(out, ec);
    if (std::filesystem::is_directory(st)) {
      out += '/';
    } else if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st)) {
      return Usage(
          Error("-o {}: is not a directory or a file name prefix (OUT.bin, OUT/...)", out));
    }
  }
  StatusOr<double> val_fraction_or = flags.GetDouble("val-fraction");
  if (!val_fraction_or.ok()) return Usage(val_fraction_or.status());
  StatusOr<int64_t> shard_tokens_or = flags.GetInt("shard-tokens");
  if (!shard_tokens_or.ok()) return Usage(shard_tokens_or.status());
  const double val_fraction = *val_fraction_or;
  const int64_t shard_tokens = *shard_tokens_or;
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    return Usage(Error("--val-fraction {}: must be in [0, 1)", val_fraction));
  }
  if (shard_tokens < 0) return Usage(Error("--shard-tokens {}: must be positive", shard_tokens));

  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(rt::Tokenizer tok, LoadTokenizer(flags));

  ASSIGN_OR_RETURN(Splits splits, TokenizeInputs(tok, flags.positional(), val_fraction));
  const std::vector<int32_t>& train = splits.train;
  const std::vector<int32_t>& val = splits.val;
  const int64_t docs = splits.docs, val_docs = splits.val_docs;

  // gptrun refuses empty shards: refuse them here, before writing anything.
  if (train.empty() && val.empty()) {
    return Error("no text to tokenize in {} (empty input)", fmt::join(flags.positional(), ", "));
  }
  if (val_fraction > 0 && (val.empty() || train.empty())) {
    return Error("--val-fraction {} leaves the {} split empty ({} documents in all)", val_fraction,
                 val.empty() ? "validation" : "training", docs);
  }
  if (!out.empty() && out.back() == '/' && mkdir(out.c_str(), 0755) != 0 && errno != EEXIST) {
    return Error("{}: {}", out, std::strerror(errno));
  }
  const bool has_val = val_fraction > 0;
  ASSIGN_OR_RETURN(int64_t files, WriteSplit(train, out, "train", has_val, shard_tokens));
  if (has_val) {
    ASSIGN_OR_RETURN(int64_t n, WriteSplit(val, out, "val", has_val, shard_tokens));
    files += n;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "gpt-tokenize: %zu files, %lld documents, %lld tokens (train %zu, val %zu in %lld "
      "documents), %lld shards, %.2f s\n",
      flags.positional().size(), static_cast<long long>(docs),
      static_cast<long long>(train.size() + val.size()), train.size(), val.size(),
      static_cast<long long>(val_docs), static_cast<long long>(files), seconds);
  return Status::Ok();
}

}  // namespace
}  // namespace gptc::tools

int main(int argc, char** argv) {
  gptc::tools::Flags flags = gptc::tools::DeclareFlags();
  if (gptc::Status s = flags.Parse(argc, argv, 1); !s.ok()) {
    return gptc::tools::FailWith("gpt-tokenize", s);
  }
  if (std::optional<int> done = flags.HandleHelpAndVersion()) return *done;
  gptc::Status status = gptc::tools::Run(flags);
  if (!status.ok()) return gptc::tools::FailWith("gpt-tokenize", status);
  return gptc::tools::ExitWithStdoutChecked("gpt-tokenize", 0);
}
