#!/usr/bin/env python3
"""Every distinct gemm of a compiled step: our time a call next to torch.matmul's.

  gemm-table.py --plan PLAN.json --profile PROFILE.json [--entry train_step]
                [--dry-run] [--no-layouts] [--json OUT] [--limit-ms 17.5]
                [--max-ratio 1.15] [--min-ms 20] [--reps 50]

PLAN.json is `gptc inspect ARTIFACT.gptx --plan`; PROFILE.json is
`gptrun ARTIFACT --device gpu --bench --steps N --profile --profile-json FILE`
of the same artifact. The plan's gemm thunks of the entry are grouped by their
cuBLASLt descriptor (everything but its notes: shape, batch, transposes, each
layout's type and ld, epilogue, alpha, beta, bias type, aux ld, compute type),
profile rows are joined to thunks by (entry, thunk name), and each group is
timed again through torch.matmul on the same shapes, types and memory layouts.
One row a group: calls a step, our us a call and TFLOP/s, torch's, the ratio
ours / torch, torch's nearest fused op where there is a simple one (addmm for
BIAS or a residual, _addmm_activation for GELU_BIAS) and the autotuner's
choice. Then the totals a step, and a last line that scripts/gpu-run-checks
records:
  gemm table: PASS gemms 15.20 ms/step (limit 17.5) vs torch.matmul 14.90 ms; worst ratio ...
PASS when our gemms take at most --limit-ms a step and no group is above
--max-ratio. Exit 0 on PASS, 1 on FAIL, 2 when the inputs are unusable.

The ratio is against the plain matmul whatever the epilogue: torch needs
another kernel for a bias, GELU, DGELU or bias gradient, so the ratio favours
torch there, and the fused column is the fairer peer where it exists. Where D
is f32 and A, B are bf16 (residual and weight-gradient gemms), torch writes
f32 through out_dtype when this torch has it, else bf16, which the "torch
out" column says (half the bytes written: the ratio favours torch again).
Both sides' times are per call in a stream of calls: ours from CUDA events
around each thunk of a profiled step, torch's from events around --reps or
more back-to-back calls on the same inputs (so warm in L2 where they fit).
Torch accumulates in f32 as our descriptors do (no reduced-precision
reductions; TF32 only where a descriptor asks for it).

Operand layouts: each group's problem (m, n, k, batch, the types of A, B and
D) is also timed through the same plain torch.matmul with the other three
operand transpositions, and the "best ops (*own) us" column gives the fastest
of the four, named by the transa/transb its descriptor would have ("TN":
transa T, transb N; "*" when it is the group's own), with "own/best" the
group's torch us over that best. It tells whether storing an operand the other
way round (the bf16 weight copy, written every step anyway, costs nothing to
transpose) would make that gemm faster on this card. The mapping, from Note
[row-major on cuBLASLt] (compiler/artifact/gemm_plan.h): the row-major product
torch.matmul(lhs, rhs) = out [n, m] is cuBLASLt's column-major D (m x n) with
cuBLASLt's B the lhs and its A the rhs, so
  transb N: lhs is B's memory as stored, a contiguous [n, k]
  transb T: lhs is the transposed view .T of a contiguous [k, n]
  transa N: rhs is A's memory as stored, a contiguous [k, m]
  transa T: rhs is the transposed view .T of a contiguous [m, k]
i.e. torch's x @ W.T (nn.Linear) is "TN", x @ W is "NN", x.T @ y is "NT"
(torch's CUDA mm makes the same swap for its row-major result, so its cuBLAS
call should see these very transa/transb). An operand kept as stored keeps
the descriptor's layout (ld, batch stride); one flipped is packed (ld = its
rows). D, its type and the epilogue-free call stay the group's, with the same
out_dtype fallback. The group's own entry is its "torch us" (three more
timings a group, under the same --min-ms and --reps: about 2 s more for
gpt2-124m b16's 15 groups). A line before the verdict lists the groups
another layout would make more than 5% faster:
  layouts: 2 of 15 groups would gain >5% from another operand layout: ...
It leaves the verdict alone. --no-layouts skips these timings.

--dry-run imports no torch and leaves torch's columns '-': the grouping, the
join and the totals can be checked anywhere (tests/scripts/gemm_table_test.sh).
--json OUT writes the table (format gptc-gemm-table-1) for docs/PERFORMANCE.md.
"""
import argparse
import dataclasses
import json
import math
import re
import sys
import time

