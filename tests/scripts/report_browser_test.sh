#!/usr/bin/env bash
# The HTML report (docs/REPORTS.md) in a real browser, headless Chromium:
# gptc report of gpt2-tiny (an artifact with a profile from the emulated
# device, and the logs of two CPU runs) and gptrun --report's page load with
# no JavaScript error, draw one bar per kernel and gemm of the plan and one
# loss point per logged step, one scaling row and chart point per GPU count,
# and reference no other file or network address; screenshots are kept in OUT. Bad inputs: an artifact without a
# plan (--no-codegen), a log cut mid-line, an empty log (pages with a
# warning), a profile of another artifact (refused, one line). With
# --large, also gpt2-124m at batch 16: under 3 MB, drawn in under 2 s.
#   report_browser_test.sh GPTC GPTRUN GPT_TOKENIZE OUT [--large]
# Exits 77 (skipped) without Chromium; scripts/setup installs it.
set -uo pipefail
gptc=$1 gptrun=$2 tokenize=$3 out=$4 large=${5:-}
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $browser ]]; then
  echo "report_browser_test: SKIPPED: no chromium on PATH (scripts/setup installs Debian's)"
  exit 77
fi
status=0
fail() { echo "report_browser_test: FAIL: $*" >&2; status=1; }
rm -rf "$out" && mkdir -p "$out" && cd "$out" || exit 1

run() {  # a command that must succeed; its output kept in OUT/NAME.log
  local name=$1
  shift
  "$@" >"$name.log" 2>&1
  local code=$?
  if [[ $code != 0 ]]; then
    fail "$name: $* exited $code: $(tail -3 "$name.log")"
    return 1
  fi
}

# Loads PAGE in Chromium; writes PAGE.dom (the DOM after its scripts ran)
# and PAGE.png; checks it rendered without a JavaScript error.
# A profile (and a home, where it keeps caches) of its own in OUT and no
# /dev/shm: CI containers run it as root, with a small /dev/shm and perhaps
# no writable home; nothing is written outside OUT.
chrome=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars
        "--user-data-dir=$PWD/chromium-profile")
browse() {
  local page=$1
  HOME="$PWD" timeout 60 "$browser" "${chrome[@]}" --dump-dom "file://$PWD/$page" >"$page.dom" \
    2>"$page.browser.log"
  HOME="$PWD" timeout 60 "$browser" "${chrome[@]}" --window-size=1400,3200 \
    --screenshot="$PWD/$page.png" \
    "file://$PWD/$page" >/dev/null 2>>"$page.browser.log"
  grep -q 'data-ready="1"' "$page.dom" || fail "$page: the page's script did not finish"
  if grep -o 'data-js-errors="[^"]*"' "$page.dom"; then fail "$page: JavaScript errors"; fi
  [[ -s $page.png ]] || fail "$page: no screenshot"
  if grep -Eio 'http|src=|href=|url\(|@import' "$page" | sort | uniq -c; then
    fail "$page: references another file or address"
  fi
}

# What the page draws against what the inputs hold: bars against the plan's
# launched thunks (gptc inspect --plan), loss points against the logs.
check_counts() {
  local page=$1 plan=$2
  shift 2
  python3 - "$page.dom" "$plan" "$@" <<'PY' || fail "$page: counts differ"
import json, re, sys
# The drawn DOM, without the script's own text.
dom = re.sub(r"<script.*?</script>", "", open(sys.argv[1], encoding="utf-8").read(), flags=re.S)
plan, logs = sys.argv[2], sys.argv[3:]
ok = True
if plan:
    entries = json.load(open(plan))["entries"]
    want = sum(1 for e in entries if e["name"] not in ("logits", "eval", "score")
               for t in e["thunks"]
               if t["kind"] != "constant" and not t.get("fallback", False))
    bars = len(re.findall(r'<rect[^>]*class="kbar[ "]', dom))
    print(f"bars: {bars}, plan thunks: {want}")
    ok &= bars == want and want > 0
want = 0
for log in logs:
    for line in open(log):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "step" and isinstance(e.get("loss"), (int, float)):
            want += 1
lines = re.findall(r'<polyline[^>]*class="loss-line[ "][^>]*>', dom)
points = sum(int(re.search(r'data-points="(\d+)"', l).group(1)) for l in lines)
print(f"loss points: {points}, logged steps: {want}")
ok &= points == want
sys.exit(0 if ok else 1)
PY
}

