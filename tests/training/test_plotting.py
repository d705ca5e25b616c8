"""Figures written for docs/ and bench/out load the vendored plotly.js by a relative path: they work offline."""

import re
from pathlib import Path

import plotly.graph_objects as go

from workers.training.plotting import VENDORED_PLOTLY, write_html

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
SCRIPT_SRC = re.compile(r'<script[^>]*\bsrc="([^"]+)"')


def test_written_figure_points_at_the_vendored_plotly(tmp_path):
    out = tmp_path / "a" / "b"
    out.mkdir(parents=True)
    write_html(go.Figure(go.Scatter(x=[1, 2], y=[3, 4])), out / "fig.html")
    html = (out / "fig.html").read_text()
    (src,) = SCRIPT_SRC.findall(html)
    assert not src.startswith(("http:", "https:", "//")) and (out / src).resolve() == VENDORED_PLOTLY
    assert VENDORED_PLOTLY.stat().st_size > 1_000_000  # the real library, not a stub
    assert len(html) < 100_000  # plotly.js is referenced, not inlined


def test_docs_figures_load_no_cdn():
    pages = sorted(DOCS_IMG.glob("*.html"))
    assert pages
    for page in pages:
        html = page.read_text()
        assert "cdn.plot.ly" not in html, page.name
        for src in SCRIPT_SRC.findall(html):
            assert (page.parent / src).resolve() == VENDORED_PLOTLY, (page.name, src)
