// Browser side of `gptc report` / `gptrun --report`: renders the gptc-report-1
// JSON embedded in the page. Everything is drawn as markup strings assigned
// through innerHTML, so the page needs no namespace constants, no network and
// no library, and still opens from a plain file.
//
// The data (the text of <script id="gptc-data" type="application/json">):
// {
//  "format": "gptc-report-1",
//  "title": "gpt2-124m · batch 16 · seq 1024",
//  "generated_by": "gptc report" | "gptrun --report",
//  "notes": ["warnings shown at the top"],
//  "artifact": null | {
//    "path": "gpt2-124m.gptx",
//    "model": {"name", "layers", "heads", "width", "vocab", "context", "parameters"},
//    "flags": {"batch", "seq", "grad_accum", "precision", "remat", "world_size"},
//    "gpu": {"name", "peak_tflops", "hbm_gbps"},          // the rooflines' GPU
//    "has_plan": bool,          // false (--no-codegen): thunks, groups, arena empty
//    "note": "why there is no plan",
//    "profile": null | {"steps", "device", "emulated"},   // emulated: stand-in times
//    "h100_model": null | {"step_us", "tokens_per_second", "roofline_us"},  // the H100 model's
//    step "thunks": [ {"entry", "i", "name" (the instruction), "kernel" (its PTX entry),
//                 "kind": "kernel"|"gemm"|"copy"|"constant"|"all_reduce",
//                 "fusion_kind", "group", "layer", "phase", "meta",
//                 "flops", "bytes", "roofline_us", "compute_bound",
//                 "measured_us": null | number,
//                 "model_us": null | number} ],           // schedule order; the H100 model's
//    "groups": [ {"name", "kernels", "gemms", "recomputed", "roofline_us", "measured_us"} ],
//    "arena": null | {"entry", "size", "categories": [names],
//                     "live": [[bytes per category] per position],
//                     "positions": [thunk name per position],
//                     "peak": {"position", "bytes",
//                              "buffers": [ {"name", "shape", "category", "bytes", "source"} ]}},
//    "remat": {"plan", "layers": [ {"layer", "policy", "kernels", "recomputed", "recomputed_names",
//                                    "kept_bytes", "kept": [ {"name", "shape", "bytes"} ]} ]},
//    "scaling": null | {        // the train step on N GPUs (gptc simulate's model and defaults)
//      "times": "H100 model" | "measured (p.json, 10 steps on NVIDIA H100)",
//      "tokens",                // one GPU's micro-batch
//      "one_gpu": {"step_ms", "forward_ms", "backward_ms", "optimizer_ms"},
//      "link": {"gpus_per_node", "nvlink_bus_gbs", "network_bus_gbs", "base_latency_us",
//               "nvlink_step_us", "network_step_us", "tree_nvlink_step_us",
//               "tree_network_step_us", "tree_bandwidth_share"},
//      "tables": [ {"zero": 0 | 1, "config", "bucket_bytes", "buckets",
//                   "rows": [ {"gpus", "step_ms", "compute_ms", "exposed_ms", "comm_ms",
//                              "tokens_per_second", "efficiency", "buckets"} ]} ]},
//    "scaling_note": "why scaling is null"
//  },
//  "runs": [ {"name", "steps": [ {"step", "loss", "lr", "norm", "ms", "tok_s", "mfu"} ],
//             "val": [ {"step", "val_loss"} ],
//             "hellaswag": [ {"step", "acc", "acc_norm", "examples"} ]} ]
// }
// Any field may be null or missing; a view without its data says so instead
// of failing. Non-finite numbers arrive as null and are skipped, never drawn as 0.
//
// Test hooks: body[data-ready="1"], body[data-render-ms]; one rect.kbar[data-i]
// per thunk, rect.kroof overlays when measured; polyline.loss-line/.val-line
// [data-points]; circle.loss-pt/.val-pt; tr.krow[data-i]; #kernels-table;
// tr.srow (one per GPU count), polyline.scale-line[data-points] (ZeRO-0, ZeRO-1);
// .view-error inside a view that threw.
(function () {
'use strict';

// ---------------------------------------------------------------- helpers

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
// Every string from the data goes through here: kernel and buffer names are
// compiler-generated and may contain '<', '&' or quotes.
function esc(v) { return String(v == null ? '' : v).replace(/[&<>"']/g, (c) => ESC[c]); }
function isNum(v) { return typeof v === 'number' && Number.isFinite(v); }
// A list field that is missing, null or of the wrong type reads as empty.
function arr(v) { return Array.isArray(v) ? v : []; }
function cssKey(s) { return String(s || 'none').toLowerCase().replace(/[^a-z0-9]+/g, '-'); }
function px(v) { return Math.round(v * 10) / 10; }

const NF = {
  int: new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 }),
  f1: new Intl.NumberFormat('en-US', { minimumFractionDigits: 1, maximumFractionDigits: 1 }),
  f2: new Intl.NumberFormat('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 }),
  f3: new Intl.NumberFormat('en-US', { minimumFractionDigits: 3, maximumFractionDigits: 3 }),
};
function fmtNf(v, nf) { return isNum(v) ? nf.format(v) : '–'; }

// Three significant digits without switching to exponents for ordinary magnitudes.
function sig(v, digits = 3) {
  if (!isNum(v)) return '–';
  const a = Math.abs(v);
  if (a === 0) return '0';
  if (a >= 10 ** digits) return NF.int.format(v);
  if (a < 1e-3) return v.toExponential(digits - 1);
  const d = Math.min(6, Math.max(0, digits - 1 - Math.floor(Math.log10(a))));
  return v.toFixed(d);
}
function fmtUs(us) {
  if (!isNum(us)) return '–';
  const a = Math.abs(us);
  if (a < 1e3) return sig(us) + ' µs';
  if (a < 1e6) return sig(us / 1e3) + ' ms';
  return sig(us / 1e6) + ' s';
}
function fmtGflop(f) { return isNum(f) ? sig(f / 1e9) + ' GFLOP' : '–'; }
function fmtFlop(f) {
  if (!isNum(f)) return '–';
  for (const [d, u] of [[1e12, 'TFLOP'], [1e9, 'GFLOP'], [1e6, 'MFLOP'], [1e3, 'kFLOP']]) if (Math.abs(f) >= d) return sig(f / d) + ' ' + u;
  return sig(f) + ' FLOP';
}
function fmtMB(b) { return isNum(b) ? sig(b / 1e6) + ' MB' : '–'; }
const BIN_UNITS = [[2 ** 40, 'TiB'], [2 ** 30, 'GiB'], [2 ** 20, 'MiB'], [2 ** 10, 'KiB']];
function byteUnit(b) {
  for (const u of BIN_UNITS) if (Math.abs(b) >= u[0]) return u;
  return [1, 'B'];
}
function fmtBytes(b) {
  if (!isNum(b)) return '–';
  const [d, name] = byteUnit(b);
  return (d === 1 ? String(b) : sig(b / d)) + ' ' + name;
}
function fmtCount(n) {
  if (!isNum(n)) return '–';
  const a = Math.abs(n);
  if (a >= 1e9) return sig(n / 1e9) + 'B';
  if (a >= 1e6) return sig(n / 1e6) + 'M';
  if (a >= 1e4) return sig(n / 1e3) + 'k';
  return sig(n);
}
function fmtRatio(r) { return isNum(r) ? r.toFixed(2) + '×' : '–'; }
// Axis labels: short, no trailing zeros, exponents only for tiny values (learning rates).
function fmtTick(v) {
  if (v === 0) return '0';
  const a = Math.abs(v);
  const trim = (x) => String(parseFloat(x.toPrecision(4)));
  if (a >= 1e6) return trim(v / 1e6) + 'M';
  if (a >= 1e4) return trim(v / 1e3) + 'k';
  if (a < 1e-3) return v.toExponential(2).replace(/\.?0+e/, 'e').replace('e-', 'e−');
  return trim(v);
}

// ------------------------------------------------------------------ scales

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const n = raw / mag;
  return (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * mag;
}
// Rounds away float noise such as 0.30000000000000004 so labels stay short.
function snap(v, step) {
  const d = Math.max(0, 1 - Math.floor(Math.log10(step)));
  return +v.toFixed(Math.min(d, 15));
}
// Widens [lo, hi] to whole steps so both ends of the axis carry a label.
function niceScale(lo, hi, count) {
  if (!(hi > lo)) { const pad = Math.abs(lo) * 0.1 || 1; lo -= pad; hi += pad; }
  const step = niceStep(hi - lo, count);
  const a = Math.floor(lo / step) * step, b = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let i = 0; a + i * step <= b + step * 1e-9; i++) ticks.push(snap(a + i * step, step));
  return { lo: a, hi: b, ticks, fmt: fmtTick };
}
// Ticks inside a fixed domain (the timeline's axis must end where the step ends).
function ticksWithin(lo, hi, count) {
  const step = niceStep(hi - lo || 1, count);
  const out = [];
  for (let i = Math.ceil(lo / step); i * step <= hi + step * 1e-9; i++) out.push(snap(i * step, step));
  return out;
}
// Byte axes count in whole MiB / GiB rather than in powers of ten of bytes.
function byteScale(hi, count) {
  const [d, name] = byteUnit(hi);
  const s = niceScale(0, hi / d, count);
  return { lo: 0, hi: s.hi * d, ticks: s.ticks.map((v) => v * d),
           fmt: (v) => (v === 0 ? '0' : String(+(v / d).toPrecision(4)) + ' ' + name) };
}
// Log axes tick at powers of ten; a range inside one decade falls back to 1-2-5
// and then to every integer multiple so the axis is never bare.
function logScale(lo, hi) {
  let l0 = Math.log10(lo), l1 = Math.log10(hi);
  if (!(l1 > l0)) { l0 -= 0.5; l1 += 0.5; }
  const pad = (l1 - l0) * 0.04;
  l0 -= pad; l1 += pad;
  let ticks = [];
  for (const mults of [[1], [1, 2, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]]) {
    ticks = [];
    for (let e = Math.floor(l0); e <= Math.ceil(l1); e++) {
      for (const m of mults) {
        const v = m * 10 ** e, lv = Math.log10(v);
        if (lv >= l0 && lv <= l1) ticks.push(+v.toPrecision(6));
      }
    }
    if (ticks.length >= 3) break;
  }
  return { lo: 10 ** l0, hi: 10 ** l1, ticks, log: true, fmt: fmtTick };
}
function mapper(s, r0, r1) {
  if (s.log) {
    const a = Math.log10(s.lo), b = Math.log10(s.hi);
    return (v) => r0 + (Math.log10(v) - a) / (b - a) * (r1 - r0);
  }
  const span = s.hi - s.lo || 1;
  return (v) => r0 + (v - s.lo) / span * (r1 - r0);
}
// Grid, tick labels and axis titles for a plot box {l, t, r, b}.
function axesMarkup(box, xs, ys, X, Y, xLabel, yLabel) {
  const p = [];
  for (const v of ys.ticks) {
    const y = px(Y(v));
    p.push(`<line class="grid" x1="${box.l}" x2="${box.r}" y1="${y}" y2="${y}"/>`,
           `<text class="tick" x="${box.l - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${esc(ys.fmt(v))}</text>`);
  }
  for (const v of xs.ticks) {
    const x = px(X(v));
    p.push(`<line class="tickmark" x1="${x}" x2="${x}" y1="${box.b}" y2="${box.b + 4}"/>`,
           `<text class="tick" x="${x}" y="${box.b + 16}" text-anchor="middle">${esc(xs.fmt(v))}</text>`);
  }
  p.push(`<line class="axis" x1="${box.l}" x2="${box.l}" y1="${box.t}" y2="${box.b}"/>`,
         `<line class="axis" x1="${box.l}" x2="${box.r}" y1="${box.b}" y2="${box.b}"/>`);
  if (xLabel) p.push(`<text class="axis-label" x="${(box.l + box.r) / 2}" y="${box.b + 32}" text-anchor="middle">${esc(xLabel)}</text>`);
  if (yLabel) {
    const cy = (box.t + box.b) / 2;
    p.push(`<text class="axis-label" x="14" y="${cy}" text-anchor="middle" transform="rotate(-90 14 ${cy})">${esc(yLabel)}</text>`);
  }
  return p.join('');
}
// Largest index i with arr[i] <= v (arr ascending); -1 when v precedes everything.
function bisect(arr, v, key) {
  let lo = 0, hi = arr.length - 1, ans = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if ((key ? key(arr[mid]) : arr[mid]) <= v) { ans = mid; lo = mid + 1; } else hi = mid - 1;
  }
  return ans;
}

// ----------------------------------------------------------------- tooltip

const tip = document.createElement('div');
tip.className = 'tip';
tip.id = 'tip';
document.body.appendChild(tip);
function showTip(html, ev) {
  tip.innerHTML = html;
  tip.style.display = 'block';
  const w = tip.offsetWidth, h = tip.offsetHeight;
  let x = ev.clientX + 14, y = ev.clientY + 14;
  if (x + w > window.innerWidth - 8) x = Math.max(8, ev.clientX - w - 14);
  if (y + h > window.innerHeight - 8) y = Math.max(8, ev.clientY - h - 14);
  tip.style.left = x + 'px';
  tip.style.top = y + 'px';
}
function hideTip() { tip.style.display = 'none'; }
function tipTable(rows) {
  return '<table>' + rows.filter((r) => r).map((r) => `<tr><th>${esc(r[0])}</th><td>${r[1]}</td></tr>`).join('') + '</table>';
}

// ------------------------------------------------------ kinds and colours

// Kernel colours are shared by the timeline, the tables and the legends.
const KINDS = [
  ['gemm', 'GEMM'], ['attention', 'attention'], ['reduction', 'reduction'],
  ['elementwise', 'loop / elementwise'], ['memory', 'copy / gather / constant'],
  ['collective', 'all-reduce'], ['other', 'other'],
];
function kindClass(t) {
  const k = t.kind || '', f = String(t.fusion_kind || '').toLowerCase();
  if (k === 'gemm' || f === 'gemm' || f.includes('matmul')) return 'gemm';
  if (k === 'all_reduce') return 'collective';
  if (f.includes('attention')) return 'attention';
  if (f.includes('reduc') || f.includes('softmax') || f.includes('norm') || f === 'cross_entropy') return 'reduction';
  if (k === 'copy' || k === 'constant' || /gather|scatter|copy|transpose|slice|concat/.test(f)) return 'memory';
  // The fused AdamW update is one elementwise pass over every parameter.
  if (f === 'loop' || f.includes('elementwise') || f === 'optimizer' || f === 'input' || f === 'output') return 'elementwise';
  return 'other';
}
function kindText(t) { return (t.kind || '?') + (t.fusion_kind && t.fusion_kind !== t.kind ? ' · ' + t.fusion_kind : ''); }
function kindLegend(T) {
  const counts = {};
  for (const t of T) { const c = kindClass(t); counts[c] = (counts[c] || 0) + 1; }
  return '<div class="legend">' + KINDS.filter(([c]) => counts[c]).map(([c, label]) =>
    `<span class="lg"><span class="sw k-${c}"></span>${esc(label)} <span class="muted">${counts[c]}</span></span>`).join('') + '</div>';
}
function note(body, text, cls) { body.insertAdjacentHTML('beforeend', `<div class="note ${cls || ''}">${esc(text)}</div>`); }

// Charts size themselves to the page. Reading a width forces a layout, which
// costs as much as the whole kernels table, so every view first writes its
// markup, then all widths are read in one pass and the charts drawn.
const sizedCharts = [];
let currentBody = null;
function sized(host, draw) { sizedCharts.push({ host, draw, body: currentBody }); }
function drawSized() {
  const widths = sizedCharts.map((c) => c.host.clientWidth);
  sizedCharts.forEach((c, i) => guard(c.body, () => c.draw(widths[i])));
}
let resizeTimer = 0;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(drawSized, 150);
});

