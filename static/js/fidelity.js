// Fidelity pages: draw the server-built Plotly figures; show a token's details on hover in the call drill-down;
// follow a running audit job live.
(function () {
  "use strict";
  const config = {responsive: true, displaylogo: false};

  function drawFigures(scriptId) {
    const node = document.getElementById(scriptId);
    if (!node || !window.Plotly) return;
    const figures = JSON.parse(node.textContent);
    const pending = [];
    document.querySelectorAll("[data-figure]").forEach((el) => {
      const fig = figures[el.dataset.figure];
      if (fig) pending.push(Plotly.react(el, fig.data, fig.layout, config));
    });
    Promise.all(pending).then(() => { document.body.dataset.figures = "ready"; });
  }

  function tokens(containerId, detailId) {
    const box = document.getElementById(containerId), detail = document.getElementById(detailId);
    if (!box || !detail) return;
    box.addEventListener("mouseover", (e) => {
      const t = e.target.closest(".tok");
      if (!t) return;
      box.querySelectorAll(".tok.hover").forEach((x) => x.classList.remove("hover"));
      t.classList.add("hover");
      const reasons = t.dataset.reasons ? t.dataset.reasons.split(" ") : [];
      detail.textContent = "#" + t.dataset.pos + " · id " + t.dataset.id + (t.dataset.text !== undefined ? " · " + JSON.stringify(t.dataset.text) : "") +
        " · " + (reasons.length ? reasons.join(", ") : "verifiable") +
        " · rollout " + (t.dataset.rollout || "—") + " · trainer " + (t.dataset.trainer || "—") +
        (t.dataset.used === "1" ? " · used in the loss" : t.dataset.used === "0" ? " · not used in the loss" : "");
      detail.classList.remove("muted");
      detail.dataset.pos = t.dataset.pos;
    });
  }

  // A running audit job: progress live over /ws/jobs/<id>/ (LivePortal, polling when the socket is down); when it
  // succeeds the page reloads to show the stored report.
  function followJobs() {
    if (!window.LivePortal) return;
    document.querySelectorAll("[data-live-job]").forEach((card) => {
      const pct = card.querySelector("[data-field=pct]");
      new MutationObserver(() => {
        const bar = card.querySelector("[data-field=progress]");
        if (pct && bar) pct.textContent = bar.style.width;
        if (card.dataset.state === "succeeded") location.reload();
      }).observe(card, {attributes: true, subtree: true, attributeFilter: ["data-state", "style"]});
      LivePortal.job(card, card.querySelector("[data-field=dot]"));
    });
  }

  window.FidelityPage = { drawFigures, tokens, followJobs };
})();
