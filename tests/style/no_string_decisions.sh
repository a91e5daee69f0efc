#!/bin/bash
# Note [roles] (compiler/ir/role.h): passes decide by typed facts (an
# instruction's role, an entry's EntryRole, a slot's SlotRole), never by a
# metadata string, an instruction's name or an entry's name, which are for
# people. Fails on a comparison with, or a prefix or substring read of,
# metadata(), on an IR name read the same way or compared with a literal,
# on an instruction looked up by a literal or built name, and on an entry
# looked up by its name. Prints each offending line; exit 1 if there is one.
# Usage: no_string_decisions.sh SOURCE_ROOT
set -u
root=$1
reads='\.(starts_with|ends_with|find|rfind|compare|substr|contains)\('
pattern="metadata\(\)\s*(==|!=|<|>)|metadata\(\)${reads}|(^|[^.>A-Za-z_])(meta|metadata|tag)${reads}|StartsWith\((meta|metadata|tag)\b"
pattern+="|[^A-Za-z_]name\(\)${reads}|[^A-Za-z_]name\(\)\s*(==|!=)\s*\""
pattern+='|FindInstruction\(\s*"|FindInstruction\([^)]*"\s*\+'
pattern+='|Find\("(train_step|accumulate|apply|logits|eval)"\)'
pattern+='|name\)?\s*(==|!=)\s*\(?[^"]*"(train_step|accumulate|apply|logits|eval)"'
hits=$(cd "$root" && grep -rnE "$pattern" --include='*.cc' --include='*.h' \
  compiler passes runtime tools frontend models)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "no_string_decisions: decide by the role (compiler/ir/role.h), the entry's or the slot's," \
    "not by a metadata string or a name"
  exit 1
fi
echo "no_string_decisions: no decision reads a metadata string, an IR name or an entry name"
