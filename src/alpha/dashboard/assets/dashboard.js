// The live dashboard: lists the runs (GET api/runs), fetches the new metrics of the runs ticked
// (GET api/runs/NAME/metrics?since=LAST_STEP) every two seconds and redraws the charts.
"use strict";
(() => {
  const POLL_MS = 2000;
  const SELECTED_AT_START = 4;  // the most recently updated runs are ticked on first load
  const byId = (id) => document.getElementById(id);
  const state = {runs: [], data: new Map(), selected: new Set(), colors: new Map(), axis: "step", started: false};

  function colorOf(name) {
    if (!state.colors.has(name)) state.colors.set(name, AlphaCharts.color(state.colors.size));
    return state.colors.get(name);
  }

  async function getJson(url) {
    const response = await fetch(url, {cache: "no-store"});
    return {status: response.status, body: await response.json().catch(() => null)};
  }

  async function refreshRuns() {
    const {status, body} = await getJson("api/runs");
    if (status !== 200 || !body) throw new Error(`api/runs answered ${status}`);
    state.runs = body.runs;
    byId("where").textContent = body.runs_dir;
    if (!state.started) {
      body.runs.filter((r) => r.status !== "gone").slice(0, SELECTED_AT_START).forEach((r) => state.selected.add(r.name));
      state.started = true;
    }
  }

  async function refreshMetrics(name) {
    if (!state.data.has(name)) state.data.set(name, {records: [], skipped: 0, warnings: []});
    const entry = state.data.get(name);
    const last = entry.records.length ? entry.records[entry.records.length - 1].step : 0;
    const {status, body} = await getJson(`api/runs/${encodeURIComponent(name)}/metrics?since=${last}`);
    if (status !== 200 || !body) return;  // gone (410) or unknown: the list shows it, the data stays
    // A resumed run cuts its log back to its checkpoint: start over when the log is shorter than ours.
    if (body.run.last_step !== null && body.run.last_step < last) {
      entry.records = [];
      return;
    }
    entry.records.push(...body.records);
    entry.skipped = body.skipped_lines;
    entry.warnings = body.warnings;
  }

  function renderRunList() {
    const list = byId("runs");
    list.replaceChildren(...state.runs.map((run) => {
      const item = document.createElement("li");
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.checked = state.selected.has(run.name);
      box.addEventListener("change", () => {
        if (box.checked) state.selected.add(run.name); else state.selected.delete(run.name);
        tick();
      });
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colorOf(run.name);
      const name = document.createElement("span");
      name.className = "name";
      name.textContent = run.name;
      label.append(box, swatch, name);
      const step = document.createElement("span");
      step.className = "step";
      step.textContent = run.last_step === null ? "" : `${run.last_step}${run.total_steps ? "/" + run.total_steps : ""}`;
      const status = document.createElement("span");
      status.className = `status ${run.status}`;
      status.textContent = run.status;
      item.append(label, step, status);
      return item;
    }));
    if (!state.runs.length) list.innerHTML = "<li>no runs yet (a run directory holds metrics.jsonl)</li>";
  }

  function renderCharts() {
    const runs = [...state.selected].filter((name) => state.data.has(name))
      .map((name) => ({name, color: colorOf(name), rows: AlphaCharts.derive(state.data.get(name).records)}));
    AlphaCharts.render(byId("charts"), runs, state.axis);
    byId("notes").replaceChildren(...[...state.selected].filter((name) => state.data.get(name)?.skipped).map((name) => {
      const entry = state.data.get(name);
      const note = document.createElement("div");
      note.className = "warning";
      note.textContent = `${name}: ${entry.skipped} line(s) of metrics.jsonl skipped (${entry.warnings[0] || ""})`;
      return note;
    }));
  }

  // One refresh at a time (a tick while one runs asks for another after it), so no records arrive twice.
  let timer = null, running = false, again = false;
  async function tick() {
    clearTimeout(timer);
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await refreshRuns();
      await Promise.all([...state.selected].map(refreshMetrics));
      byId("error").textContent = "";
    } catch (e) {
      byId("error").textContent = `server unreachable (${e.message}); retrying`;
    }
    renderRunList();
    renderCharts();
    running = false;
    if (again) {
      again = false;
      tick();
    } else {
      timer = setTimeout(tick, POLL_MS);
    }
  }

  AlphaCharts.axisPicker(byId("axis"), (axis) => { state.axis = axis; renderCharts(); });
  tick();
})();
