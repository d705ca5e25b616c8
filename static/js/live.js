// Live job progress over websockets, with a polling fallback so a page whose socket drops still ends showing the
// job's final state. On a project's pages one socket follows the project's jobs (/ws/projects/<slug>/feed/): the
// activity feed, the uploads table and the upload banner listen to it, and a job that finishes while the page is
// open raises a notification (in the page; in the browser too once the user allows it).
(function () {
  "use strict";
  const wsUrl = (path) => (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
  const pct = (p) => Math.round((p || 0) * 100);
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const terminal = (state) => ["succeeded", "failed", "cancelled"].includes(state);
  const outcomeOf = (job) => job.outcome || {text: job.state, tone: job.state};

  // A form that deletes or revokes says so in data-confirm and asks first (every page loads this file).
  document.addEventListener("submit", (ev) => {
    const message = ev.target.dataset && ev.target.dataset.confirm;
    if (message && !window.confirm(message)) ev.preventDefault();
  });

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

  // "3 minutes ago" from an ISO time, against the browser's clock corrected by the server's (body[data-server-now]).
  const skew = (() => {
    const now = Date.parse(document.body.dataset.serverNow || "");
    return isNaN(now) ? 0 : Date.now() - now;
  })();
  function ago(iso) {
    const t = Date.parse(iso || "");
    if (isNaN(t)) return "";
    const s = Math.max(0, Math.round((Date.now() - skew - t) / 1000));
    const unit = (n, w) => n + " " + w + (n === 1 ? "" : "s") + " ago";
    if (s < 45) return "just now";
    if (s < 3600) return unit(Math.round(s / 60), "minute");
    if (s < 86400) return unit(Math.round(s / 3600), "hour");
    return unit(Math.round(s / 86400), "day");
  }

  // The state badge in plain words ("finished: invalid (3 errors)") and, once succeeded, a link to what it made.
  function stateHtml(job, linkId) {
    const o = outcomeOf(job);
    return '<span class="badge ' + esc(o.tone) + '" data-field="state" data-state="' + esc(job.state) + '">' + esc(o.text) + "</span>" +
      (o.product_url ? ' <a data-field="product"' + (linkId ? ' id="' + linkId + '"' : "") + ' href="' + esc(o.product_url) + '">' + esc(o.product) + "</a>" : "");
  }
  function setBadge(el, job) {
    if (!el) return;
    const o = outcomeOf(job);
    el.textContent = o.text; el.className = "badge " + o.tone; el.dataset.state = job.state;
  }
  function setBar(bar, job) {
    if (!bar) return;
    bar.style.width = pct(job.progress) + "%";
    bar.parentElement.className = "progress" + (job.state === "succeeded" ? " done" : job.state === "failed" ? " failed" : "");
    bar.parentElement.setAttribute("aria-valuenow", pct(job.progress));
  }

  function renderJob(card, job) {
    // A fetch answered after a newer websocket event must not take the job back (e.g. succeeded → running 50%).
    const seen = Date.parse(card.dataset.updatedAt || ""), at = Date.parse(job.updated_at || "");
    if (at < seen) return;
    if (at) card.dataset.updatedAt = job.updated_at;
    setBadge(card.querySelector("[data-field=state]"), job);
    setBar(card.querySelector("[data-field=progress]"), job);
    const p = document.getElementById("job-pct"); if (p) p.textContent = pct(job.progress) + "%";
    const m = card.querySelector("[data-field=message]"); if (m) m.textContent = job.message || "";
    const err = document.getElementById("job-error");
    if (err) { err.textContent = job.error || ""; err.style.display = job.error ? "" : "none"; }
    const product = card.querySelector("#job-product"), o = outcomeOf(job);
    if (product && o.product_url) {
      product.innerHTML = 'Produced: <a id="job-product-link" href="' + esc(o.product_url) + '">the ' + esc(o.product) + "</a>";
      product.hidden = false;
    }
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

  // --- the project's jobs: one socket per page, many listeners ---------------------------------------------------
  const listeners = [], dots = [];
  let feedSocket = null;
  function onProjectJob(fn, dot) {
    listeners.push(fn);
    if (dot) { dots.push(dot); if (feedSocket && feedSocket.open) dot.classList.add("on"); }
  }
  function startProjectFeed() {
    const path = document.body.dataset.projectFeed;
    if (!path || !("WebSocket" in window)) return;
    feedSocket = {open: false};
    const dotProxy = {classList: {
      add: () => { feedSocket.open = true; dots.forEach((d) => d.classList.add("on")); },
      remove: () => { feedSocket.open = false; dots.forEach((d) => d.classList.remove("on")); }}};
    connect(path, (j) => listeners.forEach((fn) => { try { fn(j); } catch (e) { console.error(e); } }), dotProxy);
  }

  // The overview's activity feed: rows kept newest first (by creation time, then id), whatever order events arrive.
  function feedRow(j, jobUrl) {
    return '<td><a href="' + jobUrl + j.id + '/">#' + j.id + "</a></td><td>" + esc(j.title || j.kind) + "</td>" +
      "<td>" + stateHtml(j) + "</td>" +
      '<td><div class="progress' + (j.state === "succeeded" ? " done" : j.state === "failed" ? " failed" : "") + '" role="progressbar" aria-label="Job #' + j.id +
      ' progress" aria-valuemin="0" aria-valuemax="100" aria-valuenow="' + pct(j.progress) + '"><div data-field="progress" style="width:' + pct(j.progress) + '%"></div></div></td>' +
      '<td class="muted" data-field="message">' + esc((j.error || j.message || "").slice(0, 90)) + "</td>" +
      '<td class="muted"><time datetime="' + esc(j.created_at) + '">' + esc(ago(j.created_at)) + "</time></td>";
  }
  const newer = (a, b) => {  // does row/job a sort before b (newest first)?
    const ta = Date.parse(a.created || ""), tb = Date.parse(b.created || "");
    return ta !== tb ? ta > tb : Number(a.id) > Number(b.id);
  };
  // ``data-subject-upload`` on the tbody: only that upload's jobs (the upload page).
  function feed(tbody, dot) {
    const jobUrl = tbody.dataset.jobUrl, limit = Number(tbody.dataset.limit || 15);
    const upload = tbody.dataset.subjectUpload;
    onProjectJob((j) => {
      if (upload && !(j.subject_kind === "upload" && String(j.subject_id) === upload)) return;
      let row = tbody.querySelector('tr[data-job-id="' + j.id + '"]');
      if (!row) {
        row = document.createElement("tr"); row.dataset.jobId = j.id; row.dataset.created = j.created_at || "";
        const key = {created: row.dataset.created, id: j.id};
        const before = Array.from(tbody.rows).find((r) => newer(key, {created: r.dataset.created, id: r.dataset.jobId}));
        tbody.insertBefore(row, before || null);
        while (tbody.rows.length > limit) tbody.deleteRow(tbody.rows.length - 1);
        const empty = document.getElementById("feed-empty"); if (empty) empty.remove();
      }
      if (row.parentNode) row.innerHTML = feedRow(j, jobUrl);
    }, dot);
    setInterval(() => tbody.querySelectorAll("time[datetime]").forEach((t) => { t.textContent = ago(t.getAttribute("datetime")); }), 30000);
  }

  // Upload rows (includes/upload_row.html) follow their validation job: the stage badge turns valid / invalid.
  function uploadRows() {
    onProjectJob((j) => {
      if (j.subject_kind !== "upload" || j.kind !== "validate_upload") return;
      document.querySelectorAll('[data-upload-id="' + j.subject_id + '"] [data-field=stage]').forEach((badge) => {
        const stage = j.state === "succeeded" && j.result && j.result.stage ? j.result.stage : j.state === "running" ? "processing" : null;
        if (!stage) return;
        badge.textContent = stage === "invalid" ? outcomeOf(j).text.replace(/^finished: /, "") : stage;
        badge.className = "badge " + stage;
      });
    });
  }

  // --- notifications ----------------------------------------------------------------------------------------------
  const TOAST_MS = 15000;
  function notifications() {
    const region = document.getElementById("toasts");
    if (!region) return;
    const since = Date.parse(document.body.dataset.serverNow || "") || 0;
    const states = {}, told = new Set();
    onProjectJob((j) => {
      const before = states[j.id];
      states[j.id] = j.state;
      if (!terminal(j.state) || told.has(j.id)) return;
      // finished while this page was open: seen running/queued here, or finished after the page was served
      const finishedNow = (before && !terminal(before)) || Date.parse(j.finished_at || "") >= since;
      if (!finishedNow) return;
      told.add(j.id);
      const o = outcomeOf(j), title = j.title || j.kind;
      const toast = document.createElement("div");
      toast.className = "toast " + o.tone; toast.dataset.jobId = j.id;
      toast.innerHTML = '<a href="/jobs/' + j.id + '/">Job #' + j.id + "</a> · " + esc(title) + ": <strong>" + esc(o.text) + "</strong>" +
        (o.product_url ? ' · <a href="' + esc(o.product_url) + '">open the ' + esc(o.product) + "</a>" : "") +
        ' <button type="button" class="toast-close" aria-label="Dismiss">×</button>';
      toast.querySelector(".toast-close").addEventListener("click", () => toast.remove());
      // dismissed by itself after a while, unless the pointer or focus is on it (then it waits until they leave)
      let timer = null;
      const later = () => { clearTimeout(timer); timer = setTimeout(() => toast.remove(), TOAST_MS); };
      toast.addEventListener("mouseenter", () => clearTimeout(timer)); toast.addEventListener("mouseleave", later);
      toast.addEventListener("focusin", () => clearTimeout(timer)); toast.addEventListener("focusout", later);
      later();
      region.appendChild(toast);
      while (region.children.length > 4) region.firstElementChild.remove();
      if ("Notification" in window && Notification.permission === "granted") {
        try { new Notification("Audit Portal · job #" + j.id + " " + o.text, {body: title, tag: "audit-portal-job-" + j.id}); } catch (e) { /* not allowed here */ }
      }
    });
    const ask = document.getElementById("notify-ask");
    if (ask && "Notification" in window && Notification.permission === "default") {
      ask.hidden = false;
      ask.addEventListener("click", () => Notification.requestPermission().then((p) => {
        ask.hidden = true; document.body.dataset.notificationPermission = p;
      }));
    }
  }

  window.LivePortal = { job, feed, connect, onProjectJob, uploadRows, stateHtml, esc, ago };
  notifications();
  uploadRows();
  startProjectFeed();
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

// The header's menu button (narrow screens): opens and closes the navigation.
(function () {
  const toggle = document.getElementById("nav-toggle"), menu = document.getElementById("site-menu");
  if (!toggle || !menu) return;
  toggle.addEventListener("click", () => {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    menu.classList.toggle("open", open);
  });
})();