// ------------------------------------------------------------------ header

function renderHeader(body, ctx) {
  const D = ctx.D, A = ctx.A;
  const h = [`<h1>${esc(D.title || 'gptc report')}</h1>`];
  const sub = [];
  if (A) {
    const m = A.model || {}, f = A.flags || {};
    const mp = [m.name, isNum(m.layers) && m.layers + ' layers', isNum(m.heads) && m.heads + ' heads',
      isNum(m.width) && 'width ' + m.width, isNum(m.vocab) && 'vocab ' + m.vocab,
      isNum(m.context) && 'context ' + m.context, isNum(m.parameters) && fmtCount(m.parameters) + ' parameters'].filter(Boolean);
    const fp = [isNum(f.batch) && 'batch ' + f.batch, isNum(f.seq) && 'seq ' + f.seq,
      isNum(f.grad_accum) && 'grad accum ' + f.grad_accum, f.precision, f.remat && 'remat ' + f.remat,
      isNum(f.world_size) && 'world size ' + f.world_size].filter(Boolean);
    if (mp.length) sub.push(`<div class="summary"><span class="label">model</span>${esc(mp.join(' · '))}</div>`);
    if (fp.length) sub.push(`<div class="summary"><span class="label">flags</span>${esc(fp.join(' · '))}</div>`);
    const g = A.gpu;
    sub.push(`<div class="summary"><span class="label">rooflines</span>${g ? esc(`${g.name || '?'} · ${sig(g.peak_tflops)} TFLOP/s · ${sig(g.hbm_gbps)} GB/s`) : 'no GPU given'}</div>`);
    sub.push(`<div class="summary"><span class="label">artifact</span><code>${esc(A.path || '?')}</code></div>`);
  }
  sub.push(`<div class="summary"><span class="label">written by</span>${esc(D.generated_by || '?')}</div>`);
  h.push(`<div class="summaries">${sub.join('')}</div>`);

  // How to read every time on the page depends on this, so it sits up top.
  let timing;
  if (!A) timing = ['info', 'No artifact given: only training logs are shown.'];
  else if (!A.has_plan) timing = ['info', 'No kernel plan in this artifact' + (A.note ? ': ' + A.note : '') + '.'];
  else if (A.profile && A.profile.emulated) {
    timing = ['warn', `Measured times come from the emulator (${A.profile.device || 'emu'}, ${A.profile.steps || '?'} steps): they are stand-ins, not GPU timings. Compare shapes, not absolute numbers.`];
  } else if (A.profile) timing = ['ok', `Measured on ${A.profile.device || 'GPU'} over ${A.profile.steps || '?'} steps; roofline times alongside.`];
  else timing = ['info', 'Roofline estimates only: no profile was given, so no times are measured.'];
  h.push(`<div class="badge badge-${timing[0]}" id="timing-mode">${esc(timing[1])}</div>`);

  const notes = arr(D.notes).filter((n) => n != null && String(n) !== '');
  if (notes.length) h.push(`<div class="notes" id="notes"><b>Notes</b><ul>${notes.map((n) => `<li>${esc(n)}</li>`).join('')}</ul></div>`);

  if (A && ctx.thunks.length) {
    const T = ctx.thunks;
    let roof = 0, meas = 0, flops = 0, bytes = 0, gemms = 0;
    for (const t of T) {
      if (isNum(t.roofline_us)) roof += t.roofline_us;
      if (isNum(t.measured_us)) meas += t.measured_us;
      if (isNum(t.flops)) flops += t.flops;
      if (isNum(t.bytes)) bytes += t.bytes;
      if (kindClass(t) === 'gemm') gemms++;
    }
    const tiles = [['launches', NF.int.format(T.length), `${gemms} GEMMs`],
      ['roofline step', fmtUs(roof), 'sum of per-launch bounds'],
      ctx.measured ? ['measured step', fmtUs(meas), fmtRatio(meas / roof) + ' of roofline'] : null,
      A.h100_model && isNum(A.h100_model.step_us) ? ['H100 model step', fmtUs(A.h100_model.step_us),
        `${NF.int.format(A.h100_model.tokens_per_second || 0)} tok/s · ${fmtRatio(A.h100_model.step_us / roof)} of roofline`] : null,
      ['work', fmtFlop(flops), fmtBytes(bytes) + ' moved'],
      A.arena ? ['arena', fmtBytes(A.arena.size), A.arena.peak ? 'peak ' + fmtBytes(A.arena.peak.bytes) : ''] : null];
    h.push('<div class="tiles">' + tiles.filter(Boolean).map(([k, v, s]) =>
      `<div class="tile"><div class="tile-k">${esc(k)}</div><div class="tile-v">${esc(v)}</div><div class="tile-s">${esc(s)}</div></div>`).join('') + '</div>');
  }
  h.push('<nav class="jump">' + ctx.sections.map(([id, t]) => `<button data-jump="v-${id}">${esc(t)}</button>`).join('') + '</nav>');
  body.innerHTML = h.join('');
  body.querySelector('.jump').addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-jump]');
    const target = b && document.getElementById(b.dataset.jump);
    if (target) target.scrollIntoView({ behavior: 'smooth', block: 'start' });
  });
}

