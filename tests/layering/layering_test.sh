#!/usr/bin/env bash
# The layering of DESIGN.md, checked on the sources and on gptrun itself:
#   compiler/ includes nothing of runtime/, passes/, frontend/ or models/
#   (what the artifact writer needs of a compiled module is in
#   compiler/analysis/); runtime/ and gptrun include no pass, frontend or
#   model; no header includes itself through others (an include cycle);
#   gptrun's binary holds no symbol of the passes, the frontend, the models
#   or codegen, and links no LLVM or MLIR. GPT-2's parameters are
#   compiler/program/gpt2_params.h's table (Note [GPT-2 parameter table]):
#   runtime/ and gptrun read their names there and spell none of them.
#   layering_test.sh SOURCE_DIR GPTRUN
set -uo pipefail
src=$1 gptrun=$2
status=0
fail() { echo "layering: $*" >&2; status=1; }

if out=$(grep -rn --include='*.h' --include='*.cc' '#include "runtime/' "$src/compiler"); then
  fail "compiler/ includes runtime/:"$'\n'"$out"
fi
if out=$(grep -rnE --include='*.h' --include='*.cc' '#include "(passes|frontend|models)/' \
    "$src/compiler"); then
  fail "compiler/ includes a pass, the frontend or a model:"$'\n'"$out"
fi
if out=$(python3 - "$src" <<'PY'
import os, re, sys
src = sys.argv[1]
graph = {}
for top in ("compiler", "passes", "runtime", "frontend", "models", "tools"):
    for root, _, files in os.walk(os.path.join(src, top)):
        for name in files:
            if not name.endswith((".h", ".cc")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            with open(path, encoding="utf-8", errors="replace") as f:
                graph[rel] = re.findall(r'^#include "([^"]+)"', f.read(), re.M)
# Depth-first search for a back edge among the project's own files.
state, stack = {}, []
def visit(node):
    state[node] = 1
    stack.append(node)
    for nxt in graph.get(node, []):
        if nxt not in graph:
            continue
        if state.get(nxt) == 1:
            print(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            return True
        if state.get(nxt) is None and visit(nxt):
            return True
    stack.pop()
    state[node] = 2
    return False
sys.exit(1 if any(state.get(n) is None and visit(n) for n in sorted(graph)) else 0)
PY
); then :; else
  fail "an include cycle: $out"
fi
if out=$(grep -rnE --include='*.h' --include='*.cc' '#include "(passes|frontend|models)/' \
    "$src/runtime" "$src/tools/gptrun"); then
  fail "runtime/ or gptrun includes a pass, the frontend or a model:"$'\n'"$out"
fi
# A parameter's name as a string, a block's name pattern, or a name prefix
# tested; comment lines are left alone.
if out=$(grep -rnE --include='*.h' --include='*.cc' \
    '"(wte|wpe|ln_f)\.(weight|bias)"|"h\.\{\}\.|starts_with\("(wte|wpe|ln_|h\.)' \
    "$src/runtime" "$src/tools/gptrun" | grep -vE '^[^:]+:[0-9]+: *//'); then
  fail "runtime/ or gptrun spells a GPT-2 parameter name (read compiler/program/gpt2_params.h):"$'\n'"$out"
fi
if out=$(nm -C --defined-only "$gptrun" | grep -E 'gptc::(passes|frontend|models|codegen)::' | head -5); then
  fail "gptrun links compiler code:"$'\n'"$out"
fi
if out=$(ldd "$gptrun" 2>/dev/null | grep -E 'libLLVM|libMLIR'); then
  fail "gptrun links LLVM/MLIR:"$'\n'"$out"
fi
if [[ $status == 0 ]]; then echo "layering: ok"; fi
exit $status
