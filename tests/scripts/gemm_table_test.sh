#!/usr/bin/env bash
# scripts/gemm-table.py without a GPU (--dry-run, no torch): on gpt2-tiny's
# plan and a profile made up from it (every gemm 0.01 ms a step), the table
# has one group per distinct descriptor, the groups hold every gemm once and
# the totals add up; profile rows of another entry stay out; the verdict
# follows --limit-ms; unusable inputs end in one line, exit 2. Then the
# row-major views torch.matmul is given against cuBLASLt's column-major
# definition (Note [row-major on cuBLASLt]), on random small descriptors with
# padded lds, both transposes and batches, and the same for the other operand
# layouts (NN, NT, TN, TT) the script times each problem with; the layouts
# line before the verdict. Where `python3` has torch (CI has none: skipped),
# the four layouts of each tiny descriptor, through the script's own views
# and plain call on CPU, give the same product.
#   gemm_table_test.sh GPTC SOURCE_DIR
set -uo pipefail
gptc=$(realpath "$1") src=$(realpath "$2")
script=$src/scripts/gemm-table.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
fail() { echo "FAILED $*" >&2; failures=$((failures + 1)); }

"$gptc" compile --model gpt2-tiny --batch 2 --seq 64 -o tiny.gptx > /dev/null || exit 1
"$gptc" inspect tiny.gptx --plan > plan.json || exit 1

# The profile gptrun --profile-json would write: every gemm and kernel of
# train_step, and the logits entry's gemms at a time that must not count.
python3 - <<'PY' || exit 1
import json
plan = json.load(open("plan.json"))
rows, tuning = [], []
for e in plan["entries"]:
    if e["name"] not in ("train_step", "logits"):
        continue
    seen = set()
    for t in e["thunks"]:
        if t["kind"] not in ("gemm", "kernel") or (t["kind"], t["name"]) in seen:
            continue
        seen.add((t["kind"], t["name"]))
        ms = 0.01 if t["kind"] == "gemm" else 0.002
        if e["name"] == "logits":
            ms = 5.0
        calls = sum(1 for u in e["thunks"] if (u["kind"], u["name"]) == (t["kind"], t["name"]))
        rows.append({"entry": e["name"], "kind": t["kind"], "name": t["name"],
                     "meta": t.get("meta", ""), "ms_per_step": ms * calls, "calls_per_step": calls})
        if t["kind"] == "gemm" and e["name"] == "train_step":
            tuning.append({"key": t["name"], "thunks": [f"train_step/{t['name']}"],
                           "path": "heuristic", "algorithm": 0, "candidates": 4, "us": 9.0,
                           "tflops": 1.0, "from_cache": False})
json.dump({"format": "gptc-profile-1", "artifact": "tiny.gptx", "steps": 3, "rows": rows,
           "gemm_tuning": tuning}, open("profile.json", "w"))
PY

python3 "$script" --plan plan.json --profile profile.json --dry-run --json table.json \
  > out.txt 2> err.txt
rc=$?
cat out.txt
[[ $rc == 0 ]] || fail "dry run: exit $rc: $(cat err.txt)"
[[ -s err.txt ]] && fail "dry run wrote to stderr: $(cat err.txt)"
tail -n 1 out.txt |
  grep -q '^gemm table: PASS gemms 0\.[0-9]* ms/step (limit 17.5); torch.matmul not timed' ||
  fail "dry run: last line: $(tail -n 1 out.txt)"
[[ $(tail -n 2 out.txt | head -n 1) == 'layouts: not timed (--dry-run)' ]] ||
  fail "dry run: the layouts line: $(tail -n 2 out.txt | head -n 1)"
head -n 2 out.txt | tail -n 1 | grep -q '  best ops (\*own) us  own/best  ' ||
  fail "dry run: no layout columns in the header: $(head -n 2 out.txt | tail -n 1)"
python3 - <<'PY' || fail "the table does not match the plan"
import json, math
plan = json.load(open("plan.json"))
table = json.load(open("table.json"))
gemms = [t for e in plan["entries"] if e["name"] == "train_step" for t in e["thunks"]
         if t["kind"] == "gemm"]
