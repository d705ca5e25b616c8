// Live job progress over websockets, with a polling fallback so a page whose socket drops still ends
// showing the job's final state.
(function () {
  "use strict";
  const wsUrl = (path) => (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
  const pct = (p) => Math.round((p || 0) * 100);
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const terminal = (state) => ["succeeded", "failed", "cancelled"].includes(state);

  function connect(path, onJob, dot, onDown) {
    let socket, retry = 1000, closedByUs = false;
    function open() {
      socket = new WebSocket(wsUrl(path));
      socket.onopen = () => { retry = 1000; if (dot) dot.classList.add("on"); };
      socket.onmessage = (ev) => { const msg = JSON.parse(ev.data); if (msg.type === "job") onJob(msg.job); };
      socket.onclose = () => {
        if (dot) dot.classList.remove("on");
        if (closedByUs) return;
        if (onDown) onDown();
        setTimeout(open, retry); retry = Math.min(retry * 2, 15000);
      };
    }
    open();
    return { close() { closedByUs = true; socket.close(); } };
  }

  function renderJob(card, job) {
    // A fetch answered after a newer websocket event must not take the job back (e.g. succeeded → running 50%).
    const seen = Date.parse(card.dataset.updatedAt || ""), at = Date.parse(job.updated_at || "");
    if (at < seen) return;
    if (at) card.dataset.updatedAt = job.updated_at;
    const state = card.querySelector("[data-field=state]");
    state.textContent = job.state; state.className = "badge " + job.state;
    const bar = card.querySelector("[data-field=progress]");
    bar.style.width = pct(job.progress) + "%";
    bar.parentElement.className = "progress" + (job.state === "succeeded" ? " done" : job.state === "failed" ? " failed" : "");
    const p = document.getElementById("job-pct"); if (p) p.textContent = pct(job.progress) + "%";
    const m = card.querySelector("[data-field=message]"); if (m) m.textContent = job.message || "";
    const err = document.getElementById("job-error");
    if (err) { err.textContent = job.error || ""; err.style.display = job.error ? "" : "none"; }
    const set = (id, v) => { const el = document.getElementById(id); if (el) el.textContent = v; };
    set("job-attempts", job.attempts);
    const when = (iso) => iso ? new Date(iso).toLocaleString() : "—";
    set("job-started", when(job.started_at));
    set("job-finished", when(job.finished_at));
    const stage = document.getElementById("subject-stage");
    if (stage && job.result && job.result.stage) { stage.textContent = job.result.stage; stage.className = "badge " + job.result.stage; }
    set("job-result", JSON.stringify(job.result || {}, null, 2));
    card.dataset.state = job.state;
  }

  function job(card, dot) {
    let poller = null;
    const poll = () => fetch(card.dataset.api, {credentials: "same-origin"}).then((r) => r.ok ? r.json() : null).then((j) => {
      if (!j) return; renderJob(card, j); if (terminal(j.state) && poller) { clearInterval(poller); poller = null; }
    }).catch(() => {});
    connect(card.dataset.socket, (j) => {
      renderJob(card, j);
      if (poller) { clearInterval(poller); poller = null; }
    }, dot, () => { if (!poller && !terminal(card.dataset.state)) { poll(); poller = setInterval(poll, 3000); } });
  }

  function feed(tbody, dot) {
    const jobUrl = tbody.dataset.jobUrl;
    connect(tbody.dataset.feed, (j) => {
      let row = tbody.querySelector('tr[data-job-id="' + j.id + '"]');
      const html = '<td><a href="' + jobUrl + j.id + '/">#' + j.id + '</a></td><td>' + esc(j.title || j.kind) + '</td>' +
        '<td><span class="badge ' + esc(j.state) + '" data-field="state">' + esc(j.state) + '</span></td>' +
        '<td><div class="progress' + (j.state === "succeeded" ? " done" : j.state === "failed" ? " failed" : "") + '"><div data-field="progress" style="width:' + pct(j.progress) + '%"></div></div></td>' +
        '<td class="muted" data-field="message">' + esc((j.error || j.message || "").slice(0, 90)) + '</td><td class="muted">just now</td>';
      if (!row) {
        row = document.createElement("tr"); row.dataset.jobId = j.id; tbody.prepend(row);
        const empty = document.getElementById("feed-empty"); if (empty) empty.remove();
      } else {
        const when = row.lastElementChild ? row.lastElementChild.textContent : "";
        row.innerHTML = html; row.lastElementChild.textContent = when; return;
      }
      row.innerHTML = html;
    }, dot);
  }

  window.LivePortal = { job, feed, connect };
})();

// Selects that navigate when changed. No inline event handlers anywhere: the Content-Security-Policy forbids them.
//   <select data-navigate-href>            → location.href = option value
//   <select data-navigate-query="name">    → location.search = "?name=" + option value
document.addEventListener("change", (ev) => {
  const el = ev.target;
  if (!(el instanceof HTMLSelectElement) || !el.value) return;
  if (el.dataset.navigateHref !== undefined) location.href = el.value;
  else if (el.dataset.navigateQuery) location.search = "?" + encodeURIComponent(el.dataset.navigateQuery) + "=" + encodeURIComponent(el.value);
});
