"""Offline Plotly HTML for the figures under docs/ and bench/out: the page loads the repository's vendored
``static/vendor/plotly.min.js`` by a relative path (no CDN, nothing large copied next to each figure)."""

from __future__ import annotations

import os
from pathlib import Path

VENDORED_PLOTLY = Path(__file__).resolve().parents[2] / "static" / "vendor" / "plotly.min.js"


def plotly_src(html_path) -> str:
    """The vendored plotly.js relative to the folder of ``html_path`` (forward slashes, for a browser)."""
    rel = os.path.relpath(VENDORED_PLOTLY, Path(html_path).resolve().parent)
    return rel.replace(os.sep, "/")


def write_html(fig, path) -> None:
    fig.write_html(str(path), include_plotlyjs=plotly_src(path))