// ---------------------------------------------------------------- timeline

function thunkTip(ctx, t, i) {
  const roof = t.roofline_us, meas = t.measured_us;
  return `<div class="tip-title"><span class="sw k-${kindClass(t)}"></span>${esc(t.name)}</div>` + tipTable([
    ['#', String(i)], ['kind', esc(kindText(t))], ['group', esc(t.group)], ['phase', esc(t.phase)],
    ctx.entries > 1 ? ['entry', esc(t.entry)] : null,
    t.kernel && t.kernel !== t.name ? ['kernel', esc(t.kernel)] : null, t.meta ? ['source', esc(t.meta)] : null,
    ['flops', esc(fmtFlop(t.flops))], ['bytes', esc(fmtBytes(t.bytes))],
    ['roofline', esc(fmtUs(roof)) + (t.compute_bound === true ? ' <span class="muted">compute-bound</span>' : t.compute_bound === false ? ' <span class="muted">memory-bound</span>' : '')],
    ['measured', esc(fmtUs(meas))],
    ['ratio', esc(fmtRatio(isNum(meas) && roof > 0 ? meas / roof : NaN))],
  ]);
}

function groupTip(name, g, spanUs) {
  return `<div class="tip-title">${esc(name)}</div>` + tipTable([
    ['launches', String(g.count)], ['GEMMs', String(g.gemms)],
    ['roofline', esc(fmtUs(g.roof))], ['measured', esc(g.measuredCount ? fmtUs(g.meas) : '–')],
    ['ratio', esc(fmtRatio(g.measuredCount && g.roof > 0 ? g.meas / g.roof : NaN))],
    ['this span', esc(fmtUs(spanUs))],
  ]);
}

function renderTimeline(body, ctx) {
  const A = ctx.A, T = ctx.thunks;
  if (!A) return note(body, 'No artifact given, so there is no schedule to draw.');
  if (!T.length) return note(body, A.has_plan === false ? 'No kernel plan: ' + (A.note || 'compiled without codegen') + '.' : 'The artifact lists no launched kernels.');
  const n = T.length;
  const start = new Float64Array(n + 1);
  for (let i = 0; i < n; i++) start[i + 1] = start[i] + Math.max(0, ctx.time(T[i]));
  const total = start[n];
  const segments = (key) => {
    const out = [];
    for (let i = 0; i < n; i++) {
      const k = T[i][key] || '', last = out[out.length - 1];
      if (last && last.key === k) last.end = i + 1; else out.push({ key: k, begin: i, end: i + 1 });
    }
    return out;
  };
  const gsegs = segments('group'), psegs = segments('phase');
  const phaseTotals = ctx.totalsBy('phase');

  body.innerHTML = `<div class="toolbar">
      <span class="btn-group"><button data-zoom="out" title="zoom out">−</button><button data-zoom="fit">fit</button><button data-zoom="in" title="zoom in">+</button></span>
      <span class="zoom-label muted"></span>
      <span class="muted">${n} launches in schedule order · step ${esc(fmtUs(total))} · bar width = ${ctx.measured ? (A.profile.emulated ? 'emulated measured time' : 'measured time') + '; the dark inner bar is the roofline time' : 'roofline time'}</span>
    </div>${kindLegend(T)}<div class="tl-scroll" id="timeline"></div>`;
  const scroll = body.querySelector('.tl-scroll');
  const label = body.querySelector('.zoom-label');
  let zoom = 1, g = null, fitW = 800;

  function draw() {
    const W = Math.round(fitW * zoom), pad = 12, plotW = W - 2 * pad;
    const k = total > 0 ? plotW / total : 0;
    const yP = 2, hP = 16, yG = 21, hG = 22, yB = 48, hB = 44, H = yB + hB + 28;
    const X = (us) => px(pad + us * k);
    const p = [`<svg class="timeline" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">`];
    // Labels only where they fit; the band's tooltip carries the name anyway.
    const band = (segs, cls, attr, y, h) => segs.forEach((s, j) => {
      const x = X(start[s.begin]), w = Math.max(1, px((start[s.end] - start[s.begin]) * k));
      p.push(`<rect class="${cls} ${cls}-${cssKey(s.key)}${j % 2 ? ' alt' : ''}" data-${attr}="${j}" x="${x}" y="${y}" width="${w}" height="${h}"/>`);
      if (w > s.key.length * 6.6 + 8) p.push(`<text class="band-label" x="${px(x + 4)}" y="${y + h / 2 + 1}" dominant-baseline="middle">${esc(s.key)}</text>`);
    });
    band(psegs, 'pband', 'p', yP, hP);
    band(gsegs, 'gband', 'g', yG, hG);
    for (let i = 0; i < n; i++) {
      const w = Math.max(0.8, (start[i + 1] - start[i]) * k);
      p.push(`<rect class="kbar k-${ctx.kcls[i]}" data-i="${i}" x="${X(start[i])}" y="${yB}" width="${px(w) || 0.8}" height="${hB}"/>`);
    }
    if (ctx.measured) {
      const yr = yB + hB * 0.3, hr = hB * 0.4;
      for (let i = 0; i < n; i++) {
        const r = T[i].roofline_us;
        if (isNum(r) && r > 0) p.push(`<rect class="kroof" x="${X(start[i])}" y="${yr}" width="${Math.max(0.5, px(r * k))}" height="${hr}"/>`);
      }
    }
    p.push(`<rect class="kcursor" x="0" y="${yB - 3}" width="0" height="${hB + 6}"/>`);
    const yA = yB + hB + 2;
    p.push(`<line class="axis" x1="${pad}" x2="${W - pad}" y1="${yA}" y2="${yA}"/>`);
    for (const v of ticksWithin(0, total, plotW / 100)) {
      const x = X(v);
      // Ticks at the very ends are anchored inward so their labels are not clipped.
      const anchor = x < pad + 20 ? 'start' : x > W - pad - 30 ? 'end' : 'middle';
      p.push(`<line class="tickmark" x1="${x}" x2="${x}" y1="${yA}" y2="${yA + 4}"/><text class="tick" x="${x}" y="${yA + 16}" text-anchor="${anchor}">${esc(fmtUs(v))}</text>`);
    }
    p.push('</svg>');
    scroll.innerHTML = p.join('');
    label.textContent = zoom === 1 ? 'fit to width' : zoom + '×';
    g = { pad, k, yB, hB, cursor: scroll.querySelector('.kcursor') };
  }

  function setZoom(z) {
    const centre = (scroll.scrollLeft + scroll.clientWidth / 2) / Math.max(1, scroll.scrollWidth);
    zoom = Math.min(128, Math.max(1, z));
    fitW = Math.max(400, scroll.clientWidth - 2);
    draw();
    scroll.scrollLeft = centre * scroll.scrollWidth - scroll.clientWidth / 2;
  }
  body.querySelector('.btn-group').addEventListener('click', (ev) => {
    const b = ev.target.closest('button');
    if (!b) return;
    setZoom(b.dataset.zoom === 'in' ? zoom * 2 : b.dataset.zoom === 'out' ? zoom / 2 : 1);
  });

  // Bars are often narrower than a pixel, so a hover on the bar row picks the
  // launch under the pointer's time rather than relying on the hit target.
  function barAt(ev) {
    const hit = ev.target.closest && ev.target.closest('rect.kbar');
    if (hit) return +hit.dataset.i;
    const svg = scroll.querySelector('svg');
    const r = svg.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    if (y < g.yB - 3 || y > g.yB + g.hB + 3 || g.k <= 0) return -1;
    const t = (x - g.pad) / g.k;
    if (t < 0 || t > total) return -1;
    return Math.min(n - 1, Math.max(0, bisect(start, t)));
  }
  scroll.addEventListener('mousemove', (ev) => {
    if (!g) return;
    const i = barAt(ev);
    if (i >= 0) {
      g.cursor.setAttribute('x', px(g.pad + start[i] * g.k - 1));
      g.cursor.setAttribute('width', Math.max(2, px((start[i + 1] - start[i]) * g.k + 2)));
      return showTip(thunkTip(ctx, T[i], i), ev);
    }
    g.cursor.setAttribute('width', 0);
    const gb = ev.target.closest('rect.gband');
    if (gb) {
      const s = gsegs[+gb.dataset.g];
      return showTip(groupTip(s.key || '(no group)', ctx.groupTotals.get(s.key), start[s.end] - start[s.begin]), ev);
    }
    const pb = ev.target.closest('rect.pband');
    if (pb) {
      const s = psegs[+pb.dataset.p];
      return showTip(groupTip('phase: ' + (s.key || '?'), phaseTotals.get(s.key), start[s.end] - start[s.begin]), ev);
    }
    hideTip();
  });
  scroll.addEventListener('mouseleave', () => { hideTip(); if (g) g.cursor.setAttribute('width', 0); });
  scroll.addEventListener('click', (ev) => {
    const i = barAt(ev);
    if (i >= 0 && ctx.focusKernel) ctx.focusKernel(i);
  });
  sized(scroll, (w) => { fitW = Math.max(400, w - 2); draw(); });
}

