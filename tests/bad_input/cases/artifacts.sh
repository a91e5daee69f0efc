# Artifacts from strangers (sourced by bad_input_test.sh): each case edits a
# section and recomputes the container's lengths and checksum
# (tests/bad_input/gptx_edit.py), so only the checks of what the sections
# mean stand between the file and the device. Also inputs that are not
# regular files, and the trust gptrun --device emu asks of an emulator
# library (Note [trusted emulator libraries] in tools/common/trusted_libraries.h).
edit() { python3 "$here/gptx_edit.py" "$@" || exit 1; }
emu_train=(--device emu "${train[@]}" --steps 1)
"$gptc" compile --model gpt2-tiny --layers 1 --batch 1 --seq 8 --emu -o e.gptx > /dev/null || exit 1

# A kernel's parameter count in the emu index against the plan's args.
edit e.gptx s1.gptx set manifest emu.kernels.0.params 10
expect emu-params 1 '^gptrun: s1\.gptx: manifest emu\.kernels\[0\] \(wte_gather\): 10 parameters, the plan.s thunks pass 3 args$' \
  "$gptrun" s1.gptx "${emu_train[@]}"
edit e.gptx s1b.gptx set manifest emu.kernels.0.symbol '"system"'
expect emu-symbol 1 '^gptrun: s1b\.gptx: manifest emu\.kernels\[0\] \(wte_gather\): symbol system is not a kernel.s \(they start with gptc_emu_kernel__\)$' \
  "$gptrun" s1b.gptx "${emu_train[@]}"

# The emulator library cut to a third: refused as not built here, and,
# trusted anyway, as damaged before dlopen maps it.
edit e.gptx s2.gptx cut emu 0.33
expect emu-cut-untrusted 1 "^gptrun: s2\.gptx: its emulator library is native code this machine's gptc did not build .*--trust-artifact" \
  "$gptrun" s2.gptx "${emu_train[@]}"
expect emu-cut 1 '^gptrun: s2\.gptx: its emulator library is damaged: its (section|program) header' \
  "$gptrun" s2.gptx "${emu_train[@]}" --trust-artifact

# The manifest's batch and seq against the entries' token inputs.
edit t.gptx s3.gptx set manifest flags.batch 1000000000
expect manifest-batch 1 '^gptrun: s3\.gptx: entry train_step input %tokens is s32\[1,8\]; manifest\.flags say batch 1000000000 and seq 8$' \
  "$gptrun" s3.gptx --device cpu "${train[@]}" --steps 1
edit t.gptx s3b.gptx set manifest flags.seq 1099511627776
expect manifest-seq 1 '^gptrun: s3b\.gptx: manifest\.flags: batch 1 and seq 1099511627776 must be positive, seq at most the model.s 64 positions$' \
  "$gptrun" s3b.gptx --device cpu "${train[@]}" --steps 1

# A launch no GPU makes, and one legal but far beyond the kernel's work.
edit e.gptx s7.gptx set plan entries.0.thunks.kind=kernel.grid '[2147483647, 65535, 65535]'
expect launch-grid 1 '^gptrun: s7\.gptx: plan entry train_step: thunk 0 \(kernel wte_gather.*grid 2147483647x65535x65535 launches more blocks than its 3 arguments have bytes' \
  "$gptrun" s7.gptx "${emu_train[@]}"
edit e.gptx s7b.gptx set plan entries.0.thunks.kind=kernel.block '[1, 1, 65]'
expect launch-block 1 '^gptrun: s7b\.gptx: plan entry train_step: thunk 0 \(kernel wte_gather.*block\[2\] is 65; it must be in \[1, 64\]$' \
  "$gptrun" s7b.gptx "${emu_train[@]}"

# The manifest's model against the parameters.
edit t.gptx m5.gptx set manifest model.vocab 60000
expect manifest-vocab 1 "^gptrun: m5\.gptx: manifest\.model: 'vocab' 60000 exceeds 'padded_vocab' 50304$" \
  "$gptrun" m5.gptx --device cpu "${train[@]}" --steps 1
edit t.gptx m5b.gptx set manifest model.layers 3
expect manifest-layers 1 "^gptrun: m5b\.gptx: manifest\.model \(3 layers\) has 40 parameters, section 'params' holds 16$" \
  "$gptrun" m5b.gptx --device cpu "${train[@]}" --steps 1
