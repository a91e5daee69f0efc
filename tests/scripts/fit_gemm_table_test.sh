#!/usr/bin/env bash
# scripts/fit-gemm-table on gpt2-124m-shaped gemms and gpt2-tiny's kernels
# without a GPU: a profile made up from the model's own estimate, with every
# gemm at the time a known table (efficiency 0.5, 6 GFLOP wasted) gives and
# every kernel at twice the model's time, must come back as that table, a
# kernel ratio of 0.50, and the gemms' total; a profile of another artifact
# and a file of another format end in one line, exit 1.
#   fit_gemm_table_test.sh GPTC SOURCE_DIR
set -uo pipefail
gptc=$(realpath "$1") src=$(realpath "$2")
script=$src/scripts/fit-gemm-table
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
fail() { echo "FAILED $*" >&2; failures=$((failures + 1)); }

"$gptc" compile --model gpt2-tiny --batch 4 --seq 64 -o tiny.gptx > /dev/null || exit 1
"$gptc" inspect tiny.gptx --estimate --json > estimate.json || exit 1

python3 - <<'PY' || exit 1
import json
est = json.load(open("estimate.json"))
# The tiny model's gemms are too small to tell a table apart: give them
# gpt2-124m's shapes, which the fit reads from the estimate.
shapes = [(2304, 16384, 768), (768, 16384, 768), (3072, 16384, 768), (768, 16384, 3072),
          (768, 768, 16384), (768, 3072, 16384), (50304, 16384, 768)]
rows, n = [], 0
def table(m, k, n_, e=0.5, w=6e9):
    f = 2.0 * m * n_ * k
    return ((f + min(w, f)) / (989e12 * e)) * 1e6 + 2.0
for l in est["launches"]:
    if l["kind"] == "gemm":
        l["m"], l["n"], l["k"] = shapes[n % len(shapes)]
        l["aux_bytes"] = l["bytes"] = 0
        n += 1
        rows.append({"kind": "gemm", "name": l["name"], "entry": l["entry"], "meta": "",
                     "ms_per_step": table(l["m"], l["k"], l["n"]) / 1e3, "calls_per_step": 1})
    elif l["kind"] == "kernel":
        rows.append({"kind": "kernel", "name": l["name"], "entry": l["entry"], "meta": "",
                     "ms_per_step": 2 * l["us"] / 1e3, "calls_per_step": 1})
# Kernels launched several times: one row, calls summed.
merged = {}
for r in rows:
    key = (r["kind"], r["name"])
    if key in merged:
        merged[key]["ms_per_step"] += r["ms_per_step"]
        merged[key]["calls_per_step"] += 1
    else:
        merged[key] = r
json.dump(est, open("estimate.json", "w"))
profile = {"format": "gptc-profile-1", "artifact_checksum": est["artifact_checksum"],
           "device": "made up", "emulated": False, "steps": 1, "rows": list(merged.values())}
json.dump(profile, open("profile.json", "w"))
json.dump(dict(profile, artifact_checksum="0000000000000000"), open("other.json", "w"))
PY

out=$("$script" estimate.json profile.json 2>&1) || fail "the fit: $out"
echo "$out" | grep -q "fitted to this profile: efficiency 0.500, wasted 6 GFLOP, off by 0.000 ms" ||
  fail "the table is not recovered: $out"
echo "$out" | grep -qE "^(reduction|loop|attention) +[0-9.]+ +[0-9.]+ +0\.50$" ||
  fail "no kernel class at 0.50: $out"

out=$("$script" estimate.json other.json 2>&1); code=$?
[[ $code == 1 && $out == "fit-gemm-table: other.json measured artifact 0000000000000000, estimate.json estimates "* ]] ||
  fail "another artifact's profile: $code $out"
out=$("$script" estimate.json estimate.json 2>&1); code=$?
[[ $code == 1 && $out == "fit-gemm-table: estimate.json: not a gptc-profile-1 file (format 'gptc-estimate-1')" ]] ||
  fail "a file of another format: $code $out"

if (( failures )); then exit 1; fi
echo "fit_gemm_table: ok"