// ----------------------------------------------------------------- kernels

function renderKernels(body, ctx) {
  const A = ctx.A, T = ctx.thunks;
  if (!A) return note(body, 'No artifact given.');
  if (!T.length) return note(body, A.has_plan === false ? 'No kernels: ' + (A.note || 'compiled without codegen') + '.' : 'The artifact lists no launched kernels.');
  const rows = T.map((t, i) => {
    const roof = isNum(t.roofline_us) ? t.roofline_us : null, meas = isNum(t.measured_us) ? t.measured_us : null;
    return {
      i, name: String(t.name || ''), kind: kindText(t), kc: ctx.kcls[i], group: String(t.group || ''), phase: String(t.phase || ''),
      roof, meas, ratio: meas != null && roof > 0 ? meas / roof : null, model: isNum(t.model_us) ? t.model_us : null,
      gflop: isNum(t.flops) ? t.flops / 1e9 : null, mb: isNum(t.bytes) ? t.bytes / 1e6 : null,
      hint: [t.kernel, t.meta].filter(Boolean).join(' · '),
      hay: [i, t.name, kindText(t), t.group, t.phase, t.kernel, t.meta].join(' ').toLowerCase(),
    };
  });
  const cols = [['i', '#', 1], ['name', 'name', 0], ['kind', 'kind', 0], ['group', 'group', 0], ['phase', 'phase', 0],
    ['roof', 'roofline µs', 1], ['model', 'H100 model µs', 1], ['meas', 'measured µs', 1], ['ratio', 'ratio', 1],
    ['gflop', 'GFLOP', 1], ['mb', 'MB', 1]];
  const numeric = new Set(cols.filter((c) => c[2]).map((c) => c[0]));
  const collator = new Intl.Collator('en', { numeric: true });
  let sortKey = 'i', dir = 1, query = '';

  body.innerHTML = `<div class="toolbar">
      <input type="search" id="kernel-filter" placeholder="filter: name, kind, group, phase, source…" size="36">
      <button id="sort-schedule">schedule order</button>
      ${ctx.measured ? '<button id="sort-ratio">furthest above roofline</button>' : ''}
      <span class="muted" id="kernel-count"></span>
    </div>
    <div class="table-scroll"><table class="data" id="kernels-table">
      <thead><tr>${cols.map(([k, l, isN]) => `<th data-key="${k}" class="${isN ? 'num' : ''}">${esc(l)}<span class="arrow"></span></th>`).join('')}</tr></thead>
      <tbody></tbody><tfoot></tfoot></table></div>`;
  const tbody = body.querySelector('tbody'), tfoot = body.querySelector('tfoot');
  const count = body.querySelector('#kernel-count');
  const ratioCls = (r) => (r == null ? '' : r >= 3 ? ' bad' : r >= 1.5 ? ' warn' : '');

  function render() {
    const terms = query.toLowerCase().split(/\s+/).filter(Boolean);
    let list = terms.length ? rows.filter((r) => terms.every((q) => r.hay.includes(q))) : rows.slice();
    if (numeric.has(sortKey)) {
      // Missing values sink to the bottom whichever way the column is sorted.
      list.sort((a, b) => {
        const x = a[sortKey], y = b[sortKey];
        if (x == null || y == null) return x == null ? (y == null ? a.i - b.i : 1) : -1;
        return (x - y) * dir || a.i - b.i;
      });
    } else list.sort((a, b) => collator.compare(a[sortKey], b[sortKey]) * dir || a.i - b.i);
    tbody.innerHTML = list.map((r) => `<tr class="krow" data-i="${r.i}">` +
      `<td class="num">${r.i}</td><td class="name" title="${esc(r.hint)}">${esc(r.name)}</td>` +
      `<td><span class="sw k-${r.kc}"></span>${esc(r.kind)}</td><td>${esc(r.group)}</td><td>${esc(r.phase)}</td>` +
      `<td class="num">${fmtNf(r.roof, NF.f1)}</td><td class="num">${fmtNf(r.model, NF.f1)}</td>` +
      `<td class="num">${fmtNf(r.meas, NF.f1)}</td>` +
      `<td class="num${ratioCls(r.ratio)}">${r.ratio == null ? '–' : NF.f2.format(r.ratio)}</td>` +
      `<td class="num">${fmtNf(r.gflop, NF.f3)}</td><td class="num">${fmtNf(r.mb, NF.f2)}</td></tr>`).join('');
    let roof = 0, meas = 0, gf = 0, mb = 0, nm = 0, model = 0, nmodel = 0;
    for (const r of list) {
      roof += r.roof || 0; gf += r.gflop || 0; mb += r.mb || 0;
      if (r.model != null) { model += r.model; nmodel++; }
      if (r.meas != null) { meas += r.meas; nm++; }
    }
    tfoot.innerHTML = `<tr class="ktotal"><td></td><td>total of ${list.length} rows</td><td></td><td></td><td></td>` +
      `<td class="num">${NF.f1.format(roof)}</td><td class="num">${nmodel ? NF.f1.format(model) : '–'}</td>` +
      `<td class="num">${nm ? NF.f1.format(meas) : '–'}</td>` +
      `<td class="num">${nm && roof > 0 ? NF.f2.format(meas / roof) : '–'}</td><td class="num">${NF.f3.format(gf)}</td><td class="num">${NF.f2.format(mb)}</td></tr>`;
    count.textContent = list.length === rows.length ? `${rows.length} launches` : `${list.length} of ${rows.length} launches`;
    body.querySelectorAll('thead th').forEach((th) => {
      const on = th.dataset.key === sortKey;
      th.classList.toggle('sorted', on);
      th.querySelector('.arrow').textContent = on ? (dir > 0 ? ' ▲' : ' ▼') : '';
    });
  }
  body.querySelector('thead').addEventListener('click', (ev) => {
    const th = ev.target.closest('th');
    if (!th) return;
    if (th.dataset.key === sortKey) dir = -dir;
    else { sortKey = th.dataset.key; dir = numeric.has(sortKey) && sortKey !== 'i' ? -1 : 1; }
    render();
  });
  const filter = body.querySelector('#kernel-filter');
  filter.addEventListener('input', () => { query = filter.value; render(); });
  body.querySelector('#sort-schedule').addEventListener('click', () => { sortKey = 'i'; dir = 1; render(); });
  const byRatio = body.querySelector('#sort-ratio');
  if (byRatio) byRatio.addEventListener('click', () => { sortKey = 'ratio'; dir = -1; render(); });
  tbody.addEventListener('mousemove', (ev) => {
    const tr = ev.target.closest('tr.krow');
    if (tr) showTip(thunkTip(ctx, T[+tr.dataset.i], +tr.dataset.i), ev); else hideTip();
  });
  tbody.addEventListener('mouseleave', hideTip);
  // The timeline's click lands here: make the row visible even if filtered out.
  ctx.focusKernel = (i) => {
    let tr = tbody.querySelector(`tr[data-i="${i}"]`);
    if (!tr) { filter.value = query = ''; render(); tr = tbody.querySelector(`tr[data-i="${i}"]`); }
    if (!tr) return;
    tbody.querySelectorAll('tr.flash').forEach((x) => x.classList.remove('flash'));
    tr.classList.add('flash');
    tr.scrollIntoView({ block: 'center', behavior: 'smooth' });
  };
  render();
}

