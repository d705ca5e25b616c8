// Drawing the server-built Plotly figures: the skeleton placeholder goes when the figure is drawn, a figure with
// nothing to show becomes a sentence instead of empty axes, and the colours follow the page's light or dark theme.
(function () {
  "use strict";
  const config = {responsive: true, displaylogo: false};
  const dark = () => window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;

  function themed(layout) {
    if (!dark()) return layout;
    const ink = "#e4e9f2", grid = "#2b3547";
    const axis = (a) => Object.assign({}, a || {}, {gridcolor: grid, zerolinecolor: grid, linecolor: grid, color: ink});
    const out = Object.assign({}, layout, {paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: Object.assign({}, layout.font || {}, {color: ink})});
    Object.keys(layout).filter((k) => /^[xy]axis\d*$/.test(k)).forEach((k) => { out[k] = axis(layout[k]); });
    if (!out.xaxis) out.xaxis = axis({}); if (!out.yaxis) out.yaxis = axis({});
    if (out.template && out.template.layout) out.template = {data: out.template.data, layout: {}};
    return out;
  }

  const hasData = (fig) => (fig.data || []).some((t) => ["x", "y", "values"].some((k) => Array.isArray(t[k]) && t[k].length));

  // Draw ``fig`` into the element ``target`` (an id or an element); resolves when drawn (or replaced by ``empty``).
  function draw(target, fig, empty) {
    const el = typeof target === "string" ? document.getElementById(target) : target;
    if (!el || !fig) return Promise.resolve();
    el.querySelectorAll(".skeleton, .empty-state").forEach((x) => x.remove());
    const title = ((fig.layout || {}).title || {}).text || (typeof (fig.layout || {}).title === "string" ? fig.layout.title : "");
    if (!el.getAttribute("aria-label") && title) {  // a figure's accessible name: its title
      if (el.tagName !== "FIGURE") el.setAttribute("role", "figure");
      el.setAttribute("aria-label", title.replace(/<[^>]+>/g, ""));
    }
    if (!hasData(fig)) {
      if (window.Plotly && el.classList.contains("js-plotly-plot")) Plotly.purge(el);
      const note = document.createElement("div");
      note.className = "empty-state"; note.textContent = empty || el.dataset.empty || "Nothing to show yet.";
      el.appendChild(note);
      return Promise.resolve();
    }
    return Plotly.react(el, fig.data, themed(fig.layout || {}), config);
  }

  window.PortalFigures = { draw };
})();
