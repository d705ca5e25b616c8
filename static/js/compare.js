// Compare page: draw the two-certificate figures (Plotly JSON built server-side, embedded in the page).
(function () {
  "use strict";
  const figures = JSON.parse(document.getElementById("compare-figures").textContent);
  const config = {responsive: true, displaylogo: false};
  const draws = [["fig-cmp-bounds", figures.bounds], ["fig-cmp-steps", figures.steps], ["fig-cmp-eps", figures.eps]]
    .map(([id, fig]) => Plotly.react(id, fig.data, fig.layout, config));
  Promise.all(draws).then(() => { document.body.dataset.figures = "ready"; });
})();