def config(d):
    lay = lambda l: (l["dtype"], l["rows"], l["cols"], l["ld"], l["batch_count"], l["batch_stride"])
    return (d["m"], d["n"], d["k"], d["batch_count"], d["transa"], d["transb"], lay(d["a"]),
            lay(d["b"]), lay(d["c"]), lay(d["d"]), d["epilogue"], d["alpha"], d["beta"],
            d.get("bias_dtype"), d.get("aux_ld"), d["compute_type"])
distinct = {config(t["descriptor"]) for t in gemms}
groups = table["groups"]
errors = []
def check(ok, what):
    if not ok:
        errors.append(what)
check(len(groups) == len(distinct) == table["totals"]["groups"],
      f"{len(groups)} groups, {len(distinct)} distinct descriptors")
check(len(distinct) < len(gemms), "the tiny step repeats no gemm: nothing grouped")
check(sorted(n for g in groups for n in g["thunks"]) == sorted(t["name"] for t in gemms),
      "the groups do not hold every gemm once")
check(sum(g["count"] for g in groups) == len(gemms) == table["totals"]["gemms"], "counts")
check(math.isclose(table["totals"]["ours_ms"], 0.01 * len(gemms)),
      f"ours {table['totals']['ours_ms']} ms, want {0.01 * len(gemms)}")
for g in groups:
    check(math.isclose(g["ours_us"], 10.0), f"{g['label']}: ours {g['ours_us']} us a call")
    check(g["torch_us"] is None and g["ratio"] is None, f"{g['label']}: torch timed in a dry run")
    check(g["path"] == "heuristic #0" and math.isclose(g["tuned_us"], 9.0), f"{g['label']}: tuning")
    d = g["descriptor"]
    for key in ("layouts_us", "best_layout", "best_layout_us", "layout_ratio", "layout_error"):
        check(key in g and g[key] is None,
              f"{g['label']}: {key} {g.get(key, 'missing')!r} in a dry run")
    check(g.get("own_layout") == d["transa"][-1] + d["transb"][-1], f"{g['label']}: own_layout")
    check(math.isclose(g["ours_tflops"], 2 * d["m"] * d["n"] * d["k"] * d["batch_count"] / 10e6),
          f"{g['label']}: TFLOP/s")
check(table.get("layouts", {}).get("line") == "layouts: not timed (--dry-run)"
      and table["layouts"]["gains"] is None and table["layouts"]["seconds"] is None,
      f"layouts: {table.get('layouts')}")
step = [t for e in plan["entries"] if e["name"] == "train_step" for t in e["thunks"]]
fallback = [t for t in step if t["kind"] == "kernel" and t.get("fallback")]
check(fallback and math.isclose(table["totals"]["fallback_kernel_ms"], 0.002 * len(fallback)),
      "fallback kernels' ms")
# c_attn: the row-major x [B*T, C] @ W [C, 3C] of the IR.
c_attn = [g for g in groups if g["where"] == "h.*.attn.c_attn"]
check(len(c_attn) == 1 and c_attn[0]["row_major"] == "[128,64] @ [64,192] -> [128,192]",
      f"c_attn: {[g['row_major'] for g in c_attn]}")
if errors:
    print("\n".join(errors))
    raise SystemExit(1)
print(f"table: {len(groups)} groups of {len(gemms)} gemms, totals add up")
PY

python3 "$script" --plan plan.json --profile profile.json --dry-run --limit-ms 0.1 > over.txt 2>&1
rc=$?
[[ $rc == 1 ]] && tail -n 1 over.txt | grep -q '^gemm table: FAIL .*\[over 0.1 ms\]' ||
  fail "over the limit: exit $rc, $(tail -n 1 over.txt)"

# expect NAME ARGS...: exit 2 and one stderr line.
expect() {
  local name=$1
  shift
  python3 "$script" "$@" --dry-run > "$name.out" 2> "$name.err"
  local rc=$?
  if [[ $rc != 2 || $(wc -l < "$name.err") != 1 ]]; then
    fail "$name: exit $rc (want 2), stderr: $(cat "$name.err")"
  else
    echo "ok $name: $(cat "$name.err")"
  fi
}
echo '{"format": "gptc-profile-0", "rows": []}' > old.json
echo '{"format": "gptc-profile-1", "rows": [{"entry": "train_step", "kind": "gemm",
  "name": "elsewhere", "meta": "", "ms_per_step": 1, "calls_per_step": 1}]}' > other.json
