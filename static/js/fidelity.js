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
      // PortalFigures (static/js/figures.js): a figure with nothing to show reads as a sentence, colours follow the theme
      if (fig) pending.push(window.PortalFigures ? PortalFigures.draw(el, fig) : Plotly.react(el, fig.data, fig.layout, config));
    });
    Promise.all(pending).then(() => { document.body.dataset.figures = "ready"; });
  }

  // A token's details on hover, and from the keyboard: the tokens form one tab stop (roving tabindex); arrow keys,
  // Home and End move between them and the focused token's details are shown (and announced) as on hover.
  function tokens(containerId, detailId) {
    const box = document.getElementById(containerId), detail = document.getElementById(detailId);
    if (!box || !detail) return;
    const all = Array.from(box.querySelectorAll(".tok"));
    if (!all.length) return;
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", "Response tokens: use the arrow keys to read each token's details");
    detail.setAttribute("aria-live", "polite");
    all.forEach((t, i) => { t.tabIndex = i === 0 ? 0 : -1; });
    function show(t) {
      box.querySelectorAll(".tok.hover").forEach((x) => x.classList.remove("hover"));
      t.classList.add("hover");
      const reasons = t.dataset.reasons ? t.dataset.reasons.split(" ") : [];
      detail.textContent = "#" + t.dataset.pos + " · id " + t.dataset.id + (t.dataset.text !== undefined ? " · " + JSON.stringify(t.dataset.text) : "") +
        " · " + (reasons.length ? reasons.join(", ") : "verifiable") +
        " · rollout " + (t.dataset.rollout || "—") + " · trainer " + (t.dataset.trainer || "—") +
        (t.dataset.used === "1" ? " · used in the loss" : t.dataset.used === "0" ? " · not used in the loss" : "");
      detail.classList.remove("muted");
      detail.dataset.pos = t.dataset.pos;
    }
    box.addEventListener("mouseover", (e) => { const t = e.target.closest(".tok"); if (t) show(t); });
    box.addEventListener("focusin", (e) => { const t = e.target.closest(".tok"); if (t) show(t); });
    box.addEventListener("keydown", (e) => {
      const i = all.indexOf(document.activeElement);
      if (i < 0) return;
      const next = {ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: all.length - 1}[e.key];
      if (next === undefined || next < 0 || next >= all.length) return;
      e.preventDefault();
      all[i].tabIndex = -1; all[next].tabIndex = 0; all[next].focus();
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