// ------------------------------------------------------------------ groups

function renderGroups(body, ctx) {
  const A = ctx.A;
  if (!A) return note(body, 'No artifact given.');
  let groups = arr(A.groups).length ? A.groups : null;
  if (!groups && ctx.thunks.length) {
    groups = [...ctx.groupTotals].map(([name, g]) => ({ name, kernels: g.count, gemms: g.gemms, recomputed: null, roofline_us: g.roof, measured_us: g.measuredCount ? g.meas : null }));
  }
  if (!groups || !groups.length) return note(body, A.has_plan === false ? 'No groups: ' + (A.note || 'no kernel plan') + '.' : 'The artifact lists no groups.');
  const val = (v) => (isNum(v) ? v : null);
  const rows = groups.map((g) => ({ name: String(g.name || ''), kernels: val(g.kernels), gemms: val(g.gemms), recomputed: val(g.recomputed), roof: val(g.roofline_us), meas: val(g.measured_us) }));
  const sumOf = (k) => rows.reduce((s, r) => s + (r[k] || 0), 0);
  const tot = { kernels: sumOf('kernels'), gemms: sumOf('gemms'), recomputed: sumOf('recomputed'), roof: sumOf('roof'), meas: sumOf('meas') };
  const anyMeas = rows.some((r) => r.meas != null);
  const stepUs = anyMeas ? tot.meas : tot.roof;
  const max = Math.max(1e-9, ...rows.map((r) => Math.max(r.roof || 0, r.meas || 0)));
  const BW = 260;
  const bar = (r) => {
    const wr = px((r.roof || 0) / max * BW), wm = px((r.meas || 0) / max * BW);
    return `<svg class="gbar" width="${BW}" height="18" viewBox="0 0 ${BW} 18"><rect class="gb-bg" x="0" y="0" width="${BW}" height="18"/>` +
      `<rect class="gb-roof" x="0" y="${anyMeas ? 1 : 4}" width="${wr}" height="${anyMeas ? 7 : 10}"/>` +
      (anyMeas ? `<rect class="gb-meas" x="0" y="10" width="${wm}" height="7"/>` : '') + '</svg>';
  };
  const cell = (v, nf) => `<td class="num">${v == null ? '–' : nf.format(v)}</td>`;
  const line = (r, cls) => `<tr class="${cls}">` + `<td>${esc(r.name)}</td>` + cell(r.kernels, NF.int) + cell(r.gemms, NF.int) + cell(r.recomputed, NF.int) +
    cell(r.roof, NF.f1) + cell(r.meas, NF.f1) + cell(r.meas != null && r.roof > 0 ? r.meas / r.roof : null, NF.f2) +
    cell(stepUs > 0 ? (anyMeas ? r.meas : r.roof) / stepUs * 100 : null, NF.f1) + `<td>${cls === 'grow' ? bar(r) : ''}</td></tr>`;
  body.innerHTML = `<div class="legend"><span class="lg"><span class="sw gb-roof-sw"></span>roofline</span>` +
    (anyMeas ? '<span class="lg"><span class="sw gb-meas-sw"></span>measured</span>' : '') + `<span class="muted">bars share one scale (largest group = full width)</span></div>` +
    `<table class="data" id="groups-table"><thead><tr><th>group</th><th class="num">kernels</th><th class="num">GEMMs</th><th class="num">recomputed</th>` +
    `<th class="num">roofline µs</th><th class="num">measured µs</th><th class="num">ratio</th><th class="num">% of step</th><th>roofline vs measured</th></tr></thead>` +
    `<tbody>${rows.map((r) => line(r, 'grow')).join('')}</tbody>` +
    `<tfoot>${line({ name: `total (${rows.length} groups)`, kernels: tot.kernels, gemms: tot.gemms, recomputed: tot.recomputed, roof: tot.roof, meas: anyMeas ? tot.meas : null }, 'gtotal')}</tfoot></table>`;
}

// ------------------------------------------------------------------- arena

function renderArena(body, ctx) {
  const A = ctx.A;
  if (!A) return note(body, 'No artifact given.');
  const ar = A.arena;
  if (!ar) return note(body, A.has_plan === false ? 'No arena: ' + (A.note || 'no kernel plan') + '.' : 'The artifact has no arena plan.');
  const cats = arr(ar.categories), live = arr(ar.live), names = arr(ar.positions);
  const peak = ar.peak || null;
  const np = live.length;
  const totals = live.map((row) => arr(row).reduce((s, v) => s + (isNum(v) ? v : 0), 0));
  const peakPos = peak && isNum(peak.position) ? peak.position : (np ? totals.indexOf(Math.max(...totals)) : -1);
  const peakRow = arr(live[peakPos]);
  body.innerHTML = `<div class="summary-line">entry <code>${esc(ar.entry || '?')}</code> · arena ${esc(fmtBytes(ar.size))}` +
    (peak ? ` · peak ${esc(fmtBytes(peak.bytes))} at position ${esc(peakPos)} <code>${esc(names[peakPos] || '')}</code>` +
      (ar.size > 0 && isNum(peak.bytes) ? ` (${(peak.bytes / ar.size * 100).toFixed(1)}% of the arena)` : '') : '') + '</div>' +
    '<div class="legend">' + cats.map((c, j) => `<span class="lg"><span class="sw ac${j % 8}"></span>${esc(c)} <span class="muted">${esc(fmtBytes(peakRow[j] || 0))} at peak</span></span>`).join('') + '</div>' +
    '<div class="chart" id="arena-chart"></div><h3>Buffers live at the peak</h3><div class="buffers"></div>';
  const host = body.querySelector('#arena-chart');
  let g = null;

  function draw(width) {
    if (!np) { host.innerHTML = '<div class="note">No live-memory samples.</div>'; return; }
    const W = Math.max(500, width), H = 300;
    const box = { l: 72, t: 16, r: W - 16, b: H - 40 };
    const top = Math.max(isNum(ar.size) ? ar.size : 0, isNum(peak && peak.bytes) ? peak.bytes : 0, ...totals) * 1.06 || 1;
    const ys = byteScale(top, 5);
    const xs = niceScale(0, np, Math.max(2, (box.r - box.l) / 110));
    xs.lo = 0; xs.hi = np;
    xs.ticks = xs.ticks.filter((v) => v <= np);
    const X = mapper(xs, box.l, box.r), Y = mapper(ys, box.b, box.t);
    const p = [`<svg class="arena" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">`, axesMarkup(box, xs, ys, X, Y, 'position in ' + (ar.entry || 'entry'), 'bytes live')];
    // Each position is a step of the schedule, so the areas are drawn as steps.
    const base = new Float64Array(np);
    cats.forEach((c, j) => {
      const upper = [], lower = [];
      for (let q = 0; q < np; q++) {
        const v = (live[q] && isNum(live[q][j])) ? live[q][j] : 0;
        const y0 = px(Y(base[q])), y1 = px(Y(base[q] + v));
        const x0 = px(X(q)), x1 = px(X(q + 1));
        upper.push(`${x0},${y1} ${x1},${y1}`);
        lower.push(`${x1},${y0} ${x0},${y0}`);
        base[q] += v;
      }
      p.push(`<polygon class="area ac${j % 8}" data-cat="${j}" points="${upper.join(' ')} ${lower.reverse().join(' ')}"/>`);
    });
    if (isNum(ar.size)) {
      const y = px(Y(ar.size));
      p.push(`<line class="arena-size" x1="${box.l}" x2="${box.r}" y1="${y}" y2="${y}"/><text class="chart-note" x="${box.r - 4}" y="${y - 5}" text-anchor="end">arena ${esc(fmtBytes(ar.size))}</text>`);
    }
    if (peakPos >= 0) {
      const x = px(X(peakPos + 0.5)), pb = isNum(peak && peak.bytes) ? peak.bytes : totals[peakPos];
      const right = x > (box.l + box.r) / 2;
      p.push(`<line class="peak-marker" x1="${x}" x2="${x}" y1="${box.t}" y2="${box.b}"/>` +
        `<text class="peak-label" x="${right ? x - 6 : x + 6}" y="${box.t + 12}" text-anchor="${right ? 'end' : 'start'}">peak ${esc(fmtBytes(pb))} @ ${peakPos}</text>`);
    }
    p.push(`<line class="hover-x" x1="0" x2="0" y1="${box.t}" y2="${box.b}" visibility="hidden"/></svg>`);
    host.innerHTML = p.join('');
    g = { box, X, guide: host.querySelector('.hover-x') };
  }
  host.addEventListener('mousemove', (ev) => {
    if (!g) return;
    const r = host.querySelector('svg').getBoundingClientRect();
    const x = ev.clientX - r.left;
    if (x < g.box.l || x > g.box.r) { hideTip(); g.guide.setAttribute('visibility', 'hidden'); return; }
    const q = Math.min(np - 1, Math.max(0, Math.floor((x - g.box.l) / (g.box.r - g.box.l) * np)));
    const gx = px(g.X(q + 0.5));
    g.guide.setAttribute('x1', gx); g.guide.setAttribute('x2', gx); g.guide.setAttribute('visibility', 'visible');
    const row = arr(live[q]);
    showTip(`<div class="tip-title">#${q} ${esc(names[q] || '')}</div>` + tipTable(cats.map((c, j) =>
      [c, `<span class="sw ac${j % 8}"></span>${esc(fmtBytes(row[j] || 0))}`]).concat([['total', `<b>${esc(fmtBytes(totals[q]))}</b>`]])), ev);
  });
  host.addEventListener('mouseleave', () => { hideTip(); if (g) g.guide.setAttribute('visibility', 'hidden'); });
  sized(host, draw);
  renderBuffers(body.querySelector('.buffers'), peak, cats);
}