DTYPES = {"CUDA_R_16BF": "bf16", "CUDA_R_16F": "f16", "CUDA_R_32F": "f32"}
# transa, transb: "TN" is transa T, transb N (Group.label's order).
LAYOUTS = ("NN", "NT", "TN", "TT")
LAYOUT_GAIN = 1.05  # own / best above this: listed on the layouts line


class InputError(Exception):
    """Inputs the table cannot be made from: one line, exit 2."""


# Note [row-major on cuBLASLt] (compiler/artifact/gemm_plan.h): a column-major
# rows x cols layout with leading dimension ld is the same memory as the
# row-major [cols, rows] with row stride ld. The plan's column-major
#   D (m x n) = op(A) (m x k) . op(B) (k x n)
# is therefore, on row-major memory,
#   D^T [n, m] = op(B)^T [n, k] . op(A)^T [k, m]
# where op(B)^T is B's memory as stored when transb is N and its transpose when
# T, and likewise for A: torch.matmul(lhs, rhs) with lhs on B, rhs on A.
@dataclasses.dataclass(frozen=True)
class View:
    """A row-major torch view of one cuBLASLt operand's memory."""

    matrix: str  # "A", "B", "C" or "D"
    dtype: str  # "bf16", "f16", "f32"
    batch: int
    batch_stride: int  # elements
    rows: int  # of the memory as row-major: the layout's cols
    cols: int  # the layout's rows
    ld: int
    transposed: bool  # used as memory.T

    def size(self):
        rc = (self.cols, self.rows) if self.transposed else (self.rows, self.cols)
        return (self.batch, *rc) if self.batch > 1 else rc

    def stride(self):
        rc = (1, self.ld) if self.transposed else (self.ld, 1)
        return (self.batch_stride, *rc) if self.batch > 1 else rc

    def elements(self):
        """Elements of storage the view spans."""
        return (self.batch - 1) * self.batch_stride + (self.rows - 1) * self.ld + self.cols

    def text(self):
        t = f"[{self.rows},{self.cols}]" + (".T" if self.transposed else "")
        return f"{self.batch}x{t}" if self.batch > 1 else t


def _view(desc, matrix, transposed, where):
    layout = desc[matrix.lower()]
    if layout["dtype"] not in DTYPES:
        raise InputError(f"{where}: {matrix} has type {layout['dtype']}")
    if layout["ld"] < layout["rows"]:
        raise InputError(f"{where}: {matrix} has ld {layout['ld']} < rows {layout['rows']}")
    batch = desc["batch_count"]
    return View(matrix, DTYPES[layout["dtype"]], batch, layout["batch_stride"] if batch > 1 else 0,
                layout["cols"], layout["rows"], layout["ld"], transposed)


def row_major_operands(desc, where="gemm"):
    """(lhs, rhs, out) of torch.matmul(lhs, rhs) = out for one plan descriptor."""
    lhs = _view(desc, "B", desc["transb"] == "CUBLAS_OP_T", where)
    rhs = _view(desc, "A", desc["transa"] == "CUBLAS_OP_T", where)
    out = _view(desc, "D", False, where)
    m, n, k = desc["m"], desc["n"], desc["k"]
    for v, want in ((lhs, (n, k)), (rhs, (k, m)), (out, (n, m))):
        if v.size()[-2:] != want:
            raise InputError(f"{where}: {v.matrix} is {v.text()}, not [{want[0]},{want[1]}] "
                             f"for m={m} n={n} k={k}")
    return lhs, rhs, out


