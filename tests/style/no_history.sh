#!/bin/bash
# Comments say why, not when: no issue numbers or dates in the comments of
# the sources (../shared/STYLE.md); history goes to docs/PERFORMANCE.md and
# the commit messages. Prints each offending line; exit 1 if there is one.
# Usage: no_history.sh SOURCE_ROOT
set -u
root=$1
hits=$(cd "$root" && grep -rnE '//.*([Ii]ssue #?[0-9]+|20[0-9]{2}-[01][0-9]-[0-3][0-9])' \
  --include='*.cc' --include='*.h' compiler passes runtime tools frontend models)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "no_history: comments carry no issue numbers or dates (docs/PERFORMANCE.md has the history)"
  exit 1
fi
echo "no_history: no issue numbers or dates in the comments"