expect no_profile --plan plan.json --profile missing.json
expect old_format --plan plan.json --profile old.json
expect other_artifact --plan plan.json --profile other.json
expect no_entry --plan plan.json --profile profile.json --entry nope

python3 -B - "$script" <<'PY' || fail "row-major views or the layouts line"
# D = op(A) . op(B) on column-major memory (cuBLASLt's definition), against
# lhs @ rhs on the views the script hands torch.matmul, for every element.
import importlib.util, random, sys
spec = importlib.util.spec_from_file_location("gemm_table", sys.argv[1])
gt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gt)

def layout(rows, cols, batch):  # ld and batch stride padded at random
    ld = rows + random.randint(0, 2)
    return {"dtype": "CUDA_R_16BF", "rows": rows, "cols": cols, "ld": ld, "batch_count": batch,
            "batch_stride": ld * cols + random.randint(0, 3) if batch > 1 else 0}

def at(view, mem, index):  # element `index` of a view, through its strides
    return mem[sum(i * s for i, s in zip(index, view.stride()))]

def variants(d):
    """d, then the script's other-layout descriptors of the same problem."""
    own = d["transa"][-1] + d["transb"][-1]
    yield d
    for ops in gt.LAYOUTS:
        v = gt.layout_variant(d, ops)
        if ops == own:
            assert v == d, (d, v)
            continue
        assert v["transa"][-1] + v["transb"][-1] == ops, (d, ops, v)
        assert all(v[x] == d[x] for x in d if x not in ("transa", "transb", "a", "b")), (d, v)
        for x, trans in (("a", "transa"), ("b", "transb")):
            if v[trans] == d[trans]:
                assert v[x] == d[x], (d, ops, v)
            else:  # flipped: packed, the same type
                l = v[x]
                assert l["dtype"] == d[x]["dtype"] and l["ld"] == l["rows"], (d, ops, v)
                assert d["batch_count"] == 1 or l["batch_stride"] == l["rows"] * l["cols"]
        yield v

random.seed(7)
cases = 0
for case in range(200):
    m, n, k = (random.randint(1, 6) for _ in range(3))
    batch = random.choice([1, 1, 2, 3])
    ta, tb = random.choice("NT"), random.choice("NT")
    d0 = {"m": m, "n": n, "k": k, "batch_count": batch,
          "transa": "CUBLAS_OP_" + ta, "transb": "CUBLAS_OP_" + tb,
          "a": layout(*((m, k) if ta == "N" else (k, m)), batch),
          "b": layout(*((k, n) if tb == "N" else (n, k)), batch),
          "d": layout(m, n, batch)}
    for d in variants(d0):
        cases += 1
        ta, tb = d["transa"][-1], d["transb"][-1]
        lhs, rhs, out = gt.row_major_operands(d)
        a = [random.randint(-4, 4) for _ in range(rhs.elements())]
        b = [random.randint(-4, 4) for _ in range(lhs.elements())]
        for p in range(batch):
            la, lb, ld_ = d["a"], d["b"], d["d"]
            A = lambda i, j: a[p * la["batch_stride"] + i + j * la["ld"]]  # column-major
            B = lambda i, j: b[p * lb["batch_stride"] + i + j * lb["ld"]]
            opA = A if ta == "N" else (lambda i, j: A(j, i))
            opB = B if tb == "N" else (lambda i, j: B(j, i))
            pre = (p,) if batch > 1 else ()
            for i in range(m):
                for j in range(n):
                    want = sum(opA(i, l) * opB(l, j) for l in range(k))
                    # D(i, j) sits at i + j*ld in D's memory: the out view's [j, i].
                    got = sum(at(lhs, b, pre + (j, l)) * at(rhs, a, pre + (l, i)) for l in range(k))
                    assert got == want, (case, d, i, j, got, want)
                    idx = sum(x * s for x, s in zip(pre + (j, i), out.stride()))
                    assert idx == p * ld_["batch_stride"] + i + j * ld_["ld"], (case, d, i, j)
assert cases == 800, cases
print("row-major views: 200 random descriptors and their 600 other layouts agree with "
      "cuBLASLt's definition")

# The layouts line, on made-up sweeps: the gains above 5%, largest first.
import argparse
args = argparse.Namespace(dry_run=False, no_layouts=False)
d = dict(d0, m=64, n=32, k=16, batch_count=1, transa="CUBLAS_OP_N", transb="CUBLAS_OP_T",
         epilogue="CUBLASLT_EPILOGUE_DEFAULT")