def ops_of(desc):
    """The descriptor's transa, transb as "TN"."""
    return desc["transa"][-1] + desc["transb"][-1]


def layout_variant(desc, ops):
    """The same problem with transa, transb = ops: an operand whose transpose
    changes is stored the other way round, packed (ld its rows, batch stride
    rows x cols); the other operand, C, D and the rest stay as they are."""
    if ops not in LAYOUTS:
        raise ValueError(f"layout {ops!r} is none of {', '.join(LAYOUTS)}")
    m, n, k = desc["m"], desc["n"], desc["k"]
    d = dict(desc)
    for matrix, trans, op, (rows, cols) in (("a", "transa", ops[0], (m, k)),
                                            ("b", "transb", ops[1], (k, n))):
        if desc[trans][-1] == op:
            continue
        if op == "T":
            rows, cols = cols, rows
        layout = dict(desc[matrix], rows=rows, cols=cols, ld=rows)
        if desc["batch_count"] > 1:
            layout["batch_stride"] = rows * cols
        d[trans], d[matrix] = "CUBLAS_OP_" + op, layout
    return d


def group_key(desc):
    """Descriptors that differ only in their notes (which name instructions) are one gemm."""
    return json.dumps({k: v for k, v in desc.items() if k != "notes"}, sort_keys=True)


@dataclasses.dataclass
class Group:
    desc: dict
    thunks: list = dataclasses.field(default_factory=list)  # thunk names
    metas: list = dataclasses.field(default_factory=list)
    ours_ms: float = 0.0  # a step, over the thunks the profile has
    ours_calls: float = 0.0
    missing: int = 0  # thunks the profile lacks
    tuning: list = dataclasses.field(default_factory=list)  # gemm_tuning entries
    torch_us: float = None
    torch_out: str = "-"
    fused_op: str = "-"
    fused_us: float = None
    fused_why: str = ""
    torch_error: str = ""
    layout_us: dict = None  # LAYOUTS -> torch us of the plain product, own included
    layout_error: str = ""

    def best_layout(self):
        """(ops, us) of the fastest layout, or None when not swept."""
        if not self.layout_us or not self.torch_us:
            return None
        ops = min(LAYOUTS, key=lambda o: (self.layout_us[o], o != ops_of(self.desc)))
        return ops, self.layout_us[ops]

    def layout_ratio(self):
        """This layout's torch us over the best layout's."""
        best = self.best_layout()
        return self.torch_us / best[1] if best else None

    @property
    def flop(self):
        d = self.desc
        return 2.0 * d["m"] * d["n"] * d["k"] * d["batch_count"]

    @property
    def ours_us(self):
        return self.ours_ms * 1000 / self.ours_calls if self.ours_calls else None

    def label(self):
        d = self.desc
        batch = f"x{d['batch_count']}" if d["batch_count"] > 1 else ""
        ops = d["transa"][-1] + d["transb"][-1]
        epilogue = d["epilogue"].removeprefix("CUBLASLT_EPILOGUE_")
        return f"{d['m']}x{d['n']}x{d['k']}{batch} {ops} {epilogue}"

    def types(self):
        d = self.desc
        c = f"+{DTYPES.get(d['c']['dtype'], '?')} C" if d["beta"] != 0 else ""
        return (f"{DTYPES.get(d['a']['dtype'], '?')},{DTYPES.get(d['b']['dtype'], '?')}"
                f"{c}->{DTYPES.get(d['d']['dtype'], '?')}")

    def where(self):
        """The frontend scopes, layer numbers folded: "h.*.mlp.c_fc"."""
        return ",".join(sorted({re.sub(r"(^|\.)\d+(?=\.)", r"\1*", m) for m in self.metas if m}))


def load_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"cannot read the {what} {path}: {e.strerror}")
    except ValueError as e:
        raise InputError(f"the {what} {path} is not JSON: {e}")


