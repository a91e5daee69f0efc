# Flags that would do nothing are refused, sizes past any GPU are refused,
# messages name what is at fault once, and gptc's compile cache and dump
# directory never hand back another compile's files.

# A budget past int64 (it printed "-8388608.00 TiB").
expect budget-overflow 2 "^gptc: --memory-budget \(bytes, or h100, h200 or a100\): byte size '9223372036854775807' is more than 1 PiB" \
  "$gptc" compile --model gpt2-tiny --remat auto --memory-budget 9223372036854775807 -o x.gptx
# --batch auto uses the budget; the message says what it needs.
expect batch-auto-budget 2 '^gptc: --batch auto needs --remat auto and --memory-budget$' \
  "$gptc" compile --model gpt2-tiny --batch auto --memory-budget 200MiB -o x.gptx
# A remat plan for another depth is a usage error, counted in words.
expect remat-plan-blocks 2 '^gptc: --remat block:0 names 1 block but gpt2-tiny has 2 blocks$' \
  "$gptc" compile --model gpt2-tiny --remat block:0 -o x.gptx

# Outputs that are devices: one line each, naming the device once.
expect tensorboard-device 2 '^gptrun: --tensorboard: /dev/full: is a character device, not a directory$' \
  "$gptrun" t.gptx --device cpu --bench --steps 1 --tensorboard /dev/full
expect report-device 1 '^gptc: /dev/full: is a character device; the output must be a regular file' \
  "$gptc" report t.gptx -o /dev/full
expect tokenize-device 2 '^gpt-tokenize: usage: -o /dev/full: is not a directory or a file name prefix' \
  "$tokenize" a.txt -o /dev/full --tokenizer "$tokenizer"
# HellaSwag's jsonl: a bad line is named by its number; an unknown set is a usage error.
printf '{"ctx": "A man", "endings": ["a", "b", "c", "d"], "label": 1}\n{"ctx": "x", "endings": ["a"], "label": 0}\n' > hs.jsonl
expect eval-endings 1 '^gpt-tokenize: .*hs.jsonl:2: `endings` has 1 entries, expected 4$' \
  "$tokenize" --eval hellaswag hs.jsonl -o hs.bin --tokenizer "$tokenizer"
expect eval-unknown-set 2 '^gpt-tokenize: usage: --eval mmlu: unknown set \(known: hellaswag\)$' \
  "$tokenize" --eval mmlu hs.jsonl -o hs.bin --tokenizer "$tokenizer"
# An existing directory named without its '/' is still a directory.
mkdir -p shards_dir
"$tokenize" a.txt -o shards_dir --tokenizer "$tokenizer" > /dev/null 2>&1
cases=$((cases + 1))
if [[ -s shards_dir/train_000.bin && ! -e shards_dir.bin ]]; then
  echo "ok tokenize-existing-dir: shards_dir/train_000.bin"
else
  echo "FAILED tokenize-existing-dir: $(ls shards_dir* 2>&1)" >&2
  failures=$((failures + 1))
fi

# Flags a run would ignore.
expect bench-ckpt-dir 2 '^gptrun: --ckpt-dir does not apply to --bench' \
  "$gptrun" t.gptx --device cpu --bench --steps 1 --ckpt-dir ckb
expect bench-log 2 '^gptrun: --log does not apply to --bench' \
  "$gptrun" t.gptx --device cpu --bench --steps 1 --log b.jsonl
expect sample-len-alone 2 '^gptrun: --sample-len needs --sample-every N' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 --sample-len 4
expect autotune-cpu 2 '^gptrun: --autotune applies to --device gpu or emu' \
  "$gptrun" t.gptx --device cpu --bench --steps 1 --autotune on

# The compile cache: an entry replaced by another valid artifact (batch 2's
# key holding batch 4's artifact) is compiled again, with one warning.
(
  export XDG_CACHE_HOME=$PWD/cache-case
  "$gptc" compile --model gpt2-tiny --layers 1 --batch 2 --seq 8 --no-codegen -o c2.gptx \
    > /dev/null && "$gptc" compile --model gpt2-tiny --layers 1 --batch 4 --seq 8 --no-codegen \
    -o c4.gptx > /dev/null && cp c4.gptx "$(ls -t cache-case/gptc/*.gptx | tail -n 1)"
) || { echo "FAILED cache-case setup" >&2; failures=$((failures + 1)); }
expect cache-other-artifact 0 'damaged compile cache entry: .*: its manifest.s batch is not this compile.s; compiling again$' \
  env XDG_CACHE_HOME="$PWD/cache-case" "$gptc" compile --model gpt2-tiny --layers 1 --batch 2 \
  --seq 8 --no-codegen -o c2b.gptx
cmp -s c2.gptx c2b.gptx || { echo "FAILED cache-other-artifact: c2b.gptx is not batch 2's" >&2; failures=$((failures + 1)); }

# --dump-dir reused: the earlier compile's entries' reports go.
"$gptc" compile --model gpt2-tiny --layers 1 --batch 2 --seq 8 --grad-accum 2 --no-codegen \
  --no-logits --dump-dir dumps -o d1.gptx > /dev/null 2>&1
"$gptc" compile --model gpt2-tiny --layers 1 --batch 2 --seq 8 --no-codegen --no-logits \
  --dump-dir dumps -o d2.gptx > /dev/null 2>&1
cases=$((cases + 1))
if [[ -e dumps/train_step.buffer-assignment.txt && ! -e dumps/accumulate.buffer-assignment.txt ]]; then
  echo "ok dump-dir-reused: only this compile's dumps"
else
  echo "FAILED dump-dir-reused: $(ls dumps | tr '\n' ' ')" >&2
  failures=$((failures + 1))
fi
