"""Plotly figures for the run page, built server-side as JSON (the page loads plotly.js from static/).

Series are downsampled to at most ``MAX_POINTS`` points with min/max bands, so a run of 10⁵ steps draws as fast
as one of 100. Bound curves come from ``workers.certify.bounds`` (math/numpy only — the web tier stays torch-free).
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np
import orjson
import plotly.graph_objects as go

from audit_portal.core.storage import artifact_path
from workers.jsonsafe import finite_or_none
from workers.certify.bounds import BOUND_IDS, KL_PARAMETERISED, budget_threshold, trm_bounds

MAX_POINTS = 1000
BOUND_LABELS = {
    "classical_tv": "Classical (TV)",
    "classical_kl": "Classical (KL)",
    "pm_kl": "Pinsker-Marginal KL",
    "pm_tv": "Pinsker-Marginal TV",
    "mix_kl": "Mixed KL",
    "mix_tv": "Mixed TV",
    "coup": "Coupling",
    "adap_kl": "Adaptive KL",
    "adap_tv": "Adaptive TV",
    "adap_star": "Adaptive ★",
    "linear": "Linear (4Σ D̄)",
}
STATUS_COLOURS = {"IN": "#1f8a4c", "OUT": "#c0392b", "UNDETERMINED": "#d68910", "DATA_ERROR": "#6c3483"}
# plotly_white's look in the few properties these figures use: the full named template was validated and copied into
# every figure (two thirds of the figures endpoint's time) and sent with each one (≈ 10 kB per figure).
_GRID = dict(gridcolor="#ebf0f8", linecolor="#ebf0f8", zerolinecolor="#ebf0f8", automargin=True)
LIGHT_TEMPLATE = go.layout.Template(
    layout=dict(
        plot_bgcolor="white",
        paper_bgcolor="white",
        xaxis=_GRID,
        yaxis=_GRID,
        hovermode="closest",
        colorway=[
            "#636efa",
            "#EF553B",
            "#00cc96",
            "#ab63fa",
            "#FFA15A",
            "#19d3f3",
            "#FF6692",
            "#B6E880",
            "#FF97FF",
            "#FECB52",
        ],
    )
)
LAYOUT = dict(
    template=LIGHT_TEMPLATE,
    margin=dict(l=60, r=20, t=40, b=50),
    height=360,
    font=dict(family="system-ui, sans-serif", size=12),
    legend=dict(orientation="h", y=-0.2),
)


def downsample(x, y, max_points: int = MAX_POINTS) -> dict:
    """Bin (x, y) into at most ``max_points`` equal-count bins: x = bin centre, y = mean, plus min/max bands.
    ``None`` values are skipped. Below the limit the series is returned as is (bands equal the values)."""
    pairs = [(a, b) for a, b in zip(x, y) if a is not None and b is not None]
    if not pairs:
        return {"x": [], "y": [], "lo": [], "hi": []}
    xs = np.asarray([p[0] for p in pairs], dtype=np.float64)
    ys = np.asarray([p[1] for p in pairs], dtype=np.float64)
    if len(xs) <= max_points:
        return {"x": xs.tolist(), "y": ys.tolist(), "lo": ys.tolist(), "hi": ys.tolist()}
    edges = np.linspace(0, len(xs), max_points + 1).astype(int)
    out = {"x": [], "y": [], "lo": [], "hi": []}
    for a, b in zip(edges[:-1], edges[1:]):
        if b <= a:
            continue
        out["x"].append(float(xs[a:b].mean()))
        out["y"].append(float(ys[a:b].mean()))
        out["lo"].append(float(ys[a:b].min()))
        out["hi"].append(float(ys[a:b].max()))
    return out


def bound_inputs(certificate) -> dict:
    s = certificate.summary
    return {
        "eps": s.get("eps_hat"),
        "delta": s.get("delta_hat"),
        "kl_seq": s.get("kl_seq_mean"),
        "tv_seq": s.get("tv_seq_mean"),
        "constants": certificate.options.get("constants", "paper"),
        "reward_range": certificate.options.get("reward_range", 1.0),
    }


def bound_table(certificate, budget: float) -> list[dict]:
    """Per bound: its value at T_ref with the run's measured inputs, and the largest per-token threshold that
    keeps it within ``budget`` (ε or δ, as the bound is parameterised)."""
    params = bound_inputs(certificate)
    T = int(certificate.summary.get("T_ref") or 1)
    at_T = certificate.bounds
    fixed = {
        k: v for k, v in params.items() if k in ("kl_seq", "tv_seq", "constants", "reward_range") and v is not None
    }
    rows = []
    for bid in BOUND_IDS:
        try:
            threshold = budget_threshold(bid, T, budget, **fixed)
        except (ValueError, TypeError):
            threshold = None
        value = at_T.get(bid)
        rows.append(
            {
                "id": bid,
                "label": BOUND_LABELS[bid],
                "value": value,
                "parameter": "δ" if bid in KL_PARAMETERISED else "ε",
                "threshold": finite_or_none(threshold),
                "best": bid == at_T.get("argmin"),
                "within_budget": value is not None and value <= budget,
            }
        )
    return rows


def bound_tightness(certificate, budget: float) -> dict:
    """Every bound against T at the run's measured ε̂, δ̂ (log scale), B* marked, the budget as a line."""
    params = bound_inputs(certificate)
    T_ref = int(certificate.summary.get("T_ref") or 1)
    T_max = max(4096, 4 * T_ref)
    Ts = sorted({int(round(t)) for t in np.logspace(0, math.log10(T_max), 160)} | {T_ref})
    rows = [trm_bounds(T, **params) for T in Ts]
    fig = go.Figure()
    for bid in BOUND_IDS:
        ys = [r.get(bid) for r in rows]
        if all(v is None for v in ys):
            continue
        dash = "dot" if bid.startswith("classical") else "solid"
        fig.add_trace(go.Scatter(x=Ts, y=ys, mode="lines", name=BOUND_LABELS[bid], line=dict(dash=dash, width=1.5)))
    best = [r.get("best") for r in rows]
    if any(v is not None for v in best):
        fig.add_trace(go.Scatter(x=Ts, y=best, mode="lines", name="B* (min)", line=dict(color="black", width=3)))
    measured = certificate.bounds
    if measured.get("best") is not None:
        fig.add_trace(
            go.Scatter(
                x=[T_ref],
                y=[measured["best"]],
                mode="markers+text",
                name=f"B* at the reference length ({BOUND_LABELS.get(measured.get('argmin'), measured.get('argmin'))})",
                text=[f"B* = {measured['best']:.3g}"],
                textposition="top right",
                marker=dict(size=12, color="#c0392b", symbol="star"),
            )
        )
    fig.add_hline(y=budget, line=dict(color="#1f8a4c", dash="dash"), annotation_text=f"budget {budget:g}")
    # On a log axis a shape takes the data value but an annotation takes log10 of it.
    fig.add_vline(x=T_ref, line=dict(color="#999", dash="dot"))
    fig.add_annotation(
        x=math.log10(max(T_ref, 1)),
        y=1,
        yref="paper",
        text=f"reference length {T_ref}",
        showarrow=False,
        xanchor="left",
        yanchor="bottom",
    )
    eps, delta = params["eps"], params["delta"]
    title = (
        f"Error bounds against sequence length at ε̂ = {eps:.3g}"
        if eps is not None
        else "Error bounds against sequence length"
    )
    title += f", δ̂ = {delta:.3g}" if delta is not None else ", δ̂ unbounded (KL bounds unavailable)"
    fig.update_layout(
        **{**LAYOUT, "height": 430},
        title=title,
        xaxis=dict(type="log", title="sequence length T (tokens)"),
        yaxis=dict(type="log", title="bound on the surrogate-objective error"),
    )
    return fig.to_plotly_json()