def build_groups(plan, profile, entry):
    """The entry's gemm groups joined to the profile, and the fallback kernels' ms a step."""
    entries = {e.get("name"): e for e in plan.get("entries", [])}
    if entry not in entries:
        raise InputError(f"the plan has no entry {entry} (entries: {', '.join(map(str, entries))})")
    if profile.get("format") != "gptc-profile-1":
        raise InputError(f"the profile's format is {profile.get('format')!r}, not gptc-profile-1")
    rows = {}
    for i, r in enumerate(profile.get("rows", [])):
        for key in ("entry", "kind", "name", "ms_per_step", "calls_per_step"):
            if key not in r:
                raise InputError(f"profile row {i} has no '{key}'")
        if r["entry"] == entry:
            rows[(r["kind"], r["name"])] = r
    tuning = {}
    for t in profile.get("gemm_tuning", []):
        for thunk in t.get("thunks", []):
            tuning[thunk] = t

    groups, fallback, other = {}, set(), set()
    for i, t in enumerate(entries[entry]["thunks"]):
        if t["kind"] == "kernel":
            (fallback if t.get("fallback") else other).add(t["name"])
        if t["kind"] != "gemm":
            continue
        desc = t["descriptor"]
        row_major_operands(desc, f"entry {entry} thunk {i} ({t['name']})")
        g = groups.setdefault(group_key(desc), Group(desc))
        g.thunks.append(t["name"])
        g.metas.append(t.get("meta", ""))
        r = rows.get(("gemm", t["name"]))
        if r is None:
            g.missing += 1
        else:
            g.ours_ms += r["ms_per_step"]
            g.ours_calls += r["calls_per_step"]
        choice = tuning.get(f"{entry}/{t['name']}")
        if choice is not None and choice not in g.tuning:
            g.tuning.append(choice)
    if not groups:
        raise InputError(f"entry {entry} of the plan has no gemm")
    if all(g.missing == len(g.thunks) for g in groups.values()):
        raise InputError(f"the profile has no row for any gemm of entry {entry}: "
                         "is it of another artifact, or of another entry?")
    # A kernel name shared with a kernel that always runs is not a fallback's
    # alone (Note [kernel deduplication]); such time stays out of this sum.
    fallback_ms = sum(rows[("kernel", n)]["ms_per_step"] for n in fallback - other
                      if ("kernel", n) in rows)
    planned = {name for g in groups.values() for name in g.thunks}
    unknown = sorted(n for kind, n in rows if kind == "gemm" and n not in planned)
    return list(groups.values()), fallback_ms, unknown


# --- torch -------------------------------------------------------------------


