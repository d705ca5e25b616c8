// The alerts page, live: each event of the project's rules (/ws/projects/<slug>/alerts/) is added to the events
// table and flips the rule's state for that run in the rules table, without a reload.
(function () {
  "use strict";
  const page = document.getElementById("alerts-page");
  if (!page) return;
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const runUrl = (id) => "/p/" + page.dataset.slug + "/runs/" + id + "/";

  function add(a) {
    const fired = a.kind === "fired";
    const body = document.querySelector("#event-table tbody");
    if (body && !body.querySelector('[data-event-id="' + a.id + '"]')) {
      const empty = body.querySelector("td[colspan]");
      if (empty) empty.parentElement.remove();
      const tr = document.createElement("tr");
      tr.dataset.eventId = a.id;
      tr.innerHTML = '<td class="muted">' + esc(a.created_at.replace("T", " ").slice(0, 19)) + "</td><td>" + esc(a.rule_name) + "</td>" +
        '<td><a href="' + runUrl(a.run) + '">' + esc(a.run_name) + "</a></td>" +
        '<td><span class="badge ' + (fired ? "failed" : "succeeded") + '">' + (fired ? "fired" : "re-armed") + "</span></td>" +
        '<td class="right mono">' + (a.value == null ? "—" : esc(Number(a.value).toPrecision(6))) + '</td><td class="small">' + esc(a.message) + "</td>";
      body.prepend(tr);
    }
    const cell = document.querySelector('#rule-table tr[data-rule-id="' + a.rule + '"] td[data-field="states"]');
    if (!cell) return;
    let row = cell.querySelector('[data-run-id="' + a.run + '"]');
    if (!row) {
      const empty = cell.querySelector(".muted.none");
      if (empty) empty.remove();
      row = document.createElement("div");
      row.dataset.runId = a.run;
      cell.prepend(row);
    }
    row.innerHTML = '<a href="' + runUrl(a.run) + '">' + esc(a.run_name) + '</a> <span class="badge ' + (fired ? "failed" : "succeeded") +
      '" data-field="state">' + (fired ? "firing" : "armed") + '</span> <span class="muted small">' + esc(a.message) + "</span>";
  }

  let retry = 1000;
  function open() {
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/projects/" + page.dataset.slug + "/alerts/");
    ws.onopen = () => { retry = 1000; page.dataset.live = "on"; };
    ws.onmessage = (ev) => { const msg = JSON.parse(ev.data); if (msg.type === "alert") add(msg.alert); };
    ws.onclose = () => { page.dataset.live = "off"; setTimeout(open, retry); retry = Math.min(retry * 2, 15000); };
  }
  open();
})();