edit t.gptx m5c.gptx set manifest model.width 32
expect manifest-width 1 "^gptrun: m5c\.gptx: section 'params' \[0\] is wte\.weight f32\[50304,64\], manifest\.model makes it wte\.weight f32\[50304,32\]$" \
  "$gptrun" m5c.gptx --device cpu "${train[@]}" --steps 1

# Devices, FIFOs and directories where a file is read. `timeout`: a
# reader that blocks on the FIFO fails the case instead of the suite.
mkfifo fifo
mkdir a_dir
expect input-artifact-zero 1 '^gptrun: /dev/zero: is a character device, not a regular file$' \
  timeout 20 "$gptrun" /dev/zero --device cpu "${train[@]}"
expect input-artifact-fifo 1 '^gptrun: fifo: is a FIFO, not a regular file$' \
  timeout 20 "$gptrun" fifo --device cpu "${train[@]}"
expect input-artifact-dir 1 '^gptrun: a_dir: is a directory, not a regular file$' \
  timeout 20 "$gptrun" a_dir --device cpu "${train[@]}"
expect input-inspect-fifo 1 '^gptc: fifo: is a FIFO, not a regular file$' \
  timeout 20 "$gptc" inspect fifo
expect input-report-profile 1 '^gptc: --profile: /dev/zero: is a character device, not a regular file$' \
  timeout 20 "$gptc" report t.gptx --profile /dev/zero -o r.html
expect input-report-log 1 '^gptc: --log: fifo: is a FIFO, not a regular file$' \
  timeout 20 "$gptc" report t.gptx --log fifo -o r.html
expect input-ir-zero 1 '^gptc-opt: /dev/zero: is a character device, not a regular file$' \
  timeout 20 "$opt" --pass=dce /dev/zero
expect input-tokenize-fifo 1 'fifo: is a FIFO, not a regular file$' \
  timeout 20 "$tokenize" fifo -o f.bin --tokenizer "$tokenizer"
expect input-shard-fifo 1 'fifo: is a FIFO, not a regular file$' \
  timeout 20 "$gptrun" t.gptx --device cpu --train fifo --steps 1

# An emulator library this machine's gptc never recorded (another cache
# directory) is refused unless trusted by name; trusted, it runs (one step,
# without the checks and the autotuning: seconds under ASan, not half a minute).
expect emu-untrusted 1 "^gptrun: e\.gptx: its emulator library is native code this machine's gptc did not build \(no record .*/trusted-emu/[0-9a-f]{64}\): compile the artifact here with .gptc compile \.\.\. --emu., or pass --trust-artifact if you trust its source$" \
  env XDG_CACHE_HOME="$PWD/elsewhere" "$gptrun" e.gptx "${emu_train[@]}"
cases=$((cases + 1))
if env XDG_CACHE_HOME="$PWD/elsewhere" "$gptrun" e.gptx "${emu_train[@]}" --trust-artifact \
  --emu-checks off --autotune off > trusted.out 2> trusted.err && grep -q '^step 1/1' trusted.out; then
  echo "ok emu-trusted: --trust-artifact runs it"
else
  echo "FAILED emu-trusted: $(cat trusted.err)" >&2
  failures=$((failures + 1))
fi
expect trust-needs-emu 2 '^gptrun: --trust-artifact applies with --device emu$' \
  "$gptrun" e.gptx --device cpu "${train[@]}" --trust-artifact

# A --no-codegen artifact on the devices that run kernels, and generate's
# errors naming the file.
expect no-codegen-emu 1 '^gptrun: t\.gptx: was compiled with --no-codegen \(no kernels\): only --device cpu runs it' \
  "$gptrun" t.gptx --device emu "${train[@]}" --steps 1
expect no-codegen-gpu 1 '^gptrun: (t\.gptx: was compiled with --no-codegen \(no kernels\): only --device cpu runs it|--device gpu: this gptrun was built without the CUDA toolkit)' \
  "$gptrun" t.gptx --device gpu "${train[@]}" --steps 1
expect generate-no-codegen-emu 1 '^gptrun: t\.gptx: was compiled with --no-codegen \(no kernels\): only --device cpu runs it' \
  "$gptrun" generate t.gptx --device emu --resume ck/step_000001 --tokenizer "$tokenizer" --prompt hi
expect generate-no-codegen-gpu 1 '^gptrun: (t\.gptx: was compiled with --no-codegen \(no kernels\): only --device cpu runs it|--device gpu: this gptrun was built without the CUDA toolkit)' \
  "$gptrun" generate t.gptx --device gpu --resume ck/step_000001 --tokenizer "$tokenizer" --prompt hi