class TorchTimer:
    """Times groups through torch on the GPU; torch is imported here alone."""

    def __init__(self, min_ms, reps):
        try:
            import torch
        except ImportError:
            raise InputError("PyTorch is not installed (--dry-run gives our times alone)")
        if not torch.cuda.is_available():
            raise InputError("PyTorch sees no CUDA device (--dry-run gives our times alone)")
        self.torch = torch
        self.min_ms = min_ms
        self.reps = reps
        self.dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
        self.device = torch.cuda.get_device_name()

    def tensor(self, view):
        torch = self.torch
        storage = torch.randn(view.elements(), device="cuda").mul_(0.1).to(self.dtypes[view.dtype])
        return storage.as_strided(view.size(), view.stride())

    def time_us(self, fn):
        """Microseconds a call, over at least --reps calls and --min-ms."""
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            fn()
        end.record()
        end.synchronize()
        guess_ms = max(start.elapsed_time(end) / 3, 1e-4)
        reps = min(max(self.reps, math.ceil(self.min_ms / guess_ms)), 100000)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000 / reps

    def precision(self, d):
        """Our descriptors accumulate in f32 (TF32 inputs only under
        FAST_TF32): torch may not reduce in bf16 or f16 where we do not."""
        matmul = self.torch.backends.cuda.matmul
        matmul.allow_tf32 = d["compute_type"] == "CUBLAS_COMPUTE_32F_FAST_TF32"
        for flag in ("allow_bf16_reduced_precision_reduction",
                     "allow_fp16_reduced_precision_reduction"):
            try:
                setattr(matmul, flag, False)
            except (AssertionError, AttributeError):  # a torch without the choice
                pass

    def plain(self, lhs_v, lhs, rhs, out_v, out=None):
        """(call, "torch out") of the plain lhs @ rhs, written as D's type where
        this torch can; out, D's view as a tensor, is made when None."""
        torch = self.torch
        if out_v.dtype == lhs_v.dtype:
            out = self.tensor(out_v) if out is None else out
            if out.is_contiguous():
                return (lambda: torch.matmul(lhs, rhs, out=out)), out_v.dtype
            return (lambda: torch.matmul(lhs, rhs)), out_v.dtype
        out_dtype = self.dtypes[out_v.dtype]
        mm = torch.mm if lhs_v.batch == 1 else torch.bmm
        call = lambda: mm(lhs, rhs, out_dtype=out_dtype)
        try:
            if call().dtype != out_dtype:
                raise TypeError("out_dtype ignored")
        except (TypeError, RuntimeError):
            # This torch cannot write another type than it reads: its own
            # type, which the column says.
            return (lambda: torch.matmul(lhs, rhs)), f"{lhs_v.dtype} (D {out_v.dtype})"
        return call, out_v.dtype

    def time_group(self, g):
        d = g.desc
        lhs_v, rhs_v, out_v = row_major_operands(d)
        if lhs_v.dtype != rhs_v.dtype:
            g.torch_out = f"- ({lhs_v.dtype} x {rhs_v.dtype})"
            return
        self.precision(d)
        lhs, rhs = self.tensor(lhs_v), self.tensor(rhs_v)
        out_dtype = self.dtypes[out_v.dtype]
        plain, g.torch_out = self.plain(lhs_v, lhs, rhs, out_v)
        g.torch_us = self.time_us(plain)
        fused = self.fused(g, lhs, rhs, out_v, out_dtype) if lhs_v.batch == 1 else None
        if fused is not None:
            try:
                fused[1]()
                g.fused_us = self.time_us(fused[1])
                g.fused_op = fused[0]
            except Exception as e:  # optional: any refusal leaves the column '-'
                g.fused_why = (str(e).splitlines() or [type(e).__name__])[0][:200]

    def time_layouts(self, g):
        """The group's plain product with the other three transa/transb (after
        time_group: its own is g.torch_us)."""
        if not g.torch_us:
            return
        d = g.desc
        own = ops_of(d)
        self.precision(d)
        tensors = {}  # a view's tensor, made once: each operand has two views

        def tensor(v):
            if v not in tensors:
                tensors[v] = self.tensor(v)
            return tensors[v]

        us = {own: g.torch_us}
        out = None
        for ops in LAYOUTS:
            if ops == own:
                continue
            lhs_v, rhs_v, out_v = row_major_operands(layout_variant(d, ops))
            if out is None and out_v.dtype == lhs_v.dtype:
                out = self.tensor(out_v)  # D as the group's: one for all
            call, _ = self.plain(lhs_v, tensor(lhs_v), tensor(rhs_v), out_v, out)
            us[ops] = self.time_us(call)
        g.layout_us = {ops: us[ops] for ops in LAYOUTS}

    def fused(self, g, lhs, rhs, out_v, out_dtype):
        """(name, call) of torch's nearest fused op for the epilogue, or None."""
        torch = self.torch
        d = g.desc
        epilogue = d["epilogue"].removeprefix("CUBLASLT_EPILOGUE_")
        mixed = out_dtype != lhs.dtype
        extra = {"out_dtype": out_dtype} if mixed else {}
        # The bias runs along cuBLASLt's m, the row-major last dim.
        def make_bias():
            v = View("bias", DTYPES[d["bias_dtype"]], 1, 0, 1, d["m"], d["m"], False)
            return self.tensor(v).reshape(d["m"])

        if epilogue == "BIAS" and d["beta"] == 0:
            bias = make_bias()
            return "addmm", lambda: torch.addmm(bias, lhs, rhs, **extra)
        if epilogue == "DEFAULT" and d["beta"] != 0:
            c = self.tensor(_view(d, "C", False, "C"))
            return "addmm(C)", lambda: torch.addmm(c, lhs, rhs, beta=d["beta"], **extra)
        if epilogue in ("GELU_BIAS", "GELU_AUX_BIAS") and d["beta"] == 0 and not mixed:
            if not hasattr(torch, "_addmm_activation"):
                return None
            bias = make_bias()
            # No aux written: torch has no op that keeps the pre-activation.
            return "addmm+gelu", lambda: torch._addmm_activation(bias, lhs, rhs, use_gelu=True)
        return None


