// Run page: fetch the certificate's figures (Plotly JSON built server-side) and redraw them for a budget. Loaded
// deferred *before* Plotly, so the figures' request starts while Plotly is still downloading; drawing waits for
// DOMContentLoaded (every deferred script, Plotly included, has run by then).
(function () {
  "use strict";
  const fmt = (v) => v == null ? "—" : (Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0)) ? v.toExponential(3) : v.toPrecision(4);
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const box = document.getElementById("run-figures");
  if (!box) return;
  const loaded = new Promise((resolve) => {
    if (document.readyState === "complete" || document.readyState === "interactive" && window.Plotly) resolve();
    else document.addEventListener("DOMContentLoaded", resolve, {once: true});
  });

  function table(rows) {
    const body = document.querySelector("#bound-table tbody");
    body.innerHTML = rows.filter((r) => r.value != null || r.threshold != null).map((r) =>
      "<tr" + (r.best ? ' class="best"' : "") + "><th scope=\"row\">" + esc(r.label) + (r.best ? ' <span class="badge PASS" title="the tightest bound">B*</span>' : "") + "</th>" +
      '<td class="right mono">' + fmt(r.value) + "</td>" +
      '<td class="right mono">' + esc(r.parameter === "δ" ? "KL" : "TV") + " ≤ " + (r.threshold == null ? "∞ (no constraint)" : fmt(r.threshold)) + "</td>" +
      "<td>" + (r.value == null ? "" : r.within_budget ? '<span class="badge PASS">within E</span>' : '<span class="badge FAIL">over E</span>') + "</td></tr>").join("");
  }

  const input = document.getElementById("budget");
  function load() {
    const budget = parseFloat(input.value);
    if (!(budget > 0)) { input.setCustomValidity("a positive number"); input.reportValidity(); return; }
    input.setCustomValidity("");
    // the first load uses the request the page started inline for the stored budget (the input's initial value)
    const early = window.runFigures && budget === parseFloat(input.defaultValue) ? window.runFigures : null;
    window.runFigures = null;
    const request = early || fetch(box.dataset.url + "?budget=" + encodeURIComponent(budget), {credentials: "same-origin"}).then((r) => r.json());
    Promise.all([request, loaded]).then(([f]) => {
      if (f.error) { document.getElementById("figures-error").textContent = f.error.message; return; }
      table(f.bound_table);
      return Promise.all([["fig-bounds", f.bound_tightness], ["fig-steps", f.steps], ["fig-dist", f.distributions],
        ["fig-status", f.token_status], ["fig-length", f.acceptance_by_length],
        ["fig-step-mismatch", (f.step_metrics || {}).mismatch], ["fig-step-weights", (f.step_metrics || {}).weights]].map(([id, fig]) => PortalFigures.draw(id, fig)));
    }).then(() => {
      if (!document.body.dataset.figures && performance.mark) performance.mark("figures-drawn");  // the first draw
      document.body.dataset.figures = "ready";
    });
  }
  document.getElementById("budget-apply").addEventListener("click", load);
  input.addEventListener("keydown", (e) => { if (e.key === "Enter") load(); });
  load();
})();
