# Checkpoints from strangers, files that are always whole, ranks that agree
# (sourced by bad_input_test.sh: `expect`, $gptrun, $gptc, $tokenizer,
# "${train[@]}", t.gptx, dp2.gptx and the checkpoint ck/step_000001).

# st_edit FILE CODE: runs the Python CODE on a safetensors FILE's header,
# `h` (a dict; set it to a str for raw text), and writes the file back.
st_edit() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, code = sys.argv[1], sys.argv[2]
b = open(path, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
data = b[8 + n:]
exec(code)
t = h if isinstance(h, str) else json.dumps(h, separators=(',', ':'))
t += ' ' * (-len(t) % 8)
open(path, 'wb').write(struct.pack('<Q', len(t)) + t.encode() + data)
PY
}
# fresh NAME: a copy of ck/step_000001 called NAME.
fresh() { rm -rf "$1"; cp -r ck/step_000001 "$1"; }
# both NAME CODE: st_edit on both safetensors files of checkpoint NAME.
both() { st_edit "$1/model.safetensors" "$2" && st_edit "$1/optim.safetensors" "$2"; }
# short NAME: the last case's one line is short (no 200 KB shape in it).
short() {
  cases=$((cases + 1))
  if (($(wc -c < "$1.err") > 300)); then
    echo "FAILED $1-short: a line of $(wc -c < "$1.err") bytes" >&2
    failures=$((failures + 1))
  fi
}
resume=("$gptrun" t.gptx --device cpu "${train[@]}" --steps 2 --resume)

# Note [checkpoint checksums]: the checksum covers the metadata, so an edited
# step is refused as corruption ...
fresh step-edited
both step-edited 'h["__metadata__"]["gptc.step"] = "9223372036854775807"'
expect ckpt-step-edited 1 '^gptrun: --resume: step-edited/model\.safetensors: checksum mismatch' \
  "${resume[@]}" step-edited
# ... and Note [checkpoint metadata ranges]: without a checksum (a file of an
# older gptrun, or a stripped one), every field is range-checked.
unchecked='del h["__metadata__"]["gptc.checksum"]'
for c in 'step-huge gptc.step 9223372036854775807 is 9223372036854775807, not in \[0, 2\^40\]' \
  'step-negative gptc.step -5 is -5, not in \[0, 2\^40\]' \
  'step-text gptc.step 1e3 is .1e3., not an integer' \
  'epoch-beyond gptc.data.epoch 9 is 9, beyond the step 1' \
  'shard-beyond gptc.data.shard 7 is 7, beyond the 1 shards the run read' \
  'run-id gptc.run_id ../../x is .\.\./\.\./x., not 16 hex digits'; do
  read -r name key value why <<< "$c"
  fresh "$name"
  both "$name" "$unchecked; h['__metadata__']['$key'] = '$value'"
  expect "ckpt-$name" 1 "^gptrun: --resume: $name/model\\.safetensors: __metadata__ '$key' $why" \
    "${resume[@]}" "$name"
done

# Note [strict safetensors]: as strict as Hugging Face's reader, in one short line.
fresh dup
st_edit dup/model.safetensors 'h = json.dumps(h)[:-1] + ", \"wte.weight\": " + json.dumps(h["wte.weight"]) + "}"'
expect st-duplicate-key 1 "^gptrun: --resume: dup/model\\.safetensors: the header names 'wte\\.weight' twice$" \
  "${resume[@]}" dup
fresh overlap
st_edit overlap/model.safetensors '
w = h["wpe.weight"]["data_offsets"]; e = h["wte.weight"]["data_offsets"]
first = min(w, e, key=lambda o: o[0]); second = max(w, e, key=lambda o: o[0])
second[0] -= 4; second[1] -= 4'
expect st-overlap 1 "^gptrun: --resume: overlap/model\\.safetensors: tensor '.*': data_offsets .* overlap those of tensor '.*', which end at [0-9]+$" \
  "${resume[@]}" overlap
fresh rank
st_edit rank/model.safetensors 'h["wpe.weight"]["shape"] = [1] * 100000'
expect st-rank 1 "^gptrun: --resume: rank/model\\.safetensors: tensor 'wpe\\.weight': shape of rank 100000, above the limit of 16$" \
  "${resume[@]}" rank
short st-rank
fresh trailing
printf 'xxxxxxxx' >> trailing/model.safetensors
expect st-trailing 1 "^gptrun: --resume: trailing/model\\.safetensors: 8 bytes after the last tensor's data" \
  "${resume[@]}" trailing

# Note [lock file]: a symbolic link planted as the lock is refused, and the
# file it points to is left as it was.
mkdir -p planted
echo "precious" > victim.txt
ln -s "$PWD/victim.txt" planted/.gptrun.lock
expect lock-symlink 1 '^gptrun: --ckpt-dir planted: the lock planted/\.gptrun\.lock is a symbolic link, which gptrun refuses to write through: remove it$' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 --ckpt-dir planted
cases=$((cases + 1))
if [[ $(cat victim.txt) != precious ]]; then
  echo "FAILED lock-symlink-victim: victim.txt now holds: $(head -c 200 victim.txt)" >&2
  failures=$((failures + 1))
fi
mkfifo planted2.fifo 2>/dev/null; mkdir -p planted2; mv planted2.fifo planted2/.gptrun.lock
expect lock-fifo 1 '^gptrun: --ckpt-dir planted2: the lock planted2/\.gptrun\.lock is not a regular file: remove it$' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 1 --ckpt-dir planted2

