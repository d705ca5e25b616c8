// A run that grows while it trains: the "run so far" card follows /ws/runs/<id>/live/ (audit_portal/live). Each
// message carries the whole view (headline numbers, per-step series, budget verdicts), so a message that is missed
// costs nothing: the next one, or the snapshot sent on reconnect, brings the page up to date. Alert events for the
// run appear above the numbers.
(function () {
  "use strict";
  const card = document.getElementById("live-run");
  if (!card) return;
  const fmt = (v, d) => v == null ? "—" : Number(v).toFixed(d);
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const set = (id, v) => { const el = document.getElementById(id); if (el) el.textContent = v; };

  function draw(live) {
    const s = live.series || {}, x = s.step || [];
    if (!window.Plotly || !x.length) return;
    const line = (name, y, axis, dash) => ({type: "scatter", mode: "lines+markers", name, x, y, yaxis: axis, line: {dash: dash || "solid"}});
    Plotly.react("fig-live", [
      line("ε̂ (largest per step)", s.eps_hat_max, "y"), line("acceptance", s.acceptance_rate, "y"),
      line("|Δ log p| mean", s.abs_diff_mean, "y2", "dot"), line("|Δ log p| p99", s.abs_diff_p99, "y2", "dot"),
      line("MIS mask rate", s.mis_mask_rate, "y", "dash")],
      {margin: {t: 10, r: 60, b: 40, l: 50}, height: 320, xaxis: {title: {text: "step"}},
       yaxis: {title: {text: "ε̂, acceptance, mask rate"}, rangemode: "tozero"},
       yaxis2: {title: {text: "|Δ log p|"}, overlaying: "y", side: "right", rangemode: "tozero"},
       legend: {orientation: "h", y: -0.25}}, {displaylogo: false, responsive: true});
  }

  function render(live) {
    if (!live) return;
    card.hidden = false;
    card.dataset.steps = live.steps;
    set("live-state", "steps " + live.first_step + "–" + live.last_step + " · " + live.steps + " step" + (live.steps === 1 ? "" : "s") + " from " + live.uploads + " segment" + (live.uploads === 1 ? "" : "s"));
    const sm = live.summary || {};
    set("live-eps", fmt(sm.eps_hat, 4));
    set("live-accept", sm.acceptance_rate == null ? "—" : Math.round(sm.acceptance_rate * 100) + "%");
    set("live-accept-of", (sm.accepted || 0) + " of " + (sm.sequences || 0) + " sequences");
    set("live-best", fmt(live.best_bound, 4));
    set("live-tref", sm.T_ref == null ? "—" : sm.T_ref);
    const b = (live.budgets || [])[0], box = document.getElementById("live-budget");
    if (b && box) {
      box.innerHTML = '<span class="badge ' + (b.meets ? "PASS" : "FAIL") + '" data-meets="' + b.meets + '">' + (b.meets ? "meets " : "over ") + esc(Number(b.budget).toPrecision(4)) + "</span>";
      set("live-budget-note", b.name + ": B* of the whole run so far against the budget");
    }
    draw(live);
  }

  function alert(a) {
    const box = document.getElementById("live-alerts");
    if (!box) return;
    const div = document.createElement("div");
    div.className = "alert " + (a.kind === "fired" ? "error" : "ok");
    div.setAttribute("role", "alert");
    div.dataset.alertId = a.id;
    div.innerHTML = "<strong>" + (a.kind === "fired" ? "Alert fired" : "Alert re-armed") + ": " + esc(a.rule_name) + "</strong> — " + esc(a.message);
    box.prepend(div);
  }

  const initial = document.getElementById("live-initial");
  const first = initial ? JSON.parse(initial.textContent) : null;
  document.addEventListener("DOMContentLoaded", () => render(first), {once: true});
  let retry = 1000;
  function open() {
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/runs/" + card.dataset.runId + "/live/");
    const dot = document.getElementById("run-live-dot");
    ws.onopen = () => { retry = 1000; if (dot) dot.classList.add("on"); };
    ws.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.type === "live") render(msg.live);
      else if (msg.type === "alert") alert(msg.alert);
    };
    ws.onclose = () => { if (dot) dot.classList.remove("on"); setTimeout(open, retry); retry = Math.min(retry * 2, 15000); };
  }
  open();
})();