# The scaling view against the model's GPU counts (1, 2, 4, 8, 16, 64, 512):
# one table row each, and a line of one point each for ZeRO-0 and ZeRO-1;
# ROWS 0: none, and the view says why.
check_scaling() {
  local page=$1 rows=$2
  python3 - "$page.dom" "$rows" <<'PY' || fail "$page: scaling view"
import re, sys
dom = re.sub(r"<script.*?</script>", "", open(sys.argv[1], encoding="utf-8").read(), flags=re.S)
want = int(sys.argv[2])
view = dom[dom.index('id="v-scaling"'):]
rows = len(re.findall(r'<tr class="srow"', view))
lines = re.findall(r'<polyline[^>]*class="scale-line[ "][^>]*>', view)
points = [int(re.search(r'data-points="(\d+)"', l).group(1)) for l in lines]
print(f"scaling rows: {rows}, lines: {points}, want {want}")
if want == 0:
    sys.exit(0 if rows == 0 and not lines and "No scaling prediction: " in view else 1)
sys.exit(0 if rows == want and points == [want, want] else 1)
PY
}

# gpt2-tiny, a token shard of repeated text, two CPU runs, an emulated profile.
run compile "$gptc" compile --model gpt2-tiny --emu -o tiny.gptx || exit 1
run plan "$gptc" inspect tiny.gptx --plan || exit 1
cp plan.log tiny.plan.json
for i in $(seq 1 200); do
  echo "Document $i. The quick brown fox jumps over the lazy dog, again and again, $i times."
  echo "A second line of document $i, so that the validation split holds a few batches."
  echo "<|endoftext|>"
done >text.txt
run tokenize "$tokenize" text.txt -o data/ --val-fraction 0.2 || exit 1
run run1 "$gptrun" tiny.gptx --device cpu --train 'data/train_*.bin' --val 'data/val_*.bin' \
  --steps 12 --val-every 4 --val-steps 2 --log run1.jsonl --report run1.html
run run2 "$gptrun" tiny.gptx --device cpu --train 'data/train_*.bin' --val 'data/val_*.bin' \
  --steps 8 --val-every 4 --val-steps 2 --lr 3e-3 --seed 7 --log run2.jsonl
run profile "$gptrun" tiny.gptx --device emu --emu-checks off --bench --steps 2 --profile \
  --profile-json profile.json
run report "$gptc" report tiny.gptx --profile profile.json --log run1.jsonl --log run2.jsonl \
  -o report.html
browse report.html
check_counts report.html tiny.plan.json run1.jsonl run2.jsonl
grep -q '"measured_us":[0-9]' report.html || fail "report.html: no measured time"
check_scaling report.html 7
browse run1.html
check_counts run1.html tiny.plan.json run1.jsonl
check_scaling run1.html 7

# Bad inputs.
run nocodegen "$gptc" compile --model gpt2-tiny --no-codegen -o nocodegen.gptx &&
  run report_nocodegen "$gptc" report nocodegen.gptx --log run1.jsonl -o nocodegen.html &&
  browse nocodegen.html && check_scaling nocodegen.html 0
head -c -20 run1.jsonl >cut.jsonl
: >empty.jsonl
run report_cut "$gptc" report tiny.gptx --log cut.jsonl --log empty.jsonl -o cut.html &&
  browse cut.html
grep -q 'last line cut short' report_cut.log || fail "cut.jsonl: no warning"
grep -q 'empty log' report_cut.log || fail "empty.jsonl: no warning"
check_counts cut.html "" cut.jsonl
run other "$gptc" compile --model gpt2-tiny --batch 2 --emu -o other.gptx
"$gptc" report other.gptx --profile profile.json -o other.html >other.log 2>&1
code=$?
if [[ $code != 1 || $(wc -l <other.log) != 1 ]] || ! grep -q 'another artifact' other.log; then
  fail "a profile of another artifact: exit $code, $(cat other.log)"
fi
[[ ! -e other.html ]] || fail "a refused report left other.html"

if [[ $large == --large ]]; then
  run compile124m "$gptc" compile --model gpt2-124m --batch 16 --seq 1024 -o 124m.gptx &&
    run report124m "$gptc" report 124m.gptx -o 124m.html && browse 124m.html
  bytes=$(stat -c %s 124m.html 2>/dev/null || echo 0)
  ms=$(grep -o 'data-render-ms="[0-9.]*"' 124m.html.dom | grep -o '[0-9.]*' | head -1)
  echo "gpt2-124m b16 report: $bytes bytes, drawn in ${ms:-?} ms"
  ((bytes > 0 && bytes < 3000000)) || fail "124m.html is $bytes bytes (the limit is 3 MB)"
  [[ -n $ms ]] && python3 -c "import sys; sys.exit(0 if float('$ms') < 2000 else 1)" ||
    fail "124m.html drawn in ${ms:-?} ms (the limit is 2000)"
fi

if [[ $status == 0 ]]; then echo "report_browser_test: ok (screenshots in $out)"; fi
exit $status