# Generation reads the weights alone; a Hugging Face directory points to import-hf.
"$gptc" export-hf ck/step_000001 hf-out > /dev/null || exit 1
expect generate-hf-dir 1 '^gptrun: --resume: hf-out/config\.json: a Hugging Face model.s config .*gptc import-hf hf-out OUT_DIR' \
  "$gptrun" generate t.gptx --device cpu --resume hf-out --tokenizer "$tokenizer" --prompt hi

# Note [whole step directories]: an incomplete step directory (left by an
# older gptrun that deleted checkpoints in place) is skipped, saying so.
rm -rf inc
cp -r ck inc
mkdir inc/step_000002
cp ck/step_000001/config.json inc/step_000002/
cases=$((cases + 1))
if "$gptrun" t.gptx --device cpu "${train[@]}" --steps 3 --ckpt-dir inc --ckpt-every 1 --resume latest \
  > inc.out 2> inc.err &&
  grep -q '^note: --resume latest skipped inc/step_000002 (no model\.safetensors), an incomplete checkpoint$' inc.out &&
  grep -q '^resumed from inc/step_000001 at step 1$' inc.out && [[ ! -s inc.err ]] &&
  [[ -f inc/step_000002/model.safetensors && -f inc/step_000003/optim.safetensors ]]; then
  echo "ok resume-skips-incomplete: $(grep '^note' inc.out)"
else
  echo "FAILED resume-skips-incomplete:" >&2
  cat inc.out inc.err >&2
  failures=$((failures + 1))
fi
rm -rf inc-only
mkdir -p inc-only/step_000004
cp ck/step_000001/config.json inc-only/step_000004/
expect resume-only-incomplete 1 '^gptrun: --resume latest: no complete checkpoint in inc-only \(skipped inc-only/step_000004 \(no model\.safetensors\)\)$' \
  "$gptrun" t.gptx --device cpu "${train[@]}" --steps 5 --ckpt-dir inc-only --resume latest

# Note [shard identity]: the same files under another pattern or directory
# resume; other files are named.
cases=$((cases + 1))
rm -rf moved && cp -r tok moved
if "${resume[@]}" ck/step_000001 --train 'tok/train_00*.bin' > same1.out 2>&1 &&
  "${resume[@]}" ck/step_000001 --train 'moved/train_*.bin' > same2.out 2>&1; then
  echo "ok resume-same-shards: another pattern and another directory resume"
else
  echo "FAILED resume-same-shards:" >&2
  cat same1.out same2.out >&2
  failures=$((failures + 1))
fi
rm -rf two && mkdir two && cp tok/train_000.bin two/ && cp tok/train_000.bin two/train_001.bin
expect resume-more-shards 2 "^gptrun: --resume ck/step_000001: this run has --train 'two/train_\\*\\.bin' finding 2 shards where the checkpoint read 1 from 'tok/train_\\*\\.bin': it adds train_001\\.bin \\([0-9,]+ bytes\\): the data order would change" \
  "${resume[@]}" ck/step_000001 --train 'two/train_*.bin'
rm -rf other && mkdir other && cp tok/val_000.bin other/train_000.bin
expect resume-other-shard 2 "^gptrun: --resume ck/step_000001: this run has --train 'other/train_\\*\\.bin' finding 1 shard where the checkpoint read 1 from 'tok/train_\\*\\.bin': its train_000\\.bin (is [0-9,]+ bytes where the checkpoint's was [0-9,]+|begins with other tokens than the checkpoint's): the data order" \
  "${resume[@]}" ck/step_000001 --train 'other/train_*.bin'

# Note [greeting]: another program on MASTER_PORT is named, not joined.
port=$((20000 + RANDOM % 20000))
python3 - "$port" > squatter.out 2>&1 <<'PY' &
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(8)
print("listening", flush=True)
s.settimeout(30)
end = time.time() + 30
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        break
    c.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
PY
squatter=$!
for _ in $(seq 100); do grep -q listening squatter.out 2>/dev/null && break; sleep 0.05; done
dp=(env WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GPTC_DIST_TIMEOUT=20)
expect port-stranger 1 "^gptrun: rendezvous: rank 1: 127\\.0\\.0\\.1:$port is not a gptrun rank 0: it answered 'SSH-2\\.0-OpenSSH_9\\.2\\\\x0d\\\\x0a'; python3.* \\(pid $squatter\\) listens there" \
  "${dp[@]}" RANK=1 "$gptrun" dp2.gptx --device cpu "${train[@]}" --steps 1
expect port-taken 1 "^gptrun: rendezvous: rank 0: cannot listen on port $port: Address already in use; python3.* \\(pid $squatter\\) listens there$" \
  "${dp[@]}" RANK=0 "$gptrun" dp2.gptx --device cpu "${train[@]}" --steps 1
kill $squatter 2>/dev/null
wait $squatter 2>/dev/null

# Note [agreement]: a rank started with another --lr ends both, naming it.
port=$((20000 + RANDOM % 20000))
dp=(env WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GPTC_DIST_TIMEOUT=60)
"${dp[@]}" RANK=1 "$gptrun" dp2.gptx --device cpu "${train[@]}" --steps 2 --lr 2e-3 \
  > lr1.out 2> lr1.err &
rank1=$!
expect rank-disagrees 1 "^gptrun: rendezvous: rank 1 disagrees with rank 0: --lr is '0\\.002' on rank 1 but '0\\.001' on rank 0 " \
  "${dp[@]}" RANK=0 "$gptrun" dp2.gptx --device cpu "${train[@]}" --steps 2 --lr 1e-3
wait $rank1
rc1=$?
cases=$((cases + 1))
if [[ $rc1 != 1 || $(wc -l < lr1.err) != 1 ]] || ! cmp -s lr1.err rank-disagrees.err; then
  echo "FAILED rank-disagrees-rank1: exit $rc1, stderr:" >&2
  cat lr1.err >&2
  failures=$((failures + 1))
fi