groups = []
# (NN, NT, TN, TT) us; the own layout, NT, is the group's torch us.
for us in ((9.0, 10.0, 12.0, 11.0), (8.0, 10.0, 7.0, 10.0), (9.6, 9.6, 10.0, 9.6),
           (10.0, 10.4, 11.0, 11.0), None):
    g = gt.Group(d)
    g.torch_us = us[1] if us else 10.0
    g.layout_us = dict(zip(gt.LAYOUTS, us)) if us else None
    groups.append(g)
line = gt.layout_summary(groups, args)["line"]
want = ("layouts: 2 of 5 groups would gain >5% from another operand layout (1 not swept): "
        "64x32x16 NT->TN +43%, 64x32x16 NT->NN +11%")
assert line == want, line
assert gt.layout_text(groups[0]) == ("NN 9.0", "1.11"), gt.layout_text(groups[0])
assert gt.layout_text(groups[2]) == ("NT* 9.6", "1.00"), gt.layout_text(groups[2])  # a tie: own
assert gt.layout_text(groups[3]) == ("NN 10.0", "1.04"), gt.layout_text(groups[3])  # <= 5%
assert gt.layout_text(groups[4]) == ("-", "-"), gt.layout_text(groups[4])
print("layouts line:", line)
PY

python3 -B - "$script" plan.json profile.json <<'PY'
# The four layouts of each tiny descriptor give the same product, through the
# script's own views (layout_variant, row_major_operands) and plain call, on
# CPU torch. Exit 3: no torch here.
import importlib.util, json, sys
try:
    import torch
except ImportError:
    sys.exit(3)
spec = importlib.util.spec_from_file_location("gemm_table", sys.argv[1])
gt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gt)

class CpuTimer(gt.TorchTimer):  # the script's calls, on CPU tensors
    def __init__(self):
        self.torch, self.min_ms, self.reps, self.device = torch, 0, 1, "cpu"
        self.dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}

    def tensor(self, view):
        return torch.zeros(view.elements(), dtype=self.dtypes[view.dtype]).as_strided(
            view.size(), view.stride())

timer = CpuTimer()
groups, _, _ = gt.build_groups(json.load(open(sys.argv[2])), json.load(open(sys.argv[3])),
                               "train_step")
torch.manual_seed(5)
for g in groups:
    d = g.desc
    lhs_v, rhs_v, out_v = gt.row_major_operands(d)
    # Small integers: every product exact in f32, rounded once to D's type.
    x = torch.randint(-3, 4, lhs_v.size(), dtype=torch.float64)
    w = torch.randint(-3, 4, rhs_v.size(), dtype=torch.float64)
    want = x @ w
    results = {}
    for ops in gt.LAYOUTS:
        lv, rv, ov = gt.row_major_operands(gt.layout_variant(d, ops))
        assert lv.size() == lhs_v.size() and rv.size() == rhs_v.size() and ov == out_v, ops
        lhs, rhs = timer.tensor(lv), timer.tensor(rv)
        lhs.copy_(x)
        rhs.copy_(w)
        # transb T: lhs a transposed view; transa T: rhs one (the header's mapping).
        assert (lhs.stride()[-1] == 1) == (ops[1] == "N"), (g.label(), ops, lhs.stride())
        assert (rhs.stride()[-1] == 1) == (ops[0] == "N"), (g.label(), ops, rhs.stride())
        call, _ = timer.plain(lv, lhs, rhs, ov)
        got = call().double()
        assert torch.allclose(got, want, rtol=1e-2, atol=1e-2), (g.label(), ops)
        results[ops] = got
    for ops in gt.LAYOUTS:
        assert torch.allclose(results[ops], results[gt.LAYOUTS[0]]), (g.label(), ops)
print(f"layouts on CPU torch {torch.__version__}: NN, NT, TN, TT give the same product "
      f"for the {len(groups)} tiny descriptors")
PY
case $? in
  0) ;;
  3) echo "layouts on CPU torch: skipped (no torch)" ;;
  *) fail "the layouts' products differ" ;;
esac

if (( failures )); then
  echo "gemm_table_test: $failures failed" >&2
  exit 1
fi
echo "gemm_table_test: ok"
