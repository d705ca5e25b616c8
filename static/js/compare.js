// Compare page: draw the runs' figures (Plotly JSON built server-side, embedded in the page).
(function () {
  "use strict";
  const figures = JSON.parse(document.getElementById("compare-figures").textContent);
  Promise.all([["fig-cmp-bounds", figures.bounds], ["fig-cmp-steps", figures.steps], ["fig-cmp-step-eps", figures.step_eps],
    ["fig-cmp-step-logp", figures.step_logp], ["fig-cmp-eps", figures.eps]]
    .map(([id, fig]) => PortalFigures.draw(id, fig))).then(() => { document.body.dataset.figures = "ready"; });
})();
