#!/usr/bin/env bash
# The bad-input suite: the inputs users get wrong, each run through the tools
# and held to the tools' contract (README): the expected exit code (2 for a
# usage error, 1 for a failure) and exactly one line on stderr saying what is
# at fault. scripts/test runs it on the AddressSanitizer build too, where a
# memory error or leak also breaks the contract (more lines, another code).
#   bad_input_test.sh TOOLS_DIR GPTC TOKENIZER_DIR
# TOOLS_DIR holds gptrun, gpt-tokenize and gptc-opt; GPTC (any build) makes
# the artifacts the cases damage.
set -uo pipefail
tools=$(realpath "$1") gptc=$(realpath "$2") tokenizer=$(realpath "$3")
here=$(dirname "$(realpath "$0")")
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
gptrun=$tools/gptrun tokenize=$tools/gpt-tokenize opt=$tools/gptc-opt
failures=0 cases=0

# expect NAME CODE REGEX CMD...: CMD exits CODE and writes one stderr line
# matching the extended REGEX (the cases files use it too).
expect() {
  local name=$1 code=$2 regex=$3
  shift 3
  cases=$((cases + 1))
  "$@" > "$name.out" 2> "$name.err"
  local rc=$? lines
  lines=$(wc -l < "$name.err")
  if [[ $rc != "$code" || $lines != 1 ]] || ! grep -Eq -- "$regex" "$name.err"; then
    echo "FAILED $name: exit $rc (want $code), $lines stderr lines (want 1 matching /$regex/):" >&2
    head -c 3000 "$name.err" >&2
    failures=$((failures + 1))
  else
    echo "ok $name: $(cat "$name.err")"
  fi
}

# Good inputs to damage: shards, a tiny artifact, a checkpoint.
for i in $(seq 30); do echo "Line $i of a small corpus for the bad-input suite."; done > a.txt
{ cat a.txt; echo '<|endoftext|>'; cat a.txt; } > ab.txt
"$tokenize" ab.txt -o tok/ --val-fraction 0.5 --tokenizer "$tokenizer" > /dev/null || exit 1
"$gptc" compile --model gpt2-tiny --layers 1 --batch 1 --seq 8 --no-codegen -o t.gptx > /dev/null ||
  exit 1
"$gptc" compile --model gpt2-tiny --layers 1 --batch 1 --seq 8 --dp 2 --no-codegen -o dp2.gptx \
  > /dev/null || exit 1
train=(--train 'tok/train_*.bin')
"$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 --ckpt-dir ck > /dev/null || exit 1

# IR text and flags.
printf 'module m\n\nENTRY %%e {\n  %%x = f32[2] bogus(\n}\n' > broken.ir
expect ir-syntax 1 '^gptc-opt: .*broken\.ir:[0-9]+:[0-9]+: ' "$opt" --pass=dce broken.ir
expect opt-flag 2 '^gptc-opt: unknown flag --bogus' "$opt" --bogus broken.ir
expect opt-pass 2 '^gptc-opt: --pass: ' "$opt" --pass=nope broken.ir
printf 'module m\nENTRY %%e {\n  ROOT %%c = f32[2] constant({1e40, 0.1})\n}\n' > big.ir
expect f32-beyond-range 1 'big\.ir:3:30: constant value 1e40 is beyond the range of f32' \
  "$gptc" verify big.ir
"$gptc" compile --model gpt2-tiny --layers 1 --batch 1 --seq 8 --logits -o tiny.ir > /dev/null ||
  exit 1
expect eval-module 2 '^gptc: --module nosuch: tiny\.ir holds no such module \(it has gpt2-tiny, gpt2-tiny\.logits, gpt2-tiny\.eval, gpt2-tiny\.score\)$' \
  "$gptc" eval tiny.ir --module nosuch

# gpt-tokenize.
: > empty.txt
expect tokenize-empty 1 'empty input' "$tokenize" empty.txt -o e.bin --tokenizer "$tokenizer"
expect tokenize-flag 2 '^gpt-tokenize: unknown flag --bogus' "$tokenize" --bogus a.txt -o x
expect tokenize-missing 1 'nope\.txt' "$tokenize" nope.txt -o x.bin --tokenizer "$tokenizer"

# gptrun: flags and values.
expect gptrun-flag 2 '^gptrun: unknown flag --bogus' "$gptrun" t.gptx --bogus
expect gptrun-lr 2 '^gptrun: --lr must be a finite number' "$gptrun" t.gptx "${train[@]}" --lr nan
expect gptrun-cosine 2 '^gptrun: --lr-min .* is above --lr' \
  "$gptrun" t.gptx "${train[@]}" --cosine --lr 0.001 --lr-min 1