# --- the table -----------------------------------------------------------------


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def tflops(g, us):
    return g.flop / us / 1e6 if us else None


def fmt_tflops(g, us):
    t = tflops(g, us)
    return fmt(t, ".0f" if t is not None and t >= 100 else ".1f")


def summarize(groups, fallback_ms, args):
    ours_ms = sum(g.ours_ms for g in groups)
    timed = [g for g in groups if g.torch_us and g.ours_us]
    torch_ms = (sum(g.torch_us * len(g.thunks) for g in groups if g.torch_us) / 1000
                if timed else None)
    worst = max(timed, key=lambda g: g.ours_us / g.torch_us, default=None)
    worst_ratio = worst.ours_us / worst.torch_us if worst else None
    above = [g for g in timed if g.ours_us / g.torch_us > args.max_ratio]
    untimed = [g for g in groups if not g.torch_us]
    why = []
    if ours_ms > args.limit_ms:
        why.append(f"over {args.limit_ms} ms")
    if above:
        why.append(f"{len(above)} group{'s' if len(above) > 1 else ''} above {args.max_ratio}")
    if not args.dry_run and untimed:
        why.append(f"{len(untimed)} not timed through torch")
    ok = not why
    line = (f"gemm table: {'PASS' if ok else 'FAIL'} gemms {ours_ms:.2f} ms/step "
            f"(limit {args.limit_ms})")
    if args.dry_run:
        line += "; torch.matmul not timed (--dry-run)"
    else:
        line += f" vs torch.matmul {fmt(torch_ms, '.2f')} ms"
        if worst:
            line += f"; worst ratio {worst_ratio:.2f} on {worst.label()} ({worst.where()})"
    if fallback_ms > 0:
        line += f"; + {fallback_ms:.2f} ms of epilogue fallback kernels"
    if why:
        line += f" [{'; '.join(why)}]"
    return {"pass": ok, "ours_ms": ours_ms, "torch_ms": torch_ms, "fallback_kernel_ms": fallback_ms,
            "worst_ratio": worst_ratio, "worst": worst.label() if worst else None,
            "gemms": sum(len(g.thunks) for g in groups), "groups": len(groups), "line": line}


def layouts_timed(args):
    return not (args.dry_run or args.no_layouts)


def layout_summary(groups, args):
    """The line before the verdict: the groups another operand layout would
    make more than LAYOUT_GAIN faster. The verdict does not read it."""
    if not layouts_timed(args):
        why = "--dry-run" if args.dry_run else "--no-layouts"
        return {"swept": 0, "gains": None, "line": f"layouts: not timed ({why})"}
    swept = [g for g in groups if g.best_layout()]
    gains = sorted((g for g in swept if g.layout_ratio() > LAYOUT_GAIN),
                   key=lambda g: -g.layout_ratio())
    rows = [{"label": g.label(), "where": g.where(), "own": ops_of(g.desc),
             "best": g.best_layout()[0], "ratio": g.layout_ratio()} for g in gains]
    unswept = len(groups) - len(swept)
    line = (f"layouts: {len(gains)} of {len(groups)} groups would gain "
            f">{(LAYOUT_GAIN - 1) * 100:.0f}% from another operand layout")
    if unswept:
        line += f" ({unswept} not swept)"
    if gains:
        line += ": " + ", ".join(
            f"{g.label().split()[0]} {r['own']}->{r['best']} +{(r['ratio'] - 1) * 100:.0f}%"
            for g, r in zip(gains, rows))
    return {"swept": len(swept), "gain_threshold": LAYOUT_GAIN, "gains": rows, "line": line}


