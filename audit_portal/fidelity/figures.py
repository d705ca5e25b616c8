"""Plotly figures for the fidelity page, built server-side as JSON (the page loads plotly.js from static/).

Report-level figures read the stored coverage report (docs/fidelity-rules.md#coverage-report); the per-trajectory and per-call distributions aggregate
the stored call summaries in the database. Long series go through the certificates app's ``downsample``.
"""

from __future__ import annotations

import colorsys

import plotly.graph_objects as go
from django.db.models import Sum

from audit_portal.certificates.figures import LAYOUT, downsample
from audit_portal.fidelity.reasons import reason_sentence

VERIFIABLE_COLOUR = "#1f8a4c"
HIST_BINS = 20


def reason_colour(code: str, codes: list[str]) -> str:
    """One colour per reason code, stable across pages (the drill-down colours tokens with it): hues spread by the
    golden ratio over the wheel minus the green band, which means "verifiable"."""
    if code not in codes:
        return "#7f8c8d"
    hue = (180 + ((codes.index(code) * 0.618034) % 1.0) * 235) % 360 / 360
    r, g, b = colorsys.hls_to_rgb(hue, 0.42, 0.7)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


def coverage_by_reason(report, codes: list[str]) -> dict:
    """Stacked bars: policy tokens and all response tokens, split into verifiable and each primary exclusion reason."""
    cov = report.coverage
    rows = [
        ("policy tokens", cov.get("policy_tokens") or 0, cov.get("excluded_policy_tokens_by_primary_reason") or {}),
        ("all response tokens", cov.get("response_tokens") or 0, cov.get("excluded_tokens_by_primary_reason") or {}),
    ]
    fig = go.Figure()
    labels = [r[0] for r in rows]
    verifiable = [total - sum(excl.values()) for _, total, excl in rows]
    fig.add_trace(
        go.Bar(
            y=labels,
            x=verifiable,
            name="verifiable",
            orientation="h",
            marker_color=VERIFIABLE_COLOUR,
            hovertemplate="verifiable: %{x:,} tokens<extra></extra>",
        )
    )
    present = [c for c in codes if any(c in excl for _, _, excl in rows)]
    present += sorted({c for _, _, excl in rows for c in excl} - set(present))
    for code in present:
        fig.add_trace(
            go.Bar(
                y=labels,
                x=[excl.get(code, 0) for _, _, excl in rows],
                name=code,
                orientation="h",
                marker_color=reason_colour(code, codes),
                hovertext=[reason_sentence(code)] * len(labels),
                hovertemplate=code + ": %{x:,} tokens<br>%{hovertext}<extra></extra>",
            )
        )
    fig.update_layout(
        **{**LAYOUT, "height": 280, "legend": dict(orientation="h", y=-0.35)},
        barmode="stack",
        title="Tokens by primary exclusion reason",
        xaxis=dict(title="tokens"),
    )
    return fig.to_plotly_json()


def reasons_any(report, codes: list[str]) -> dict:
    """Policy tokens carrying each reason (a token may carry several, so these do not stack)."""
    excl = report.coverage.get("excluded_policy_tokens_by_any_reason") or {}
    order = [c for c in codes if c in excl] + sorted(set(excl) - set(codes))
    fig = go.Figure(
        go.Bar(
            x=order,
            y=[excl[c] for c in order],
            marker_color=[reason_colour(c, codes) for c in order],
            text=[f"{excl[c]:,}" for c in order],
            textposition="outside",
            hovertext=[reason_sentence(c) for c in order],
            hovertemplate="%{x}: %{y:,} tokens<br>%{hovertext}<extra></extra>",
        )
    )
    fig.update_layout(**LAYOUT, title="Policy tokens by any reason (overlapping)", yaxis=dict(title="tokens"))
    return fig.to_plotly_json()


def background_ledger(report) -> dict:
    ledger = report.coverage.get("background_ledger") or {}
    labels = list(ledger)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=[ledger[k]["calls"] for k in labels], name="calls", marker_color="#2d5bd7"))
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[ledger[k]["tokens"] for k in labels],
            name="tokens",
            marker_color="#d68910",
            yaxis="y2",
            offsetgroup=2,
        )
    )
    fig.update_layout(
        **LAYOUT,
        title="Background / unknown-role calls by purpose",
        barmode="group",
        yaxis=dict(title="calls"),
        yaxis2=dict(title="tokens", overlaying="y", side="right", tickmode="auto", showgrid=False),
    )
    return fig.to_plotly_json()


def provenance(report) -> dict:
    prov = report.coverage.get("provenance") or {}
    kinds = sorted(set(prov.get("prompt") or {}) | set(prov.get("response") or {}))
    fig = go.Figure()
    for side, colour in (("prompt", "#2d5bd7"), ("response", "#1f8a4c")):
        counts = prov.get(side) or {}
        fig.add_trace(go.Bar(x=kinds, y=[counts.get(k, 0) for k in kinds], name=f"{side} ids", marker_color=colour))
    fig.update_layout(**LAYOUT, title="Provenance of token ids (calls)", barmode="group", yaxis=dict(title="calls"))
    return fig.to_plotly_json()


def binned(values, lo: float, hi: float, bins: int) -> dict:
    """Counts of ``values`` in ``bins`` equal bins over [lo, hi], the last one closed (a value equal to ``hi`` —
    a fully verifiable trajectory — counts in it). Only the counts go to the browser, never one value per row."""
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(max(int((v - lo) / width), 0), bins - 1)] += 1
    edges = [lo + i * width for i in range(bins + 1)]
    return {
        "centres": [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:])],
        "counts": counts,
        "edges": edges,
        "width": width,
    }


