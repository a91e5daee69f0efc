#!/usr/bin/env bash
# A minimal lit: runs each `// RUN:` line of an IR test file with bash.
#   run_lit.sh FILE.ir TOOLS_DIR FILECHECK
# `%s` is the test file, `%S` its folder; gptc, gptc-opt and FileCheck are on PATH; `not CMD`
# inverts CMD's exit status; pipelines fail if any stage fails (pipefail); each line runs
# with an empty compile cache ($XDG_CACHE_HOME).
set -uo pipefail
file=$1 tools_dir=$2 filecheck=$3
export PATH="$tools_dir:$(dirname "$filecheck"):$PATH"

mapfile -t runs < <(sed -n 's|^// RUN: *||p' "$file")
if ((${#runs[@]} == 0)); then
  echo "$file: no // RUN: lines" >&2
  exit 1
fi
status=0
for run in "${runs[@]}"; do
  cmd=${run//%s/$file}
  cmd=${cmd//%S/$(dirname "$file")}
  echo "RUN: $cmd"
  # Each line starts with an empty compile cache (Note [compile cache]).
  cache=$(mktemp -d)
  if ! XDG_CACHE_HOME=$cache bash -o pipefail -c 'not() { if "$@"; then return 1; else return 0; fi; }; '"$cmd"; then
    echo "FAILED: $cmd" >&2
    status=1
  fi
  rm -rf "$cache"
done
exit $status
