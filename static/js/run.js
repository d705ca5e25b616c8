// Run page: fetch the certificate's figures (Plotly JSON built server-side) and redraw them for a budget.
(function () {
  "use strict";
  const fmt = (v) => v == null ? "—" : (Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0)) ? v.toExponential(3) : v.toPrecision(4);
  const config = {responsive: true, displaylogo: false};
  function draw(id, fig) { if (fig && document.getElementById(id)) Plotly.react(id, fig.data, fig.layout, config); }

  function table(rows) {
    const body = document.querySelector("#bound-table tbody");
    body.innerHTML = rows.filter((r) => r.value != null || r.threshold != null).map((r) =>
      "<tr" + (r.best ? ' style="font-weight:600"' : "") + "><td>" + r.label + (r.best ? " <span class=\"badge PASS\">B*</span>" : "") + "</td>" +
      '<td class="right mono">' + fmt(r.value) + "</td>" +
      '<td class="right mono">' + r.parameter + " ≤ " + (r.threshold == null ? "∞ (no constraint)" : fmt(r.threshold)) + "</td>" +
      "<td>" + (r.value == null ? "" : r.within_budget ? '<span class="badge PASS">within E</span>' : '<span class="badge FAIL">over E</span>') + "</td></tr>").join("");
  }

  function init(opts) {
    const input = document.getElementById("budget");
    function load() {
      const budget = parseFloat(input.value);
      if (!(budget > 0)) { input.setCustomValidity("a positive number"); input.reportValidity(); return; }
      input.setCustomValidity("");
      fetch(opts.figures + "?budget=" + encodeURIComponent(budget), {credentials: "same-origin"})
        .then((r) => r.json()).then((f) => {
          if (f.error) { alert(f.error.message); return; }
          draw("fig-bounds", f.bound_tightness); draw("fig-steps", f.steps);
          if (f.step_metrics) { draw("fig-step-mismatch", f.step_metrics.mismatch); draw("fig-step-weights", f.step_metrics.weights); } draw("fig-dist", f.distributions);
          draw("fig-status", f.token_status); draw("fig-length", f.acceptance_by_length); table(f.bound_table);
          document.body.dataset.figures = "ready";
        });
    }
    document.getElementById("budget-apply").addEventListener("click", load);
    input.addEventListener("keydown", (e) => { if (e.key === "Enter") load(); });
    load();
  }
  window.RunPage = { init };
})();
