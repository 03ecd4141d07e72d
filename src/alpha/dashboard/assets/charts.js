// AlphaCharts: the charts of the dashboard and of the reports, drawn as plain SVG by this file (no
// library). Each panel overlays every run given (one colour per run, one dash per series), on an x axis
// of steps, tokens or wall time; hovering shows the values nearest the cursor.
"use strict";
const AlphaCharts = (() => {
  const COLORS = ["#3d6fd8", "#e0663a", "#1a9b4b", "#9b4fd1", "#c2413b", "#0f9aa8", "#b07d12", "#d1479b"];
  const DASHES = ["", "6 4", "2 3"];
  const WIDTH = 460, HEIGHT = 220;
  const MARGIN = {left: 58, right: 14, top: 10, bottom: 28};
  const CLIP_WINDOW = 20;    // steps over which the clip fraction is taken
  const MAX_POINTS = 1500;   // per line; longer runs are thinned (evenly, keeping the last point)

  const PANELS = [
    {title: "Loss", series: [{key: "loss", label: "train"}, {key: "val_loss", label: "validation", dots: true}]},
    {title: "Learning rate", series: [{key: "lr", label: "lr"}]},
    {title: "Gradient norm (before clipping)", series: [{key: "grad_norm", label: "norm"}]},
    {title: `Clip fraction (share of the last ${CLIP_WINDOW} steps clipped)`, series: [{key: "clip_fraction", label: "clipped"}]},
    {title: "Tokens per second", series: [{key: "tokens_per_second", label: "tokens/s"}]},
    {title: "Step time (ms)", series: [{key: "forward_ms", label: "forward"}, {key: "backward_ms", label: "backward"},
                                       {key: "optimizer_ms", label: "optimizer"}]},
    {title: "Peak memory (MiB)", series: [{key: "peak_mib", label: "peak"}]},
  ];
  const AXIS_LABELS = {step: "step", tokens: "tokens", time: "wall time (s)"};

  const finite = (v) => typeof v === "number" && Number.isFinite(v);
  const orZero = (v) => (finite(v) ? v : 0);
  const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

  // metrics.jsonl records -> rows with the x axes and the derived series. Wall time counts from the
  // start of the first step; logs without wall_time fall back to the sum of step times.
  function derive(records) {
    const rows = [];
    let tokens = 0, stepSeconds = 0;
    const clipped = [];
    const first = records[0];
    const start = first && finite(first.wall_time) ? first.wall_time - orZero(first.step_time_s) : null;
    for (const r of records) {
      tokens += orZero(r.tokens_per_second) * orZero(r.step_time_s);
      stepSeconds += orZero(r.step_time_s);
      clipped.push(finite(r.clip_coef) && r.clip_coef < 1 ? 1 : 0);
      if (clipped.length > CLIP_WINDOW) clipped.shift();
      const ms = (s) => (finite(s) ? s * 1000 : null);
      rows.push({
        step: r.step, tokens, time: start !== null && finite(r.wall_time) ? r.wall_time - start : stepSeconds,
        loss: r.loss, val_loss: r.val_loss, lr: r.lr, grad_norm: r.grad_norm,
        clip_fraction: clipped.reduce((a, b) => a + b, 0) / clipped.length,
        tokens_per_second: r.tokens_per_second,
        forward_ms: ms(r.forward_s), backward_ms: ms(r.backward_s), optimizer_ms: ms(r.optimizer_s),
        peak_mib: finite(r.peak_bytes) ? r.peak_bytes / 1048576 : null,
      });
    }
    return rows;
  }

  function niceTicks(lo, hi, count) {
    const span = hi - lo;
    const raw = span / count;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => span / s <= count) || 10 * power;
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(v);
    return ticks;
  }

  function formatNumber(v) {
    if (!finite(v)) return "–";
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
    if (a < 1e-2) return v.toExponential(1);
    return Number(v.toPrecision(4)).toString();
  }

  function thin(points) {
    if (points.length <= MAX_POINTS) return points;
    const stride = points.length / MAX_POINTS;
    const kept = [];
    for (let i = 0; i < MAX_POINTS; i++) kept.push(points[Math.floor(i * stride)]);
    kept.push(points[points.length - 1]);
    return kept;
  }

  // The lines of one panel: every (run, series) pair with at least one finite value.
  function linesOf(spec, runs, axis) {
    const lines = [];
    runs.forEach((run) => spec.series.forEach((series, s) => {
      const points = run.rows.filter((row) => finite(row[series.key]) && finite(row[axis]))
                             .map((row) => ({x: row[axis], y: row[series.key]}));
      if (points.length) lines.push({run: run.name, label: series.label, color: run.color, dash: DASHES[s % DASHES.length],
                                     dots: series.dots, points: thin(points)});
    }));
    return lines;
  }

  function extent(values) {
    let lo = Math.min(...values), hi = Math.max(...values);
    if (lo === hi) { lo -= Math.abs(lo) * 0.1 || 1; hi += Math.abs(hi) * 0.1 || 1; }
    return [lo, hi];
  }

  function makePanel(container, spec) {
    const el = document.createElement("div");
    el.className = "chart";
    const title = document.createElement("h3");
    title.textContent = spec.title;
    const plot = document.createElement("div");
    const legend = document.createElement("div");
    legend.className = "legend";
    const tip = document.createElement("div");
    tip.className = "tooltip";
    el.append(title, plot, legend, tip);
    container.append(el);
    const panel = {spec, el, plot, legend, tip, view: null, hover: null};
    plot.addEventListener("mousemove", (e) => { panel.hover = {clientX: e.clientX, clientY: e.clientY}; showHover(panel); });
    plot.addEventListener("mouseleave", () => { panel.hover = null; showHover(panel); });
    return panel;
  }

  function draw(panel, runs, axis) {
    const lines = linesOf(panel.spec, runs, axis);
    const left = MARGIN.left, right = WIDTH - MARGIN.right, top = MARGIN.top, bottom = HEIGHT - MARGIN.bottom;
    let svg = `<svg viewBox="0 0 ${WIDTH} ${HEIGHT}" role="img" aria-label="${escape(panel.spec.title)}">`;
    if (!lines.length) {
      panel.view = null;
      panel.plot.innerHTML = svg + `<text class="empty" x="${WIDTH / 2}" y="${HEIGHT / 2}" text-anchor="middle">` +
                             "waiting for data</text></svg>";
      panel.legend.innerHTML = "";
      return;
    }
    const all = lines.flatMap((l) => l.points);
    const [x0, x1] = extent(all.map((p) => p.x));
    let [y0, y1] = extent(all.map((p) => p.y));
    const pad = (y1 - y0) * 0.05;
    y0 -= pad; y1 += pad;
    const sx = (x) => left + (x - x0) / (x1 - x0) * (right - left);
    const sy = (y) => bottom - (y - y0) / (y1 - y0) * (bottom - top);
    svg += `<g class="axis">`;
    for (const t of niceTicks(y0, y1, 5)) {
      svg += `<line class="grid" x1="${left}" x2="${right}" y1="${sy(t)}" y2="${sy(t)}"/>`;
      svg += `<text x="${left - 6}" y="${sy(t) + 3}" text-anchor="end">${formatNumber(t)}</text>`;
    }
    for (const t of niceTicks(x0, x1, 6)) {
      svg += `<line class="grid" x1="${sx(t)}" x2="${sx(t)}" y1="${top}" y2="${bottom}"/>`;
      svg += `<text x="${sx(t)}" y="${bottom + 14}" text-anchor="middle">${formatNumber(t)}</text>`;
    }
    svg += `<text x="${right}" y="${HEIGHT - 2}" text-anchor="end">${AXIS_LABELS[axis]}</text></g>`;
    for (const line of lines) {
      const d = line.points.map((p, i) => `${i ? "L" : "M"}${sx(p.x).toFixed(1)} ${sy(p.y).toFixed(1)}`).join("");
      svg += `<path class="series" data-run="${escape(line.run)}" data-series="${escape(line.label)}" d="${d}" ` +
             `stroke="${line.color}" stroke-dasharray="${line.dash}"/>`;
      if (line.dots)
        for (const p of line.points)
          svg += `<circle cx="${sx(p.x).toFixed(1)}" cy="${sy(p.y).toFixed(1)}" r="2.5" fill="${line.color}"/>`;
    }
    svg += `<line class="cursor" x1="0" x2="0" y1="${top}" y2="${bottom}" visibility="hidden"/></svg>`;
    panel.plot.innerHTML = svg;
    panel.view = {lines, x0, x1, left, right, axis};
    const single = panel.spec.series.length === 1;
    panel.legend.innerHTML = lines.map((l) =>
      `<span><svg viewBox="0 0 24 8"><line x1="0" x2="24" y1="4" y2="4" stroke="${l.color}" stroke-width="2" ` +
      `stroke-dasharray="${l.dash}"/></svg> ${escape(single ? l.run : `${l.run} · ${l.label}`)}</span>`).join("");
    showHover(panel);
  }

  function nearest(points, x) {
    let lo = 0, hi = points.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (points[mid].x < x) lo = mid + 1; else hi = mid;
    }
    return lo > 0 && Math.abs(points[lo - 1].x - x) < Math.abs(points[lo].x - x) ? points[lo - 1] : points[lo];
  }

  function showHover(panel) {
    const svg = panel.plot.querySelector("svg");
    const cursor = svg && svg.querySelector(".cursor");
    if (!panel.hover || !panel.view || !cursor) {
      panel.tip.style.display = "none";
      if (cursor) cursor.setAttribute("visibility", "hidden");
      return;
    }
    const {lines, x0, x1, left, right, axis} = panel.view;
    const box = svg.getBoundingClientRect();
    const viewX = (panel.hover.clientX - box.left) / box.width * WIDTH;
    const x = x0 + (Math.min(Math.max(viewX, left), right) - left) / (right - left) * (x1 - x0);
    const hits = lines.map((l) => ({line: l, point: nearest(l.points, x)}));
    const at = hits[0].point.x;
    cursor.setAttribute("x1", left + (at - x0) / (x1 - x0) * (right - left));
    cursor.setAttribute("x2", cursor.getAttribute("x1"));
    cursor.setAttribute("visibility", "visible");
    panel.tip.innerHTML = `<b>${AXIS_LABELS[axis]} ${formatNumber(at)}</b><br>` + hits.map(({line, point}) =>
      `<span style="color:${line.color}">■</span> ${escape(line.run)} · ${escape(line.label)}: ` +
      formatNumber(point.y)).join("<br>");
    const frame = panel.el.getBoundingClientRect();
    panel.tip.style.display = "block";
    const px = panel.hover.clientX - frame.left, py = panel.hover.clientY - frame.top;
    panel.tip.style.left = `${px + 14 + panel.tip.offsetWidth > frame.width ? px - panel.tip.offsetWidth - 14 : px + 14}px`;
    panel.tip.style.top = `${py + 10}px`;
  }

  // Draws (or redraws, keeping the panels and the hover) every chart into `container`.
  // runs: [{name, color, rows: derive(records)}]; axis: "step", "tokens" or "time".
  function render(container, runs, axis) {
    if (!container.alphaPanels) container.alphaPanels = PANELS.map((spec) => makePanel(container, spec));
    for (const panel of container.alphaPanels) draw(panel, runs, axis);
  }

  // Fills `container` with the x-axis chooser; onChange gets "step", "tokens" or "time".
  function axisPicker(container, onChange) {
    const label = document.createElement("label");
    label.textContent = "x axis";
    const select = document.createElement("select");
    for (const [value, text] of [["step", "steps"], ["tokens", "tokens"], ["time", "wall time"]])
      select.append(new Option(text, value));
    select.addEventListener("change", () => onChange(select.value));
    label.append(" ", select);
    container.replaceChildren(label);
  }

  return {derive, render, axisPicker, color: (i) => COLORS[i % COLORS.length]};
})();
