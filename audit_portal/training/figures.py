"""Plotly figures for the training-audit page, built server-side as JSON from the stored summaries (the page loads
plotly.js from static/vendor)."""

from __future__ import annotations

import plotly.graph_objects as go

from audit_portal.certificates.figures import LAYOUT

EXACT = "#2d5bd7"
TOPK = "#d68910"
BOUND_VIEWS = (("exact_kl_mode", "exact (KL mode)"), ("exact_tv_mode", "exact (TV mode)"), ("topk_tv_mode", "top-K"))


def tv_distribution(audit) -> dict:
    """Histogram of the exact per-token TV over log10 bins (zeros noted in the title)."""
    hist = (audit.profile or {}).get("tv_histogram") or {}
    edges, counts = hist.get("log10_edges") or [], hist.get("counts") or []
    centres = [10 ** ((a + b) / 2) for a, b in zip(edges[:-1], edges[1:])]
    widths = [10**b - 10**a for a, b in zip(edges[:-1], edges[1:])]
    fig = go.Figure(
        go.Bar(
            x=centres,
            y=counts,
            width=widths,
            marker_color=EXACT,
            hovertemplate="TV ≈ %{x:.3g}: %{y} tokens<extra></extra>",
        )
    )
    zeros = hist.get("zeros") or 0
    fig.update_layout(
        **LAYOUT,
        title=f"Exact per-token TV ({sum(counts) + zeros} tokens{f', {zeros} exactly 0' if zeros else ''})",
        xaxis=dict(title="exact TV(π_roll, π_θ), full vocabulary", type="log", dtick="D2"),
        yaxis=dict(title="tokens"),
        bargap=0,
    )
    return fig.to_plotly_json()


def tv_by_position(audit) -> dict:
    """Mean and max exact TV over response positions, KL mean on a second axis."""
    pos = (audit.profile or {}).get("position") or {}
    x = pos.get("x") or []
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(x=x, y=pos.get("tv_max") or [], name="max TV", mode="lines", line=dict(color=EXACT, dash="dot"))
    )
    fig.add_trace(
        go.Scatter(x=x, y=pos.get("tv_mean") or [], name="mean TV", mode="lines+markers", line=dict(color=EXACT))
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=pos.get("kl_mean") or [],
            name="mean KL(π_roll‖π_θ)",
            mode="lines",
            line=dict(color="#6c3483"),
            yaxis="y2",
        )
    )
    title = "Exact divergence by response position"
    if (pos.get("width") or 1) > 1:
        title += f" (bins of {pos['width']} positions)"
    fig.update_layout(
        **LAYOUT,
        title=title,
        xaxis=dict(title="response position"),
        yaxis=dict(title="TV", rangemode="tozero"),
        yaxis2=dict(
            title="KL (nats)", overlaying="y", side="right", rangemode="tozero", tickmode="auto", showgrid=False
        ),
    )
    return fig.to_plotly_json()


def interval_by_position(audit) -> dict:
    """The top-K-only view's certified TV interval (mean lo … mean hi, and the largest hi) against the exact TV at
    each position: the gap between the band and the line is what the partial view loses."""
    prof = audit.profile or {}
    pos = prof.get("position") or {}
    x = pos.get("x") or []
    lo, hi = pos.get("topk_lo_mean") or [], pos.get("topk_hi_mean") or []
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=x + x[::-1],
            y=hi + lo[::-1],
            fill="toself",
            fillcolor=TOPK,
            opacity=0.25,
            line=dict(width=0),
            name=f"top-{prof.get('K')} interval (mean lo–hi)",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=pos.get("topk_hi_max") or [],
            name=f"top-{prof.get('K')} largest hi",
            mode="lines",
            line=dict(color=TOPK, dash="dot"),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x, y=pos.get("tv_mean") or [], name="exact TV (mean)", mode="lines+markers", line=dict(color=EXACT)
        )
    )
    fig.update_layout(
        **LAYOUT,
        title="Exact TV inside the top-K certified interval",
        xaxis=dict(title="response position"),
        yaxis=dict(title="TV", rangemode="tozero"),
    )
    return fig.to_plotly_json()