function renderBuffers(box, peak, cats) {
  const bufs = arr(peak && peak.buffers);
  if (!bufs.length) { box.innerHTML = '<div class="note">No buffer list for the peak.</div>'; return; }
  const LIMIT = 50;
  let all = false;
  const catIdx = (c) => Math.max(0, cats.indexOf(c)) % 8;
  function render() {
    const shown = all ? bufs : bufs.slice(0, LIMIT);
    box.innerHTML = `<table class="data" id="buffers-table"><thead><tr><th class="num">#</th><th>name</th><th>shape</th><th>category</th><th class="num">size</th><th>source</th></tr></thead><tbody>` +
      shown.map((b, i) => `<tr class="brow"><td class="num">${i + 1}</td><td class="name">${esc(b.name)}</td><td><code>${esc(b.shape)}</code></td>` +
        `<td><span class="sw ac${catIdx(b.category)}"></span>${esc(b.category)}</td><td class="num">${esc(fmtBytes(b.bytes))}</td><td class="name">${esc(b.source)}</td></tr>`).join('') +
      '</tbody></table>' + (bufs.length > LIMIT ? `<button id="show-all-buffers">${all ? 'show the first ' + LIMIT : 'show all ' + bufs.length}</button>` : '');
    const b = box.querySelector('#show-all-buffers');
    if (b) b.addEventListener('click', () => { all = !all; render(); });
  }
  render();
}

// ------------------------------------------------------------ remat/fusion

function renderRemat(body, ctx) {
  const A = ctx.A;
  if (!A) return note(body, 'No artifact given.');
  const rm = A.remat;
  const parts = [];
  if (!rm) parts.push('<div class="note">The artifact carries no rematerialisation summary.</div>');
  else {
    parts.push(`<div class="summary-line">plan <code id="remat-plan">${esc(rm.plan || '(none)')}</code></div>`);
    const layers = arr(rm.layers);
    if (!layers.length) parts.push('<div class="note">No per-layer rematerialisation data.</div>');
    else {
      // Kept: the layer's activations still live when the backward starts;
      // recomputed: what its backward runs again instead of keeping.
      const names = (list, fmt) => list.length
        ? `<details><summary>${list.length} buffer${list.length === 1 ? '' : 's'}</summary><ul class="names">${list.map((x) => `<li>${fmt(x)}</li>`).join('')}</ul></details>`
        : '<span class="muted">–</span>';
      parts.push('<table class="data compact" id="remat-table"><thead><tr><th class="num">layer</th><th>policy</th><th class="num">kernels</th><th class="num">kept for the backward</th><th>kept buffers</th><th class="num">recomputed</th><th>recomputed kernels</th></tr></thead><tbody>' +
        layers.map((l) => {
          const nm = arr(l.recomputed_names), kept = arr(l.kept).filter((k) => k && typeof k === 'object');
          return `<tr class="rrow"><td class="num">${esc(l.layer)}</td><td><span class="policy policy-${cssKey(l.policy)}">${esc(l.policy)}</span></td>` +
            `<td class="num">${esc(isNum(l.kernels) ? l.kernels : '–')}</td><td class="num">${esc(isNum(l.kept_bytes) ? fmtBytes(l.kept_bytes) : '–')}</td>` +
            `<td>${names(kept, (k) => `${esc(k.name)} <code>${esc(k.shape)}</code> ${esc(fmtBytes(k.bytes))}`)}</td>` +
            `<td class="num">${esc(isNum(l.recomputed) ? l.recomputed : '–')}</td>` +
            `<td>${nm.length ? `<details><summary>${nm.length} kernel${nm.length === 1 ? '' : 's'}</summary><ul class="names">${nm.map((x) => `<li>${esc(x)}</li>`).join('')}</ul></details>` : '<span class="muted">–</span>'}</td></tr>`;
        }).join('') + '</tbody></table>');
    }
  }
  // Fusion: what kinds of kernels the fuser produced, and where the time goes.
  if (ctx.thunks.length) {
    const by = new Map();
    ctx.thunks.forEach((t, i) => {
      const key = kindText(t);
      const e = by.get(key) || { kc: ctx.kcls[i], n: 0, roof: 0, meas: 0, nm: 0 };
      e.n++; e.roof += t.roofline_us || 0;
      if (isNum(t.measured_us)) { e.meas += t.measured_us; e.nm++; }
      by.set(key, e);
    });
    const list = [...by].sort((a, b) => b[1].roof - a[1].roof);
    parts.push('<h3>Fusion kinds</h3><table class="data compact" id="fusion-table"><thead><tr><th>kind · fusion</th><th class="num">launches</th><th class="num">roofline µs</th><th class="num">measured µs</th><th class="num">ratio</th></tr></thead><tbody>' +
      list.map(([k, e]) => `<tr><td><span class="sw k-${e.kc}"></span>${esc(k)}</td><td class="num">${e.n}</td><td class="num">${NF.f1.format(e.roof)}</td>` +
        `<td class="num">${e.nm ? NF.f1.format(e.meas) : '–'}</td><td class="num">${e.nm && e.roof > 0 ? NF.f2.format(e.meas / e.roof) : '–'}</td></tr>`).join('') + '</tbody></table>');
  }
  body.innerHTML = parts.join('');
}

// -------------------------------------------------------------------- runs

// TensorBoard-style smoothing: an exponential moving average whose start-up
// bias toward zero is divided out, so the first points are not dragged down.
function smooth(pts, w) {
  if (!(w > 0)) return pts;
  let last = 0, n = 0;
  return pts.map(([x, y]) => {
    last = last * w + (1 - w) * y;
    n++;
    return [x, last / (1 - w ** n)];
  });
}

