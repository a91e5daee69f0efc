#!/usr/bin/env bash
# The layering of DESIGN.md, checked on the sources and on gptrun itself:
#   compiler/ includes nothing of runtime/; runtime/ and gptrun include no
#   pass, frontend or model; gptrun's binary holds no symbol of the passes,
#   the frontend, the models or codegen, and links no LLVM or MLIR.
#   layering_test.sh SOURCE_DIR GPTRUN
set -uo pipefail
src=$1 gptrun=$2
status=0
fail() { echo "layering: $*" >&2; status=1; }

if out=$(grep -rn --include='*.h' --include='*.cc' '#include "runtime/' "$src/compiler"); then
  fail "compiler/ includes runtime/:"$'\n'"$out"
fi
if out=$(grep -rnE --include='*.h' --include='*.cc' '#include "(passes|frontend|models)/' \
    "$src/runtime" "$src/tools/gptrun"); then
  fail "runtime/ or gptrun includes a pass, the frontend or a model:"$'\n'"$out"
fi
if out=$(nm -C --defined-only "$gptrun" | grep -E 'gptc::(passes|frontend|models|codegen)::' | head -5); then
  fail "gptrun links compiler code:"$'\n'"$out"
fi
if out=$(ldd "$gptrun" 2>/dev/null | grep -E 'libLLVM|libMLIR'); then
  fail "gptrun links LLVM/MLIR:"$'\n'"$out"
fi
if [[ $status == 0 ]]; then echo "layering: ok"; fi
exit $status