# Note [flag rules]: flags that mean nothing without another, or contradict it.
expect rule-ckpt-every 2 '^gptrun: --ckpt-every applies with --ckpt-dir$' \
  "$gptrun" t.gptx "${train[@]}" --ckpt-every 2
expect rule-val-every 2 '^gptrun: --val-every applies with --val$' \
  "$gptrun" t.gptx "${train[@]}" --val-every 2
expect rule-lr-min 2 '^gptrun: --lr-min applies with --cosine$' \
  "$gptrun" t.gptx "${train[@]}" --lr-min 1e-5
expect rule-gpu-cpu 2 '^gptrun: --gpu does not apply to --device cpu$' \
  "$gptrun" t.gptx "${train[@]}" --device cpu --gpu 1
expect rule-emu-checks 2 '^gptrun: --emu-checks applies with --device emu$' \
  "$gptrun" t.gptx "${train[@]}" --emu-checks off
expect report-dir 2 '^gptrun: --report /nonexistent/r\.html: /nonexistent is not a directory$' \
  "$gptrun" t.gptx "${train[@]}" --report /nonexistent/r.html
expect tensorboard-dir 2 '^gptrun: --tensorboard: /proc/gptc-tb: cannot create it' \
  "$gptrun" t.gptx "${train[@]}" --tensorboard /proc/gptc-tb
expect rule-no-codegen-emu 2 '^gptc: --no-codegen and --emu contradict$' \
  "$gptc" compile --model gpt2-tiny --no-codegen --emu -o x.gptx
expect rule-logits 2 '^gptc: --logits and --no-logits contradict$' \
  "$gptc" compile --model gpt2-tiny --logits --no-logits -o x.ir

expect tokenizer-missing 1 '^gptrun: --tokenizer /nonexistent: ' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 --sample-every 1 --tokenizer /nonexistent

# gptrun: artifacts.
expect artifact-missing 1 'nope\.gptx' "$gptrun" nope.gptx "${train[@]}"
head -c 100 t.gptx > cut.gptx
expect artifact-truncated 1 'cut\.gptx: truncated' "$gptrun" cut.gptx "${train[@]}"
cp t.gptx flip.gptx
size=$(stat -c %s flip.gptx)
printf '\x5a' | dd of=flip.gptx bs=1 seek=$((size / 2)) conv=notrunc status=none
expect artifact-flipped 1 'flip\.gptx' "$gptrun" flip.gptx "${train[@]}"

# gptrun: data.
expect shards-none 1 'none_\*\.bin' "$gptrun" t.gptx --train 'tok/none_*.bin'
mkdir bad
cp tok/train_000.bin bad/train_000.bin
printf '\x00\x00\x00\x00' | dd of=bad/train_000.bin bs=1 seek=0 conv=notrunc status=none
expect shard-header 1 'train_000\.bin' "$gptrun" t.gptx --train 'bad/train_*.bin'
mkdir late
cp tok/train_000.bin late/train_000.bin
cp tok/train_000.bin late/train_001.bin
printf '\xff\xff' | dd of=late/train_001.bin bs=1 seek=$((1024 + 2 * 5)) conv=notrunc status=none
expect token-beyond-vocab 1 'train_001\.bin.*not below the vocabulary' \
  "$gptrun" t.gptx --train 'late/train_*.bin'

# gptrun: checkpoints.
: > a_file
expect ckpt-dir-file 1 '^gptrun: --ckpt-dir a_file/ck' "$gptrun" t.gptx "${train[@]}" \
  --ckpt-dir a_file/ck
cp -r ck/step_000001 flipped
size=$(stat -c %s flipped/model.safetensors)
printf '\x5a' | dd of=flipped/model.safetensors bs=1 seek=$((size - 3)) conv=notrunc status=none
expect ckpt-flipped 1 'model\.safetensors: checksum mismatch' "$gptrun" t.gptx "${train[@]}" \
  --resume flipped --steps 2
cp -r ck/step_000001 cut
head -c 200 ck/step_000001/optim.safetensors > cut/optim.safetensors
expect ckpt-truncated 1 'optim\.safetensors' "$gptrun" t.gptx "${train[@]}" --resume cut --steps 2

expect resume-latest-no-dir 2 '^gptrun: --resume latest needs --ckpt-dir' \
  "$gptrun" t.gptx "${train[@]}" --resume latest
expect resume-auto-no-dir 2 '^gptrun: --resume auto needs --ckpt-dir' \
  "$gptrun" t.gptx "${train[@]}" --resume auto