// A chart owns its host element; draw() may be called again with new options
// (log scale, smoothing, resize) without piling up listeners.
function makeChart(host) {
  let st = null;
  host.addEventListener('mousemove', (ev) => {
    if (!st) return;
    const r = host.querySelector('svg').getBoundingClientRect();
    const x = ev.clientX - r.left;
    if (x < st.box.l - 4 || x > st.box.r + 4) { hideTip(); st.hover.innerHTML = ''; return; }
    const step = st.Xinv(x);
    const rows = [], dots = [];
    let shownStep = null;
    for (const s of st.series) {
      if (!s.hover || !s.pts.length) continue;
      let j = bisect(s.pts, step, (p) => p[0]);
      if (j < 0) j = 0;
      if (j + 1 < s.pts.length && Math.abs(s.pts[j + 1][0] - step) < Math.abs(s.pts[j][0] - step)) j++;
      const p = s.pts[j];
      if (shownStep == null) shownStep = p[0];
      rows.push(`<tr><th><span class="sw r${s.run % 8}"></span>${esc(s.name)}</th><td>${esc(s.label)}</td><td class="num">${esc(sig(p[1], 4))}</td>` +
        `<td class="muted">${p[0] !== shownStep ? 'step ' + esc(p[0]) : ''}</td></tr>`);
      dots.push(`<circle class="hover-dot r${s.run % 8}" cx="${px(st.X(p[0]))}" cy="${px(st.Y(p[1]))}" r="4"/>`);
    }
    if (!rows.length) return;
    const gx = px(st.X(shownStep));
    st.hover.innerHTML = `<line class="hover-x" x1="${gx}" x2="${gx}" y1="${st.box.t}" y2="${st.box.b}"/>` + dots.join('');
    showTip(`<div class="tip-title">${esc(st.xTitle(shownStep))}</div><table>${rows.join('')}</table>`, ev);
  });
  host.addEventListener('mouseleave', () => { hideTip(); if (st) st.hover.innerHTML = ''; });
  return function draw(opt, width) {
    const W = Math.max(320, width), H = opt.height;
    const box = { l: 64, t: 12, r: W - 14, b: H - 40 };
    const series = opt.series.map((s) => Object.assign({}, s, { pts: opt.logY ? s.pts.filter((p) => p[1] > 0) : s.pts }));
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const s of series) for (const [x, y] of s.pts) {
      if (x < x0) x0 = x; if (x > x1) x1 = x;
      if (y < y0) y0 = y; if (y > y1) y1 = y;
    }
    if (!isFinite(x0)) { host.innerHTML = `<div class="note">${esc(opt.empty || 'no finite values to draw')}</div>`; st = null; return; }
    // opt.xTicks: the x values to label (opt.xFmt writes them), the data's own range.
    const xs = opt.xTicks ? { lo: x0, hi: x1, ticks: opt.xTicks, fmt: opt.xFmt || fmtTick } : niceScale(x0, x1, Math.max(2, (box.r - box.l) / 90));
    const ys = opt.logY ? logScale(y0, y1) : niceScale(y0, y1, Math.max(2, (box.b - box.t) / 45));
    const X = mapper(xs, box.l, box.r), Y = mapper(ys, box.b, box.t);
    const p = [`<svg class="linechart" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">`, axesMarkup(box, xs, ys, X, Y, opt.xLabel, opt.yLabel)];
    // Empty series still get their (empty) line, so every run is accounted for.
    for (const s of series) {
      const pts = s.pts.map(([x, y]) => px(X(x)) + ',' + px(Y(y))).join(' ');
      p.push(`<polyline class="${s.cls} r${s.run % 8}${s.faint ? ' faint' : ''}" data-run="${s.run}" data-points="${s.pts.length}" points="${pts}"/>`);
    }
    for (const s of series) {
      if (!s.dots) continue;
      for (const [x, y] of s.pts) p.push(`<circle class="${s.dots} r${s.run % 8}${s.faint ? ' faint' : ''}" cx="${px(X(x))}" cy="${px(Y(y))}" r="${s.dotR || 2.2}"/>`);
    }
    p.push('<g class="hover"></g></svg>');
    host.innerHTML = p.join('');
    const span = xs.hi - xs.lo || 1;
    st = { box, X, Y, series, hover: host.querySelector('g.hover'), Xinv: (px_) => xs.lo + (px_ - box.l) / (box.r - box.l) * span,
           xTitle: opt.xTitle || ((x) => 'step ' + x) };
  };
}

function finitePts(records, key) {
  const out = [];
  for (const r of arr(records)) if (r && isNum(r.step) && isNum(r[key])) out.push([r.step, r[key]]);
  return out.sort((a, b) => a[0] - b[0]);
}
function median(a) { if (!a.length) return NaN; const s = a.slice().sort((x, y) => x - y); return s[s.length >> 1]; }

function renderRuns(body, ctx) {
  const runs = arr(ctx.D.runs).filter(Boolean);
  if (!runs.length) return note(body, 'no training logs given (gptc report --log RUN.jsonl)');
  const R = runs.map((r, i) => ({
                       i,
                       name: String(r.name || 'run ' + (i + 1)),
                       loss: finitePts(r.steps, 'loss'),
                       val: finitePts(r.val, 'val_loss'),
                       tok: finitePts(r.steps, 'tok_s'),
                       mfu: finitePts(r.steps, 'mfu'),
                       lr: finitePts(r.steps, 'lr'),
                       norm: finitePts(r.steps, 'norm'),
                       hs: finitePts(r.hellaswag, 'acc_norm'),
                       nsteps: arr(r.steps).length,
                     }));
  const totalLoss = R.reduce((s, r) => s + r.loss.length, 0);
  // Markers on thousands of points would hide the lines and slow the page.
  const dots = totalLoss <= 2000;
  const longest = Math.max(...R.map((r) => r.loss.length));
  const defSmooth = longest > 200 ? 0.6 : 0;

  body.innerHTML =
      `<table class="data" id="runs-table"><thead><tr><th>run</th><th class="num">step records</th><th class="num">last step</th><th class="num">last loss</th>` +
      `<th class="num">best val loss</th><th class="num">last HellaSwag acc_norm</th><th class="num">median tok/s</th><th class="num">median MFU %</th></tr></thead><tbody>` +
      R.map((r) => {
         const best = r.val.length ? Math.min(...r.val.map((p) => p[1])) : NaN;
         const last = r.loss[r.loss.length - 1];
         return `<tr><td><span class="sw r${r.i % 8}"></span>${esc(r.name)}</td><td class="num">${
                    r.nsteps}</td><td class="num">${last ? esc(last[0]) : '–'}</td>` +
             `<td class="num">${last ? esc(sig(last[1], 4)) : '–'}</td><td class="num">${
                    esc(sig(best, 4))}</td>` +
             `<td class="num">${r.hs.length ? esc(sig(r.hs[r.hs.length - 1][1], 4)) : '–'}</td>` +
             `<td class="num">${
                    esc(fmtCount(median(r.tok.map((p) => p[1]))))}</td><td class="num">${
                    esc(sig(median(r.mfu.map((p) => p[1]))))}</td></tr>`;
       }).join('') +
      '</tbody></table>' +
      `<div class="chart-card"><div class="chart-head"><h3>Loss and validation loss</h3>
      <label><input type="checkbox" id="loss-log"> log scale</label>
      <label>smoothing <input type="range" id="loss-smooth" min="0" max="0.99" step="0.01" value="${
          defSmooth}"> <span id="loss-smooth-value">${defSmooth.toFixed(2)}</span></label>
      <span class="legend inline">${
          R.map((r) => `<span class="lg"><span class="sw r${r.i % 8}"></span>${esc(r.name)}</span>`)
              .join('')}
      <span class="lg"><span class="line-key"></span>loss</span><span class="lg"><span class="line-key dashed"></span>val loss</span></span></div>
      <div class="chart" id="loss-chart"></div></div>
    <div class="chart-grid">${
              ['tok', 'mfu', 'lr', 'norm', 'hs']
                  .map(
                      (k) =>
                          `<div class="chart-card"><h3 class="small"></h3><div class="chart small-chart" id="chart-${
                              k}"></div></div>`)
                  .join('')}</div>`;

  const logBox = body.querySelector('#loss-log'), slider = body.querySelector('#loss-smooth');
  const sval = body.querySelector('#loss-smooth-value');
  const lossHost = body.querySelector('#loss-chart');
  const drawLoss = makeChart(lossHost);
  let lossW = 0;
  function lossChart() {
    const w = +slider.value;
    sval.textContent = w.toFixed(2);
    const series = [];
    for (const r of R) {
      if (w > 0) {
        series.push({ run: r.i, name: r.name, label: 'loss', cls: 'loss-raw', faint: true, pts: r.loss, dots: dots ? 'loss-pt' : null, hover: true });
        series.push({ run: r.i, name: r.name, label: 'smoothed', cls: 'loss-line', pts: smooth(r.loss, w), hover: true });
      } else series.push({ run: r.i, name: r.name, label: 'loss', cls: 'loss-line', pts: r.loss, dots: dots ? 'loss-pt' : null, hover: true });
      series.push({ run: r.i, name: r.name, label: 'val loss', cls: 'val-line', pts: r.val, dots: 'val-pt', dotR: 3.5, hover: true });
    }
    drawLoss({ height: 340, series, logY: logBox.checked, xLabel: 'step', yLabel: 'loss', empty: 'no finite loss values in the logs' }, lossW);
  }
  logBox.addEventListener('change', lossChart);
  slider.addEventListener('input', lossChart);
  sized(lossHost, (w) => { lossW = w; lossChart(); });

  const metrics = [
    ['tok', 'tokens / s', 'tokens / s'], ['mfu', 'MFU (%)', 'MFU %'], ['lr', 'learning rate', 'lr'],
    ['norm', 'grad norm', 'norm'], ['hs', 'HellaSwag acc_norm', 'acc_norm']
  ];
  for (const [k, title, ylab] of metrics) {
    const host = body.querySelector('#chart-' + k);
    host.previousElementSibling.textContent = title;
    const draw = makeChart(host);
    sized(host, (w) => draw({ height: 220, xLabel: 'step', yLabel: ylab, empty: 'not logged (no finite values)',
      series: R.map((r) => ({ run: r.i, name: r.name, label: title, cls: 'metric-line', pts: r[k], hover: true })) }, w));
  }
}

// ----------------------------------------------------------------- scaling

// The data-parallel scaling model's prediction of this step on N GPUs (Note
// [scaling model] in compiler/perf/scaling_model.h, as `gptc simulate`
// prints it): ZeRO-0 and ZeRO-1 side by side, and their efficiency against N.
function renderScaling(body, ctx) {
  const A = ctx.A;
  if (!A) return note(body, 'No artifact given.');
  const S = A.scaling;
  if (!S || typeof S !== 'object') return note(body, 'No scaling prediction: ' + (A.scaling_note || 'no times for the step') + '.');
  const tables = arr(S.tables).filter((t) => t && typeof t === 'object');
  const z = [0, 1].map((k) => tables.find((t) => t.zero === k) || { rows: [] });
  const rows = z.map((t) => arr(t.rows).filter((r) => r && isNum(r.gpus)));
  const gpus = [...new Set(rows[0].concat(rows[1]).map((r) => r.gpus))].sort((a, b) => a - b);
  const at = (k, n) => rows[k].find((r) => r.gpus === n) || {};
  const one = S.one_gpu || {}, L = S.link || {};
  const ms = (v) => fmtNf(v, NF.f2);
  const cells = (r) => `<td class="num">${ms(r.step_ms)}</td><td class="num">${ms(r.exposed_ms)}</td>` +
    `<td class="num">${fmtNf(r.tokens_per_second, NF.int)}</td><td class="num">${fmtNf(r.efficiency, NF.f3)}</td>`;
  const what = (t) => `${esc(t.config || 'zero ' + t.zero)}${isNum(t.buckets) ? ` (${t.buckets} bucket${t.buckets === 1 ? '' : 's'})` : ''}`;
  body.innerHTML =
    `<div class="summary-line">times: ${esc(S.times || '?')} · one GPU: step ${ms(one.step_ms)} ms = forward ${ms(one.forward_ms)} + backward ${ms(one.backward_ms)} + optimizer ${ms(one.optimizer_ms)} ms` +
    (isNum(S.tokens) ? ` · ${NF.int.format(S.tokens)} tokens a GPU` : '') + '</div>' +
    `<div class="summary-line muted" id="scaling-link">link: up to ${esc(L.gpus_per_node)} GPUs a node over NVLink at ${esc(L.nvlink_bus_gbs)} GB/s bus bandwidth; beyond, ` +
    `the network at ${esc(L.network_bus_gbs)} GB/s a GPU; ring latency ${esc(L.base_latency_us)} µs + ${esc(L.nvlink_step_us)} µs an NVLink step + ${esc(L.network_step_us)} µs a network step; ` +
    `across nodes an all-reduce may take NCCL's tree (${esc(L.tree_nvlink_step_us)} µs a level in a node, ${esc(L.tree_network_step_us)} across)</div>` +
    `<div class="summary-line">ZeRO-0: ${what(z[0])} · ZeRO-1 (predicted; gptc builds ZeRO-0): ${what(z[1])}</div>` +
    '<table class="data compact" id="scaling-table"><thead><tr><th></th><th colspan="4">ZeRO-0</th><th colspan="4">ZeRO-1</th></tr>' +
    '<tr><th class="num">N</th>' + '<th class="num">step ms</th><th class="num">exposed ms</th><th class="num">tok/s</th><th class="num">efficiency</th>'.repeat(2) + '</tr></thead><tbody>' +
    gpus.map((n) => `<tr class="srow"><td class="num">${esc(n)}</td>${cells(at(0, n))}${cells(at(1, n))}</tr>`).join('') + '</tbody></table>' +
    '<div class="chart-card"><div class="chart-head"><h3>Scaling efficiency</h3><span class="legend inline">' +
    '<span class="lg"><span class="sw r0"></span>ZeRO-0</span><span class="lg"><span class="sw r1"></span>ZeRO-1</span></span></div>' +
    '<div class="chart" id="scaling-chart"></div></div>';
  const host = body.querySelector('#scaling-chart');
  const draw = makeChart(host);
  // Efficiency against log2 N: the GPU counts double, so equal steps read as equal distances.
  const pts = (k) => rows[k].filter((r) => r.gpus > 0 && isNum(r.efficiency)).map((r) => [Math.log2(r.gpus), r.efficiency]);
  sized(host, (w) => draw({ height: 260, xLabel: 'GPUs (log2 scale)', yLabel: 'efficiency', empty: 'no finite efficiencies',
    xTicks: gpus.filter((n) => n > 0).map(Math.log2), xFmt: (v) => String(Math.round(2 ** v)), xTitle: (v) => Math.round(2 ** v) + ' GPUs',
    series: [0, 1].map((k) => ({ run: k, name: 'ZeRO-' + k, label: 'efficiency', cls: 'scale-line', pts: pts(k), dots: 'scale-pt', dotR: 3, hover: true })) }, w));
}