def layout_text(g):
    """("TN 41.2", "1.07") for the table; "*" marks the group's own layout."""
    best = g.best_layout()
    if not best:
        return "-", "-"
    mark = "*" if best[0] == ops_of(g.desc) else ""
    return f"{best[0]}{mark} {best[1]:.1f}", f"{g.layout_ratio():.2f}"


def tuning_text(g):
    if not g.tuning:
        return "-", None
    paths = sorted({t.get("path", "?") for t in g.tuning})
    algos = sorted({str(t.get("algorithm", "?")) for t in g.tuning})
    us = sum(t.get("us", 0) for t in g.tuning) / len(g.tuning)
    return f"{'/'.join(paths)} #{'/'.join(algos)}", us


def table(groups):
    head = ["calls", "gemm (cuBLASLt m x n x k, ops, epilogue)", "types",
            "torch.matmul (row-major)", "ours us", "TF/s", "torch us", "TF/s", "ratio",
            "fused us", "best ops (*own) us", "own/best", "torch out", "tuned us", "path #algo",
            "where"]
    lines = []
    for g in groups:
        lhs, rhs, _ = row_major_operands(g.desc)
        ratio = g.ours_us / g.torch_us if g.ours_us and g.torch_us else None
        path, tuned = tuning_text(g)
        fused = f"{g.fused_op} {g.fused_us:.1f}" if g.fused_us else "-"
        calls = str(len(g.thunks)) + (f" ({g.missing} unprofiled)" if g.missing else "")
        best, own_best = layout_text(g)
        lines.append([calls, g.label(), g.types(), f"{lhs.text()} @ {rhs.text()}",
                      fmt(g.ours_us, ".1f"), fmt_tflops(g, g.ours_us), fmt(g.torch_us, ".1f"),
                      fmt_tflops(g, g.torch_us), fmt(ratio, ".2f"), fused, best, own_best,
                      g.torch_out, fmt(tuned, ".1f"), path, g.where()])
    widths = [max(len(r[i]) for r in [head] + lines) for i in range(len(head))]
    numeric = {0, 4, 5, 6, 7, 8, 10, 11, 13}
    out = []
    for r in [head] + lines:
        out.append("  ".join((c.rjust(w) if i in numeric else c.ljust(w))
                             for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    return "\n".join(out)


def to_json(groups, summary, layouts, args, profile, timer):
    rows = []
    for g in groups:
        lhs, rhs, out = row_major_operands(g.desc)
        path, tuned = tuning_text(g)
        rows.append({
            "label": g.label(), "types": g.types(), "where": g.where(), "count": len(g.thunks),
            "unprofiled": g.missing, "thunks": g.thunks,
            "row_major": f"{lhs.text()} @ {rhs.text()} -> {out.text()}",
            "ours_us": g.ours_us, "ours_tflops": tflops(g, g.ours_us),
            "torch_us": g.torch_us, "torch_tflops": tflops(g, g.torch_us), "torch_out": g.torch_out,
            "torch_error": g.torch_error or None,
            "ratio": g.ours_us / g.torch_us if g.ours_us and g.torch_us else None,
            "fused_op": g.fused_op if g.fused_us else None, "fused_us": g.fused_us,
            "fused_error": g.fused_why or None,
            "own_layout": ops_of(g.desc), "layouts_us": g.layout_us,
            "best_layout": g.best_layout()[0] if g.best_layout() else None,
            "best_layout_us": g.best_layout()[1] if g.best_layout() else None,
            "layout_ratio": g.layout_ratio(), "layout_error": g.layout_error or None,
            "tuned_us": tuned, "path": path,
            "descriptor": {k: v for k, v in g.desc.items() if k != "notes"}})
    return {"format": "gptc-gemm-table-1", "plan": args.plan, "profile": args.profile,
            "artifact": profile.get("artifact"), "entry": args.entry, "steps": profile.get("steps"),
            "device": timer.device if timer else None,
            "torch": timer.torch.__version__ if timer else None,
            "limit_ms": args.limit_ms, "max_ratio": args.max_ratio, "groups": rows,
            "totals": {k: v for k, v in summary.items() if k != "line"}, "layouts": layouts,
            "verdict": summary["line"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plan", required=True, help="gptc inspect ARTIFACT --plan")
    p.add_argument("--profile", required=True, help="gptrun ... --profile --profile-json FILE")
    p.add_argument("--entry", default="train_step")
    p.add_argument("--dry-run", action="store_true", help="no torch: our times alone")
    p.add_argument("--no-layouts", action="store_true",
                   help="time no other operand layouts (NN, NT, TN, TT) than each group's own")
    p.add_argument("--json", metavar="OUT", help="also write the table as JSON")
    p.add_argument("--limit-ms", type=float, default=17.5,
                   help="our gemms' ms a step at most (default 17.5: gpt2-124m, batch 16)")
    p.add_argument("--max-ratio", type=float, default=1.15,
                   help="ours / torch.matmul at most, for every group (default 1.15)")
    p.add_argument("--min-ms", type=float, default=20.0, help="torch: time at least this long")
    p.add_argument("--reps", type=int, default=50, help="torch: at least this many calls")
    args = p.parse_args(argv)
    try:
        plan = load_json(args.plan, "plan")
        profile = load_json(args.profile, "profile")
        groups, fallback_ms, unknown = build_groups(plan, profile, args.entry)
        if unknown:
            print(f"gemm-table: warning: {len(unknown)} gemm rows of the profile are not in the "
                  f"plan (first: {unknown[0]})", file=sys.stderr)
        timer = None if args.dry_run else TorchTimer(args.min_ms, args.reps)
    except InputError as e:
        print(f"gemm-table: {e}", file=sys.stderr)
        return 2
    groups.sort(key=lambda g: (-g.ours_ms, g.label()))
    started, layout_s = time.perf_counter(), 0.0
    for g in groups if timer else []:
        try:
            timer.time_group(g)
        except Exception as e:  # one group's failure (out of memory, say) leaves its row '-'
            g.torch_error = (str(e).splitlines() or [type(e).__name__])[0][:200]
            print(f"gemm-table: warning: torch on {g.label()}: {g.torch_error}", file=sys.stderr)
            continue
        if args.no_layouts:
            continue
        layout_start = time.perf_counter()
        try:
            timer.time_layouts(g)
        except Exception as e:  # the sweep is optional: its columns stay '-'
            g.layout_us = None
            g.layout_error = (str(e).splitlines() or [type(e).__name__])[0][:200]
            print(f"gemm-table: warning: layouts of {g.label()}: {g.layout_error}",
                  file=sys.stderr)
        layout_s += time.perf_counter() - layout_start
    torch_s = time.perf_counter() - started if timer else None
    summary = summarize(groups, fallback_ms, args)
    layouts = dict(layout_summary(groups, args), seconds=layout_s if layouts_timed(args) else None)
    print(f"{args.entry} of {profile.get('artifact', args.profile)}: {summary['gemms']} gemms in "
          f"{summary['groups']} distinct descriptors; profile of {profile.get('steps')} steps"
          + (f"; torch {timer.torch.__version__} on {timer.device}" if timer else ""))
    print(table(groups))
    untimed = "" if timer else " (torch not timed)"
    print(f"total a step: ours {summary['ours_ms']:.3f} ms, torch.matmul "
          f"{fmt(summary['torch_ms'], '.3f')} ms{untimed}; epilogue fallback kernels "
          f"{fallback_ms:.3f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(to_json(groups, summary, layouts, args, profile, timer),
                           torch_seconds=torch_s), f, indent=1)
            f.write("\n")
    print(layouts["line"])
    print(summary["line"])
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
