#!/bin/bash
# Note [roles] (compiler/ir/role.h): passes decide by typed facts (an
# instruction's role, an entry's EntryRole, a slot's SlotRole), never by a
# metadata string, an instruction's name or an entry's name, which are for
# people; and readers of an artifact (gptc report, inspect) read the plan's
# and the manifest's typed records (Note [plan roles] in
# compiler/program/plan_role.h), never a name. Fails on
#  - a comparison with, or a prefix or substring read of, metadata(), on an
#    IR name read the same way or compared with a literal, on an instruction
#    looked up by a literal or built name, and on an entry looked up by its
#    name;
#  - a read or comparison, on any variable, of a literal in the model's and
#    the IR's naming ("grad.", "remat.", "h.", "wte", "lm_head",
#    "gemm fallback", ...): a decision by name prefix;
#  - in the artifact's readers (tools/report, gptc inspect), any prefix or
#    suffix read of a string literal;
#  - a read of an error's text (a Status's message(), or a message or
#    another tool's stderr kept in a string): errors are told apart by
#    Status::code(), tools by their exit code and typed output (gptc compile
#    --json), never by their words.
# An allowed line is listed below (file, a fragment of the line, and why).
# Prints each offending line; exit 1 if there is one.
# Usage: no_string_decisions.sh SOURCE_ROOT
set -u
root=$1
reads='\.(starts_with|ends_with|find|rfind|compare|substr|contains)\('
pattern="metadata\(\)\s*(==|!=|<|>)|metadata\(\)${reads}|(^|[^.>A-Za-z_])(meta|metadata|tag)${reads}|StartsWith\((meta|metadata|tag)\b"
pattern+="|[^A-Za-z_]name\(\)${reads}|[^A-Za-z_]name\(\)\s*(==|!=)\s*\""
pattern+='|FindInstruction\(\s*"|FindInstruction\([^)]*"\s*\+'
pattern+='|Find\("(train_step|accumulate|apply|logits|eval)"\)'
pattern+='|name\)?\s*(==|!=)\s*\(?[^"]*"(train_step|accumulate|apply|logits|eval)"'
# The names the frontend, autodiff, remat, the optimizer, fusion and data
# parallelism give (scopes, parameters, instructions, count keys).
vocab='(grad\.|grad_acc\.|remat\.|optimizer\b|adamw|h\.|wte|wpe|ln_[12f]|lm_head|loss\b|parameters\b|data_parallel\.|dp\.|attn\.|mlp\.|gemm fallback)'
pattern+="|(starts_with|ends_with|StartsWith|EndsWith|find|rfind|contains|compare)\(\s*\"${vocab}"
pattern+="|(==|!=)\s*\"${vocab}|\"${vocab}[^\"]*\"\s*(==|!=)"
pattern+="|message\(\)\s*(==|!=)|message\(\)${reads}|[^A-Za-z_](message|err)${reads}"
readers='tools/report tools/gptc/inspect.cc tools/gptc/kernel_stats.cc tools/gptc/report_command.cc'
reader_pattern='(starts_with|ends_with|StartsWith|EndsWith|rfind)\(\s*"'
# file|fragment of the line|why it is not a decision by name
allowed=(
  'passes/data_parallel.cc|name.starts_with("grad_acc.")|names the all-reduce for people after its accumulator'
  'runtime/hf_export.cc|p.name == "wte.weight"|Hugging Face checkpoints key tensors by these names: the file format names the padded table'
  'runtime/checkpoint.cc|spec.name == "wte.weight"|checkpoints key tensors by their Hugging Face names: the file format names the padded table'
  'tools/gptrun/train_step.cc|message().starts_with(prefix|whether the trainer already named the step: context added once, not a kind of error'
  'runtime/emu/emu_streams.cc|message.starts_with("entry ")|whether the finding already names its entry: context added once'
  'runtime/emu/emu_streams.cc|message.starts_with(what)|whether the finding already names its call: context added once'
  'frontend/tracer.cc|message.starts_with(metadata)|drops a scope the message already begins with: context added once'
  'frontend/tracer.cc|message.substr(metadata.size())|(the same line, continued)'
  'tools/gptrun/jit.cc|run.err.find('"'"'\n'"'"', at)|splits gptc'"'"'s stderr into lines to relay its error'
  'tools/gptrun/jit.cc|run.err.compare(at, 6, "gptc: ")|relays gptc'"'"'s one-line error into gptrun'"'"'s; the exit code decides'
)
hits=$(cd "$root" && {
  grep -rnE "$pattern" --include='*.cc' --include='*.h' compiler passes runtime tools frontend models
  # shellcheck disable=SC2086
  grep -rnE "$reader_pattern" --include='*.cc' --include='*.h' $readers
} | sort -u)
for entry in "${allowed[@]}"; do
  file=${entry%%|*}
  rest=${entry#*|}
  fragment=${rest%%|*}
  hits=$(grep -vF -e "$fragment" <<<"$hits" || true; grep -F -e "$fragment" <<<"$hits" | grep -v "^$file:" || true)
done
hits=$(sed '/^$/d' <<<"$hits")
if [ -n "$hits" ]; then
  echo "$hits"
  echo "no_string_decisions: decide by the role (compiler/ir/role.h), the entry's or the slot's," \
    "and read the plan's roles (compiler/program/plan_role.h), not a metadata string or a name"
  exit 1
fi
echo "no_string_decisions: no decision reads a metadata string, an IR or model name, an entry name or an error's text"