# Note [checkpoint ownership]: one run at a time in a --ckpt-dir, and one
# run's checkpoints in it.
expect ckpt-foreign 1 "^gptrun: --ckpt-dir ck holds another run's checkpoints \\(step_000001\\): --resume latest continues that run, --overwrite removes them" \
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 --ckpt-dir ck
expect overwrite-no-dir 2 '^gptrun: --overwrite applies with --ckpt-dir$' \
  "$gptrun" t.gptx "${train[@]}" --overwrite
mkdir held
flock held/.gptrun.lock sleep 60 &
holder=$!
until ! flock -n held/.gptrun.lock true; do sleep 0.05; done
expect ckpt-locked 1 '^gptrun: --ckpt-dir held is in use by another gptrun \(.*lock held/\.gptrun\.lock\)' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 --ckpt-dir held
kill $holder
wait $holder 2>/dev/null
expect ckpt-dir-too-long 1 '^gptrun: --ckpt-dir .*: a path of [0-9]+ characters is too long' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 \
  --ckpt-dir "$(printf 'd%.0s/' $(seq 2040))ck"
# Two runs started at once on one fresh directory, 20 times: one trains and
# keeps its checkpoint, the other is refused (the lock, or the first run's
# checkpoints when it came later); never a mix of the two.
cases=$((cases + 1))
race_failures=0
for i in $(seq 20); do
  rm -rf race
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 --ckpt-dir race > race-a.out 2> race-a.err &
  a=$!
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 --ckpt-dir race --seed 1 > race-b.out \
    2> race-b.err &
  b=$!
  wait $a; rc_a=$?
  wait $b; rc_b=$?
  refused=race-b.err winner_seed=0
  ((rc_a != 0)) && refused=race-a.err winner_seed=1
  if [[ $((rc_a + rc_b)) != 1 || $(ls race) != step_000001 || $(wc -l < $refused) != 1 ]] ||
    ! grep -Eq "^gptrun: --ckpt-dir race (is in use by another gptrun|holds another run's checkpoints)" $refused; then
    echo "FAILED concurrent-writers (try $i): exit codes $rc_a and $rc_b, race holds $(ls race | tr '\n' ' ')" >&2
    cat race-a.err race-b.err >&2
    race_failures=$((race_failures + 1))
    break
  fi
done
if ((race_failures == 0)) && "$gptrun" t.gptx --device cpu "${train[@]}" --steps 2 --ckpt-dir race \
  --resume latest --seed $winner_seed > race-resume.out 2>&1; then
  echo "ok concurrent-writers: 20 tries, one run trained and the other refused; its checkpoint resumes"
else
  ((race_failures == 0)) && { echo "FAILED concurrent-writers: the winner's checkpoint does not resume" >&2; cat race-resume.out >&2; }
  failures=$((failures + 1))
fi

# Note [data source]: resuming with another seed (or shards, or seq) would
# change the data order.
expect resume-other-seed 2 '^gptrun: --resume ck/step_000001: this run has --seed 7 where the checkpoint had 0: the data order would change .*--reset-data starts the data over$' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 2 --resume ck/step_000001 --seed 7
expect reset-data-no-resume 2 '^gptrun: --reset-data applies with --resume$' \
  "$gptrun" t.gptx "${train[@]}" --reset-data

# gptrun generate.
expect generate-no-resume 2 '^gptrun: generate needs --resume CKPT_DIR' \
  "$gptrun" generate t.gptx --prompt hi
expect generate-long-prompt 2 '^gptrun: the prompt is 9 tokens; with the <\|endoftext\|> before it that is more than the 8' \
  "$gptrun" generate t.gptx --device cpu --resume ck/step_000001 --tokenizer "$tokenizer" \
  --prompt 'a a a a a a a a a'
expect generate-temperature 2 '^gptrun: --temperature must be a finite number >= 0' \
  "$gptrun" generate t.gptx --resume ck/step_000001 --temperature -1

# gptc export-hf into the checkpoint itself would leave it unresumable.
expect export-into-checkpoint 2 '^gptc: export-hf: OUT_DIR ck/step_000001 is the checkpoint ck/step_000001 itself' \
  "$gptc" export-hf ck/step_000001 ck/step_000001

# A damaged compile cache entry: one warning, compiled again, exit 0.
XDG_CACHE_HOME="$PWD/cache" "$gptc" compile --model gpt2-tiny --layers 1 --batch 1 --seq 8 \
  --no-codegen -o cached.gptx > /dev/null || exit 1