def step_series(certificate) -> dict:
    steps = list(certificate.steps.order_by("step").values("step", "acceptance_rate", "eps_hat_max", "eps_hat_mean"))
    fig = go.Figure()
    for key, name, colour, axis in [
        ("acceptance_rate", "acceptance rate", "#2d5bd7", "y"),
        ("eps_hat_max", "ε̂ max", "#c0392b", "y2"),
        ("eps_hat_mean", "ε̂ mean", "#d68910", "y2"),
    ]:
        s = downsample([r["step"] for r in steps], [r[key] for r in steps])
        if s["x"] and s["lo"] != s["hi"]:
            fig.add_trace(
                go.Scatter(
                    x=s["x"] + s["x"][::-1],
                    y=s["hi"] + s["lo"][::-1],
                    fill="toself",
                    yaxis=axis,
                    line=dict(width=0),
                    fillcolor=colour,
                    opacity=0.15,
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
        fig.add_trace(
            go.Scatter(
                x=s["x"],
                y=s["y"],
                mode="lines+markers" if len(s["x"]) < 60 else "lines",
                name=name,
                line=dict(color=colour),
                yaxis=axis,
            )
        )
    fig.update_layout(
        **LAYOUT,
        title="Acceptance and ε̂ over training steps",
        xaxis=dict(title="step"),
        yaxis=dict(title="acceptance rate", range=[0, 1.02]),
        yaxis2=dict(
            title="ε̂ (certified max TV)",
            overlaying="y",
            side="right",
            rangemode="tozero",
            tickmode="auto",
            showgrid=False,
        ),
    )  # its own round ticks, not the left axis's
    return fig.to_plotly_json()


def distributions(certificate) -> dict:
    h = certificate.histograms or {}
    fig = go.Figure()
    eps = h.get("eps")
    if eps:
        centres = [(a + b) / 2 for a, b in zip(eps["edges"][:-1], eps["edges"][1:])]
        fig.add_trace(go.Bar(x=centres, y=eps["counts"], name="ε̂ per sequence", marker_color="#2d5bd7"))
    title = "ε̂ per sequence (max certified token TV)"
    delta = h.get("delta") or {}
    if delta and sum(delta.get("counts", [])):
        centres = [10 ** ((a + b) / 2) for a, b in zip(delta["log10_edges"][:-1], delta["log10_edges"][1:])]
        fig.add_trace(
            go.Bar(x=centres, y=delta["counts"], name="δ̂ per sequence", xaxis="x2", yaxis="y2", marker_color="#d68910")
        )
        fig.update_layout(
            xaxis2=dict(type="log", title="δ̂", anchor="y2", domain=[0.55, 1]),
            yaxis2=dict(anchor="x2"),
            xaxis=dict(domain=[0, 0.45]),
        )
    layout = dict(LAYOUT, title=dict(text=title))
    if delta and not sum(delta.get("counts", [])):  # a subtitle: a long title is cut off at the figure's width
        layout["title"]["subtitle"] = dict(
            text=f"δ̂ unbounded for {delta.get('unbounded', 0)} sequences (trainer side only partially known)"
        )
        layout["margin"] = dict(LAYOUT["margin"], t=64)
    fig.update_layout(**layout, bargap=0.05, xaxis_title="ε̂", yaxis_title="sequences")
    return fig.to_plotly_json()


def token_status(certificate) -> dict:
    counts = (certificate.summary.get("status_counts") or {}).get("tokens", {})
    total = sum(counts.values()) or 1
    fig = go.Figure()
    for status in ("IN", "UNDETERMINED", "OUT", "DATA_ERROR"):
        n = counts.get(status, 0)
        fig.add_trace(
            go.Bar(
                y=["tokens"],
                x=[n],
                name=f"{status} ({n / total:.1%})",
                orientation="h",
                marker_color=STATUS_COLOURS[status],
                text=[f"{n:,}"],
                textposition="inside",
            )
        )
    # no x-axis title (the bar is labelled "tokens"): below the axis it collided with the legend
    fig.update_layout(
        **{**LAYOUT, "height": 220, "legend": dict(orientation="h", y=-0.3)},
        barmode="stack",
        title="Token status at the threshold",
    )
    return fig.to_plotly_json()


def acceptance_by_length(certificate) -> dict:
    buckets = certificate.length_buckets or []
    fig = go.Figure(
        go.Bar(
            x=[b["bucket"] for b in buckets],
            y=[b["acceptance_rate"] for b in buckets],
            marker_color="#2d5bd7",
            text=[f"{b['accepted']}/{b['sequences']}" for b in buckets],
            textposition="outside",
        )
    )
    fig.update_layout(
        **LAYOUT,
        title="Acceptance by response length",
        xaxis=dict(title="length bucket (tokens)"),
        yaxis=dict(title="acceptance rate", range=[0, 1.1]),
    )
    return fig.to_plotly_json()


# ---------------------------------------------------------------------------------------------- several runs
RUN_COLOURS = ("#2d5bd7", "#d35400", "#1f8a4c", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#b7950b")
MAX_COMPARED = len(RUN_COLOURS)


def comparison(certificates, budget: float, names) -> dict:
    """Certificates on common axes, one colour and legend name per run: B* against T (each at its own measured ε̂,
    δ̂) with the budget; acceptance over steps; the ε̂ distributions as shares of each run's sequences (the bins
    are the same for every run)."""
    bounds, eps = go.Figure(), go.Figure()
    T_max = max(4096, *(4 * int(c.summary.get("T_ref") or 1) for c in certificates))
    Ts = sorted({int(round(t)) for t in np.logspace(0, math.log10(T_max), 120)})
    for certificate, name, colour in zip(certificates, names, RUN_COLOURS):
        best = [trm_bounds(T, **bound_inputs(certificate)).get("best") for T in Ts]
        if any(v is not None for v in best):
            bounds.add_trace(
                go.Scatter(
                    x=Ts,
                    y=best,
                    mode="lines",
                    name=f"{name}: B* (min of all bounds)",
                    line=dict(color=colour, width=2.5),
                )
            )
        T_ref, at_ref = int(certificate.summary.get("T_ref") or 1), certificate.bounds.get("best")
        if at_ref is not None:
            bounds.add_trace(
                go.Scatter(
                    x=[T_ref],
                    y=[at_ref],
                    mode="markers",
                    name=f"{name}: B* at length {T_ref}",
                    marker=dict(size=11, color=colour, symbol="star"),
                )
            )
        h = (certificate.histograms or {}).get("eps")
        if h and sum(h["counts"]):
            total = sum(h["counts"])
            centres = [(lo + hi) / 2 for lo, hi in zip(h["edges"][:-1], h["edges"][1:])]
            eps.add_trace(
                go.Bar(x=centres, y=[c / total for c in h["counts"]], name=name, marker_color=colour, opacity=0.6)
            )
    bounds.add_hline(y=budget, line=dict(color="#1f8a4c", dash="dash"), annotation_text=f"budget {budget:g}")
    bounds.update_layout(
        **{**LAYOUT, "height": 400},
        title="Best bound B* against sequence length, each run at its measured ε̂, δ̂",
        xaxis=dict(type="log", title="sequence length T (tokens)"),
        yaxis=dict(type="log", title="bound on the surrogate-objective error"),
    )
    eps.update_layout(
        **LAYOUT,
        title="ε̂ per sequence (largest certified token TV)",
        barmode="overlay",
        bargap=0.05,
        xaxis=dict(title="ε̂"),
        yaxis=dict(title="share of the run's sequences", tickformat=".0%"),
    )
    return {"bounds": bounds.to_plotly_json(), "eps": eps.to_plotly_json(), **step_comparison(certificates, names)}


# (key in the figures, StepAggregate value, title, y axis) for the compare page's metric-against-step charts
STEP_COMPARISON = [
    ("steps", "acceptance_rate", "Acceptance rate per training step", dict(title="acceptance rate", range=[0, 1.02])),
    ("step_eps", "eps_hat_max", "ε̂ max per training step (largest certified token TV)", dict(title="ε̂ max")),
    (
        "step_logp",
        "abs_diff_mean",
        "|Δ log p| mean per training step (trainer against rollout log-probs)",
        dict(title="per-token mean |Δ log p|", type="log"),
    ),
]


def step_comparison(certificates, names) -> dict:
    """One figure per step metric (acceptance rate, ε̂ max, |Δ log p| mean) with one line per compared run, in the
    runs' colours, the baseline (the first) drawn thicker; each run's steps read in one query for all of them, each
    series downsampled like the run page's. A run with no value of a metric at any step has no line in its figure."""
    from audit_portal.certificates.models import StepAggregate

    ids = [c.pk for c in certificates]
    series: dict[int, list] = {pk: [] for pk in ids}
    rows = (
        StepAggregate.objects.filter(certificate_id__in=ids, step__isnull=False)
        .order_by("certificate_id", "step")
        .values_list("certificate_id", "step", "acceptance_rate", "eps_hat_max", "metrics")
    )
    for pk, step, acceptance, eps_max, metrics in rows:
        logp = (metrics or {}).get("abs_diff_mean") if isinstance(metrics, dict) else None
        series[pk].append(
            {
                "acceptance_rate": acceptance,
                "eps_hat_max": eps_max,
                "abs_diff_mean": abs(logp) if isinstance(logp, (int, float)) and math.isfinite(logp) else None,
                "step": step,
            }
        )
    out = {}
    for key, field, title, yaxis in STEP_COMPARISON:
        fig = go.Figure()
        for i, (certificate, name, colour) in enumerate(zip(certificates, names, RUN_COLOURS)):
            points = series[certificate.pk]
            s = downsample([p["step"] for p in points], [p[field] for p in points])
            if not s["x"]:
                continue
            fig.add_trace(
                go.Scatter(
                    x=s["x"],
                    y=s["y"],
                    mode="lines+markers" if len(s["x"]) < 60 else "lines",
                    name=name,
                    legendrank=1 if i == 0 else 10 + i,
                    line=dict(color=colour, width=4 if i == 0 else 1.8),
                    opacity=1 if i == 0 else 0.85,
                    hovertemplate=f"{'baseline · ' if i == 0 else ''}%{{fullData.name}}<br>step %{{x}}: %{{y:.4g}}"
                    "<extra></extra>",
                )
            )
        fig.update_layout(**LAYOUT, title=title, xaxis=dict(title="step"), yaxis=yaxis)
        out[key] = fig.to_plotly_json()
    return out


# ---------------------------------------------------------------------------------------------- per-step metrics
STEP_MISMATCH = [
    ("abs_diff_mean", "|Δ log p| mean", "#2d5bd7"),
    ("abs_diff_p50", "|Δ log p| p50", "#5d8af0"),
    ("abs_diff_p99", "|Δ log p| p99", "#1b3a8c"),
    ("k1", "k1", "#7f8c8d"),
    ("k2", "k2", "#16a085"),
    ("k3", "k3", "#d68910"),
    ("chi2", "χ²", "#c0392b"),
]
STEP_WEIGHTS = [
    ("ppl_ratio", "PPL ratio (trainer / rollout)", "#8e44ad", "y"),
    ("is_weight_mean", "IS weight mean", "#2d5bd7", "y"),
    ("is_weight_max", "IS weight max", "#1b3a8c", "y"),
    ("tis_clip_rate", "TIS clip rate", "#d35400", "y2"),
    ("mis_mask_rate", "MIS mask rate (tokens)", "#c0392b", "y2"),
    ("mis_seq_mask_rate", "MIS mask rate (sequences)", "#7b241c", "y2"),
]


def step_metrics(certificate) -> dict:
    """The per-step mismatch metrics the engine computes (workers/certify/step_metrics.py), as two figures: the
    log-prob mismatch (|Δ log p| mean/p50/p99, k1, k2, k3, χ²; log axis, absolute values) and the importance weights
    (PPL ratio, IS weight mean/max; TIS clip and MIS mask rates on the right axis)."""
    rows = [(r["step"], r["metrics"] or {}) for r in certificate.steps.order_by("step").values("step", "metrics")]
    mismatch, weights = go.Figure(), go.Figure()
    for key, name, colour in STEP_MISMATCH:
        s = downsample([r[0] for r in rows], [abs(m[key]) if m.get(key) is not None else None for _, m in rows])
        if s["x"]:
            mismatch.add_trace(
                go.Scatter(
                    x=s["x"],
                    y=s["y"],
                    name=name,
                    line=dict(color=colour),
                    mode="lines+markers" if len(s["x"]) < 60 else "lines",
                )
            )
    for key, name, colour, axis in STEP_WEIGHTS:
        s = downsample([r[0] for r in rows], [m.get(key) for _, m in rows])
        if s["x"]:
            weights.add_trace(
                go.Scatter(
                    x=s["x"],
                    y=s["y"],
                    name=name,
                    line=dict(color=colour),
                    yaxis=axis,
                    mode="lines+markers" if len(s["x"]) < 60 else "lines",
                )
            )
    mismatch.update_layout(
        **LAYOUT,
        title="Log-prob mismatch over training steps",
        xaxis=dict(title="step"),
        yaxis=dict(title="per-token mean (absolute value)", type="log"),
    )
    weights.update_layout(
        **LAYOUT,
        title="Importance weights and masks over training steps",
        xaxis=dict(title="step"),
        yaxis=dict(title="ratio"),
        yaxis2=dict(
            title="share of tokens / sequences",
            overlaying="y",
            side="right",
            tickformat=".1%",
            rangemode="tozero",
            showgrid=False,
        ),
    )
    return {"mismatch": mismatch.to_plotly_json(), "weights": weights.to_plotly_json()}


# ---------------------------------------------------------------------------------------------- the run page's set
FIGURES_VERSION = 4  # part of every stored or cached copy's name: bump when the figures change
FIGURES_CACHE_SECONDS = 24 * 3600


def page_figures(certificate, budget: float) -> dict:
    """Everything the run page draws for ``budget``: the bound table and the figures."""
    return {
        "budget": budget,
        "bound_table": bound_table(certificate, budget),
        "bound_tightness": bound_tightness(certificate, budget),
        "steps": step_series(certificate),
        "step_metrics": step_metrics(certificate),
        "distributions": distributions(certificate),
        "token_status": token_status(certificate),
        "acceptance_by_length": acceptance_by_length(certificate),
    }


def default_budget(certificate) -> float:
    return float((certificate.budget or {}).get("budget") or 0.1)


def stored_figures_path(certificate) -> Path:
    return artifact_path(f"figures/certificate-{certificate.pk}-v{FIGURES_VERSION}.json")


def store_page_figures(certificate) -> bytes:
    """Build the run page's figures for the certificate's own budget and keep them in the artifact store (written
    whole, then renamed: a reader never sees half a file). The certify job calls this, so the first visit to the run
    page reads the figures instead of building them; a complete certificate never changes."""
    data = orjson.dumps(page_figures(certificate, default_budget(certificate)), option=orjson.OPT_SERIALIZE_NUMPY)
    path = stored_figures_path(certificate)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".figures-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return data


def page_figures_json(certificate, budget: float) -> bytes:
    """The run page's figures as JSON bytes: the stored copy for the certificate's own budget (made now if the
    certify job did not), other budgets built and kept in the cache for a day."""
    from django.core.cache import cache

    if budget == default_budget(certificate):
        path = stored_figures_path(certificate)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return store_page_figures(certificate)
    key = f"certificate-figures:{FIGURES_VERSION}:{certificate.pk}:{budget!r}"
    data = cache.get(key)
    if data is None:
        data = orjson.dumps(page_figures(certificate, budget), option=orjson.OPT_SERIALIZE_NUMPY)
        cache.set(key, data, FIGURES_CACHE_SECONDS)
    return data
