#!/bin/bash
# Comments say why, not when or how fast it once was (../shared/STYLE.md):
#  - no issue numbers or dates in the comments of any C++ source, tests
#    included;
#  - no measurements in the comments of the product's sources: a time
#    (ns, us, ms) or a throughput (tok/s) is history the day after it is
#    measured; docs/PERFORMANCE.md keeps it ("the Notes' measurements") and
#    the comment says what it showed.
# Prints each offending line; exit 1 if there is one.
# Usage: no_history.sh SOURCE_ROOT
set -u
root=$1
sources=(compiler passes runtime tools frontend models)
# Each entry: a file whose figures are not measurements, and why.
allowed=(
  'runtime/emu/emu_state.h'  # Note [emulated time]: the stand-in clock's own constants
  'tools/gptrun/main.cc'     # a sample of the progress line the tool prints
)
status=0
hits=$(cd "$root" && grep -rnE '//.*([Ii]ssue #?[0-9]+|20[0-9]{2}-[01][0-9]-[0-3][0-9])' \
  --include='*.cc' --include='*.h' "${sources[@]}" tests)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "no_history: comments carry no issue numbers or dates (docs/PERFORMANCE.md has the history)"
  status=1
fi
skip=$(printf -- '-e ^%s: ' "${allowed[@]}")
# shellcheck disable=SC2086
hits=$(cd "$root" && grep -rnE '//.*[0-9](\.[0-9]+)? ?(ns|us|µs|ms)\b|//.*[0-9][0-9,]* ?tok(ens)?/s' \
  --include='*.cc' --include='*.h' "${sources[@]}" | grep -v $skip)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "no_history: comments carry no measurements (docs/PERFORMANCE.md keeps them; the comment says what they showed)"
  status=1
fi
(( status == 0 )) && echo "no_history: no issue numbers, dates or measurements in the comments"
exit $status
