// The report's charts: the dashboard's, drawn from the metrics embedded in the page.
"use strict";
(() => {
  const data = JSON.parse(document.getElementById("alpha-report-data").textContent);
  const runs = data.runs.map((run, i) => ({name: run.name, color: AlphaCharts.color(i), rows: AlphaCharts.derive(run.records)}));
  const container = document.getElementById("charts");
  AlphaCharts.axisPicker(document.getElementById("axis"), (axis) => AlphaCharts.render(container, runs, axis));
  AlphaCharts.render(container, runs, "step");
})();