def certificate_bounds(audit) -> dict:
    """B* (the best TRM bound) each view certifies, per top-K view; log scale. The exact certificate is the same
    for every K (the data are the same); the top-K view has no KL rows (docs/intervals.md#kl-bounds)."""
    fig = go.Figure()
    views = list((audit.certificates or {}).items())
    for key, label in BOUND_VIEWS:
        values = [((v.get("sequence") or {}).get(key) or {}).get("bounds", {}).get("best") for _, v in views]
        colour = TOPK if key.startswith("topk") else (EXACT if key == "exact_kl_mode" else "#5dade2")
        fig.add_trace(
            go.Bar(
                x=[k for k, _ in views],
                y=values,
                name=label,
                marker_color=colour,
                text=[f"{v:.3g}" if v is not None else "—" for v in values],
                textposition="outside",
            )
        )
    fig.update_layout(
        **LAYOUT,
        title="B* certified from exact values vs the top-K-only view",
        barmode="group",
        xaxis=dict(title="view"),
        yaxis=dict(title="B* (surrogate-error bound)", type="log"),
    )
    return fig.to_plotly_json()


def undetermined(audit) -> dict:
    """Share of tokens the top-K view leaves UNDETERMINED at each threshold (adaptive K), next to the share that is
    truly above the threshold."""
    fig = go.Figure()
    for key, view in (audit.certificates or {}).items():
        rows = view.get("by_threshold") or []
        fig.add_trace(
            go.Bar(
                x=[str(r["threshold"]) for r in rows],
                y=[r["topk_undetermined_share"] for r in rows],
                name=f"{key}: UNDETERMINED",
            )
        )
    first = next(iter((audit.certificates or {}).values()), {})
    rows = first.get("by_threshold") or []
    fig.add_trace(
        go.Scatter(
            x=[str(r["threshold"]) for r in rows],
            y=[r["exact_out_share"] for r in rows],
            name="exact: TV > θ",
            mode="markers",
            marker=dict(color="#c0392b", size=10, symbol="x"),
        )
    )
    fig.update_layout(
        **LAYOUT,
        title="What the top-K view cannot decide",
        barmode="group",
        xaxis=dict(title="threshold θ", type="category"),
        yaxis=dict(title="share of tokens", range=[0, 1.05], tickformat=".0%"),
    )
    return fig.to_plotly_json()


def masked_fraction(audit) -> dict:
    """Per loss: the share of tokens its mask drops in the one step from the same start."""
    rows = audit.ordered_steps()
    names = [n for n, _ in rows]
    values = [row.get("masked_fraction") for _, row in rows]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=values,
            marker_color="#1f8a4c",
            text=[f"{v:.1%}" if isinstance(v, (int, float)) else "—" for v in values],
            textposition="outside",
            hovertemplate="%{x}: %{y:.2%} of tokens masked<extra></extra>",
        )
    )
    top = max([v for v in values if isinstance(v, (int, float))] or [0])
    fig.update_layout(
        **LAYOUT,
        title="Masked token fraction per loss (one optimiser step each)",
        yaxis=dict(title="masked fraction", tickformat=".0%", range=[0, max(0.05, top * 1.25)]),
        xaxis=dict(tickangle=-30),
    )
    return fig.to_plotly_json()


def all_figures(audit) -> dict:
    if not audit.is_complete:
        return {}
    return {
        "tv_distribution": tv_distribution(audit),
        "tv_by_position": tv_by_position(audit),
        "interval_by_position": interval_by_position(audit),
        "bounds": certificate_bounds(audit),
        "undetermined": undetermined(audit),
        "masked": masked_fraction(audit),
    }