entry=$(ls cache/gptc/*.gptx | head -1)
printf '\x5a' | dd of="$entry" bs=1 seek=300 conv=notrunc status=none
expect cache-damaged 0 '^gptc: warning: damaged compile cache entry: .*; compiling again$' \
  env XDG_CACHE_HOME="$PWD/cache" "$gptc" compile --model gpt2-tiny --layers 1 --batch 1 --seq 8 \
  --no-codegen -o recompiled.gptx

# Note [stop signals]: SIGTERM mid-run checkpoints the step and exits 143
# with one line.
cases=$((cases + 1))
"$gptrun" t.gptx --device cpu "${train[@]}" --steps 100000 --ckpt-dir sig-ck > sig.out 2> sig.err &
pid=$!
for _ in $(seq 600); do
  grep -q '^step 2/' sig.out 2>/dev/null && break
  sleep 0.05
done
kill -TERM $pid
wait $pid
rc=$?
if [[ $rc != 143 || $(wc -l < sig.err) != 1 ]] ||
  ! grep -Eq '^gptrun: stopped by SIGTERM after step [0-9]+; checkpoint sig-ck/step_[0-9]+: --resume latest continues$' sig.err; then
  echo "FAILED sigterm: exit $rc (want 143), stderr:" >&2
  cat sig.err >&2
  failures=$((failures + 1))
else
  echo "ok sigterm: $(cat sig.err)"
fi

# Note [checked stdout]: output lost to a full disk is an error, not exit 0.
if [[ -w /dev/full ]]; then
  expect log-full 1 '^gptrun: --log /dev/full: No space left on device' \
    "$gptrun" t.gptx --device cpu "${train[@]}" --steps 2 --log /dev/full
  expect stdout-full-gptrun 1 '^gptrun: (step 1: writing standard output failed|writing standard output: )' \
    sh -c 'exec "$0" t.gptx --device cpu --train "tok/train_*.bin" --steps 2 > /dev/full' "$gptrun"
  expect stdout-full-opt 1 '^gptc-opt: writing standard output: No space left on device' \
    sh -c 'exec "$0" --list-passes > /dev/full' "$opt"
  expect stdout-full-gptc 1 '^gptc: writing standard output: No space left on device' \
    sh -c 'exec "$0" models > /dev/full' "$gptc"
  expect stdout-full-inspect 1 '^gptc: writing standard output: No space left on device' \
    sh -c 'exec "$0" inspect t.gptx > /dev/full' "$gptc"
fi

# Note [divergence]: a huge learning rate makes the loss NaN; the run stops
# naming the step, and the only checkpoint is from before it.
expect diverged 1 '^gptrun: (step [0-9]+: the loss is .* the run diverged|checkpoint of step [0-9]+: parameter .* non-finite)' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --lr 1e30 --steps 6 --ckpt-dir nan-ck --ckpt-every 1 \
  --ckpt-keep 0
expect diverged-after-skips 1 '^gptrun: step [0-9]+: the loss is .* the run diverged .*2 steps skipped already, --skip-nonfinite 2\)$' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --lr 1e30 --steps 8 --skip-nonfinite 2
cases=$((cases + 1))
if [[ $(ls nan-ck) != step_000001 ]]; then
  echo "FAILED diverged-checkpoints: nan-ck holds $(ls nan-ck | tr '\n' ' '), want step_000001 alone" >&2
  failures=$((failures + 1))
else
  echo "ok diverged-checkpoints: step_000001 alone"
fi

# Data parallelism: a rank killed mid-run ends the other with one line.
port=$((20000 + RANDOM % 20000))
dp=(env WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GPTC_DIST_TIMEOUT=60)
"${dp[@]}" RANK=1 "$gptrun" dp2.gptx --device cpu "${train[@]}" --steps 100000 \
  > rank1.out 2> rank1.err &
rank1=$!
(
  # Kill rank 1 once rank 0 has stepped.
  for _ in $(seq 600); do
    grep -q '^step 2/' dead-rank.out 2>/dev/null && break
    sleep 0.1
  done
  kill -9 $rank1
) &
expect dead-rank 1 'rank 1' "${dp[@]}" RANK=0 "$gptrun" dp2.gptx --device cpu "${train[@]}" \
  --steps 100000
wait $rank1 2>/dev/null
wait

# More cases, a file per subject (tests/bad_input/cases/*.sh), each run in
# this shell with `expect` and the good inputs above.
for cases_file in "$here"/cases/*.sh; do
  [[ -e $cases_file ]] || continue
  # shellcheck source=/dev/null
  source "$cases_file"
done

echo "bad-input suite: $((cases - failures))/$cases cases ok"
((failures == 0))
