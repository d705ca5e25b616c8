// Kernel submission page: the job's progress arrives over /ws/jobs/<id>/ (LivePortal.connect); each event
// that may carry a new verdict (the worker forces one per finished contract) fetches the submission and
// fills in the rows that landed — no reload. Polls instead while the socket is down.
(function () {
  "use strict";
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const terminal = (state) => ["succeeded", "failed", "cancelled"].includes(state);
  const sig = (x) => x == null ? "∞" : Number(x).toPrecision(3).replace(/\.?0+(e|$)/, "$1");
  const margin = (v) => v.margin_infinite ? "∞" : (v.margin == null ? "—" : sig(v.margin));

  function renderJob(card, job) {
    // A fetch answered after a newer websocket event must not take the job back (e.g. succeeded → running 50%).
    const seen = Date.parse(card.dataset.updatedAt || ""), at = Date.parse(job.updated_at || "");
    if (at < seen) return;
    if (at) card.dataset.updatedAt = job.updated_at;
    const state = document.getElementById("job-state");
    // what the kernel got once its job ends (jobs/outcomes.py: "finished: 2 of 6 contracts failed"), else the state
    const o = job.outcome || {text: job.state, tone: job.state};
    state.textContent = o.text; state.className = "badge " + o.tone; state.dataset.state = job.state;
    const bar = document.getElementById("job-progress");
    bar.style.width = Math.round((job.progress || 0) * 100) + "%";
    bar.parentElement.className = "progress" + (job.state === "succeeded" ? " done" : job.state === "failed" ? " failed" : "");
    document.getElementById("job-pct").textContent = Math.round((job.progress || 0) * 100) + "%";
    document.getElementById("job-message").textContent = job.message || "";
    const err = document.getElementById("job-error");
    err.textContent = job.error || ""; err.style.display = job.error ? "" : "none";
    card.dataset.state = job.state;
  }

  function renderVerdicts(card, sub) {
    for (const v of sub.verdicts) {
      const row = card.querySelector('tr[data-contract="' + CSS.escape(v.contract_id) + '"]');
      if (!row || row.dataset.verdict === v.verdict) continue;
      const cells = row.querySelectorAll("td");
      cells[2].innerHTML = '<span class="badge ' + esc(v.verdict) + '">' + esc(v.verdict) + "</span>";
      cells[3].textContent = v.statistic == null && v.verdict !== "FAIL" ? "" : sig(v.statistic);
      cells[4].textContent = v.bound == null ? "" : sig(v.bound);
      cells[5].textContent = margin(v);
      cells[6].textContent = (v.reason || "").slice(0, 220);
      row.dataset.verdict = v.verdict;
      row.classList.remove("pending"); row.classList.add("landed");
    }
    if (sub.kc_c) {
      const FAMILIES = ["PRC", "ORD", "CMP", "EXC"];
      const vector = (v) => FAMILIES.filter((fam) => fam in v).map((fam) =>
        esc(fam) + '<b class="l' + (v[fam] == null ? "x" : v[fam]) + '">' + (v[fam] == null ? "–" : v[fam]) + "</b>").join(" ");
      let html = '<p class="kc" style="font-size:15px">KC-C ' + vector(sub.kc_c) + "</p>";
      const kcA = (sub.grade || {}).kc_a;
      if (kcA && Object.keys(sub.deployment_flags || {}).length) {
        html += '<p class="kc" style="font-size:15px" id="kc-a">KC-A ' + vector(kcA) + "</p>";
      }
      if (kcA && Object.keys(sub.target || {}).length) {  // the engine judged KC-T against KC-A (= KC-C without flags)
        html += '<p class="kc" id="kc-t">KC-T ' + FAMILIES.filter((fam) => fam in sub.target).map((fam) =>
          esc(fam) + " ≥ " + sub.target[fam] + " " + ((sub.grade.meets_target || {})[fam] ? '<span class="badge PASS">met</span>'
            : '<span class="badge FAIL">below (' + (kcA[fam] == null ? "–" : kcA[fam]) + ")</span>")).join(" ") + "</p>";
      }
      document.getElementById("grade").innerHTML = html;
      const pending = document.getElementById("deployment-pending");
      const again = (sub.grade || {}).deployment_verdicts;
      if (pending && again) {  // the classes measured a second time under the deployment flags
        pending.outerHTML = again.length ? '<table class="small" id="deployment-verdicts"><thead><tr><th>Class measured again</th>' +
          "<th>Verdict</th><th>Reason</th></tr></thead><tbody>" + again.map((d) => '<tr><td class="mono">' + esc(d.contract_class) +
          '</td><td><span class="badge ' + esc(d.verdict) + '">' + esc(d.verdict) + '</span></td><td class="muted">' +
          esc((d.reason || "").slice(0, 160)) + "</td></tr>").join("") + "</tbody></table>"
          : '<p class="muted small">None of the planned classes is affected by these flags: KC-A = KC-C.</p>';
      }
      const badge = document.getElementById("badge-img");
      if (badge) {
        badge.src = badge.src.split("&t=")[0] + "&t=" + Date.now();
        fetch(badge.dataset.status, {credentials: "same-origin"}).then((r) => r.ok ? r.json() : null).then((st) => {
          const el = document.getElementById("ci-state"); if (st && el) el.textContent = st.state;
        }).catch(() => {});
      }
    }
  }

  function submission(card, dot) {
    let lastMessage = null, poller = null, fetching = false, again = false;
    const refresh = () => {
      if (fetching) { again = true; return; }
      fetching = true;
      fetch(card.dataset.api, {credentials: "same-origin"}).then((r) => r.ok ? r.json() : null).then((sub) => {
        if (sub) { renderVerdicts(card, sub); if (sub.job) renderJob(card, sub.job); }
      }).catch(() => {}).finally(() => {
        fetching = false;
        if (again) { again = false; refresh(); }
        if (terminal(card.dataset.state) && poller) { clearInterval(poller); poller = null; }
      });
    };
    refresh();
    if (!card.dataset.socket) return;
    LivePortal.connect(card.dataset.socket, (job) => {
      renderJob(card, job);
      if (poller) { clearInterval(poller); poller = null; }
      if (job.message !== lastMessage || terminal(job.state)) { lastMessage = job.message; refresh(); }
    }, dot, () => { if (!poller && !terminal(card.dataset.state)) { poller = setInterval(refresh, 2000); } });
  }

  window.KernelsPortal = { submission };
})();