// -------------------------------------------------------------------- main

const SECTIONS = [
  ['header', ''], ['timeline', 'Step timeline'], ['kernels', 'Kernels'], ['groups', 'Per group'],
  ['arena', 'Arena'], ['remat', 'Remat and fusion'], ['runs', 'Training runs'], ['scaling', 'Scaling'],
];
const RENDER = { header: renderHeader, timeline: renderTimeline, kernels: renderKernels, groups: renderGroups, arena: renderArena, remat: renderRemat, runs: renderRuns, scaling: renderScaling };

function buildContext(D) {
  const A = D.artifact || null;
  const thunks = A ? arr(A.thunks).filter((t) => t && typeof t === 'object') : [];
  const measured = !!(A && A.profile && thunks.some((t) => isNum(t.measured_us)));
  // With a profile, a launch the profiler missed still takes its roofline time
  // so the timeline does not collapse around it.
  const time = (t) => (measured && isNum(t.measured_us) ? t.measured_us : isNum(t.roofline_us) ? t.roofline_us : 0);
  const totalsBy = (key) => {
    const m = new Map();
    thunks.forEach((t) => {
      const k = t[key] || '';
      const g = m.get(k) || { count: 0, gemms: 0, roof: 0, meas: 0, measuredCount: 0 };
      g.count++;
      if (kindClass(t) === 'gemm') g.gemms++;
      if (isNum(t.roofline_us)) g.roof += t.roofline_us;
      if (isNum(t.measured_us)) { g.meas += t.measured_us; g.measuredCount++; }
      m.set(k, g);
    });
    return m;
  };
  return {
    D, A, thunks, measured, time, totalsBy,
    kcls: thunks.map(kindClass), groupTotals: totalsBy('group'),
    entries: new Set(thunks.map((t) => t.entry)).size,
    sections: SECTIONS.slice(1).map(([id, t]) => [id, t]), focusKernel: null,
  };
}

// A view that throws shows the error in its own box; the error is rethrown
// outside this call so the page's error hook records it while the remaining
// views still render.
function guard(body, fn) {
  try {
    fn();
  } catch (e) {
    body.insertAdjacentHTML('beforeend', `<div class="view-error"><b>This view failed to render.</b><pre>${esc(e && e.stack ? e.stack : e)}</pre></div>`);
    setTimeout(() => { throw e; });
  }
}

function runView(app, id, title, fn, ctx) {
  const sec = document.createElement('section');
  sec.className = 'view';
  sec.id = 'v-' + id;
  if (title) sec.innerHTML = `<h2>${esc(title)}</h2>`;
  const body = document.createElement('div');
  body.className = 'view-body';
  sec.appendChild(body);
  app.appendChild(sec);
  currentBody = body;
  const t0 = performance.now();
  guard(body, () => fn(body, ctx));
  sec.dataset.ms = (performance.now() - t0).toFixed(1);
}

function main() {
  const t0 = performance.now();
  const app = document.getElementById('app') || document.body;
  let D;
  try {
    const el = document.getElementById('gptc-data');
    D = JSON.parse(el ? el.textContent : 'null');
    if (!D || typeof D !== 'object') throw new Error('no report data in the page');
    if (D.format && D.format !== 'gptc-report-1') D.notes = [`unknown report format "${D.format}"; rendering as gptc-report-1`].concat(arr(D.notes));
  } catch (e) {
    app.innerHTML = `<section class="view"><div class="view-error"><b>Could not read the report data.</b><pre>${esc(e)}</pre></div></section>`;
    setTimeout(() => { throw e; });
    D = null;
  }
  if (D) {
    document.title = D.title || document.title;
    const ctx = buildContext(D);
    for (const [id, title] of SECTIONS) runView(app, id, title, RENDER[id], ctx);
    // "#only=timeline,kernels" shows just those views (a link to one view; the
    // README's screenshots), hidden before the charts read their widths.
    const only = /^#only=([a-z,]+)$/.exec(location.hash);
    if (only) {
      const keep = only[1].split(',');
      for (const [id] of SECTIONS) {
        const sec = document.getElementById('v-' + id);
        if (sec && !keep.includes(id)) sec.style.display = 'none';
      }
    }
    drawSized();
  }
  document.body.dataset.ready = '1';
  document.body.dataset.renderMs = String(performance.now());
  document.body.dataset.viewMs = String(Math.round(performance.now() - t0));
}

main();
})();