def _histogram(h: dict, colour: str, what: str, digits: int) -> go.Bar:
    ranges = [f"{a:.{digits}f}–{b:.{digits}f}" for a, b in zip(h["edges"][:-1], h["edges"][1:])]
    return go.Bar(
        x=h["centres"],
        y=h["counts"],
        width=h["width"],
        marker_color=colour,
        customdata=ranges,
        hovertemplate=f"%{{customdata}}: %{{y}} {what}<extra></extra>",
    )


def trajectory_coverage(report) -> dict:
    """Histogram of per-trajectory verifiable fraction of policy tokens (sums in the database, bins here)."""
    rows = (
        report.calls.filter(role="policy")
        .values("trajectory_id")
        .annotate(n=Sum("n_tokens"), v=Sum("verifiable_tokens"))
        .filter(n__gt=0)
        .values_list("n", "v")
    )
    h = binned((v / n for n, v in rows.iterator()), 0.0, 1.0, HIST_BINS)
    fig = go.Figure(_histogram(h, "#2d5bd7", "trajectories", 2))
    worst = report.coverage.get("trajectories", {}).get("min_coverage")
    if worst is not None:
        fig.add_vline(x=worst, line=dict(color="#c0392b", dash="dash"), annotation_text=f"min {worst:.3f}")
    fig.update_layout(
        **LAYOUT,
        title=f"Per-trajectory coverage ({sum(h['counts'])} trajectories)",
        bargap=0.05,
        xaxis=dict(title="verifiable share of the trajectory's policy tokens", range=[-0.02, 1.04]),
        yaxis=dict(title="trajectories"),
    )
    return fig.to_plotly_json()


def alignment(report) -> dict:
    """Per-call median |trainer − rollout| (nats) against τ_align, from the stored call summaries; bins over
    [0, max(τ_align, largest median)]."""
    medians = [
        m
        for m in report.calls.filter(alignment__isnull=False)
        .values_list("alignment__median_abs_diff", flat=True)
        .iterator()
        if isinstance(m, (int, float))
    ]
    tau = (report.coverage.get("logprob_alignment") or {}).get("tau_align")
    top = max(medians + [tau or 0.0]) or 1.0
    h = binned(medians, 0.0, top, 40)
    fig = go.Figure(_histogram(h, "#6c3483", "calls", 3))
    if tau is not None:
        fig.add_vline(x=tau, line=dict(color="#c0392b", dash="dash"), annotation_text=f"τ_align = {tau:g}")
    fig.update_layout(
        **LAYOUT,
        title=f"Per-call median |trainer − rollout| ({len(medians)} calls)",
        bargap=0.05,
        xaxis=dict(title="nats"),
        yaxis=dict(title="calls"),
    )
    return fig.to_plotly_json()


def steps(report) -> dict:
    by_step = (report.coverage.get("breakdowns") or {}).get("step") or {}
    numeric = sorted((int(k), v) for k, v in by_step.items() if k.lstrip("-").isdigit())
    frac = [(s, v["verifiable_policy_tokens"] / v["policy_tokens"]) for s, v in numeric if v["policy_tokens"]]
    series = downsample([s for s, _ in frac], [f for _, f in frac])
    fig = go.Figure()
    if series["x"] and series["lo"] != series["hi"]:
        fig.add_trace(
            go.Scatter(
                x=series["x"] + series["x"][::-1],
                y=series["hi"] + series["lo"][::-1],
                fill="toself",
                line=dict(width=0),
                fillcolor="#2d5bd7",
                opacity=0.15,
                showlegend=False,
                hoverinfo="skip",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=series["x"],
            y=series["y"],
            mode="lines+markers" if len(series["x"]) < 60 else "lines",
            name="verifiable fraction",
            line=dict(color="#2d5bd7"),
        )
    )
    fig.update_layout(
        **LAYOUT,
        title="Verifiable fraction of policy tokens by step",
        xaxis=dict(title="step"),
        yaxis=dict(title="verifiable fraction", range=[0, 1.05]),
    )
    return fig.to_plotly_json()


def certificate_decisions(report) -> dict:
    cert = report.coverage.get("certificates") or {}
    decisions = cert.get("decisions") or {}
    colours = {"inside": "#1f8a4c", "undecided": "#d68910", "outside": "#c0392b", "invalid": "#6c3483"}
    fig = go.Figure()
    for k in ("inside", "undecided", "outside", "invalid"):
        fig.add_trace(
            go.Bar(y=["verifiable tokens"], x=[decisions.get(k, 0)], name=k, orientation="h", marker_color=colours[k])
        )
    fig.update_layout(
        **{**LAYOUT, "height": 220, "legend": dict(orientation="h", y=-0.3)},
        barmode="stack",
        title=f"Certificate decisions at δ = {cert.get('delta', 0.15):g} (two-sided TV interval)",
    )
    return fig.to_plotly_json()


def all_figures(report, codes: list[str]) -> dict:
    return {
        "coverage": coverage_by_reason(report, codes),
        "reasons_any": reasons_any(report, codes),
        "ledger": background_ledger(report),
        "provenance": provenance(report),
        "trajectories": trajectory_coverage(report),
        "alignment": alignment(report),
        "steps": steps(report),
        "certificates": certificate_decisions(report),
    }
