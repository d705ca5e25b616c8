"""The run page's routing panel (docs/routing.md): the replay verdict, the layer × position flip-rate grid and the
attribution split, from the latest routing-audit job result of the run's uploads."""

from __future__ import annotations

GROUP_LABELS = (
    ("agree", "routes agree at every layer"),
    ("flipped", "flipped at one or more layers"),
    ("flipped_ge_n", "flipped at ≥ N layers (part of the row above)"),
    ("unverifiable", "unverifiable (routes missing)"),
    ("all", "all tokens"),
)


def _bin_label(lo, hi) -> str:
    return f"{lo}" if lo == hi else f"{lo}+" if hi is None else f"{lo}–{hi}"


def routing_panel(result: dict) -> dict:
    """Template context for one routing report."""
    grid = result.get("layer_position_grid") or {}
    rates = grid.get("flip_rate") or []
    top = max((x for row in rates for x in row if x is not None), default=0.0) or 1.0
    rows = []
    for layer, row in enumerate(rates):
        cells = []
        for j, rate in enumerate(row):
            n = grid["verified"][layer][j]
            cells.append(
                {
                    "rate": rate,
                    "n": n,
                    "flipped": grid["flipped"][layer][j],
                    "alpha": 0.0 if rate is None else round(0.08 + 0.92 * rate / top, 3) if rate else 0.0,
                }
            )
        rows.append({"layer": layer, "cells": cells})
    att = result.get("attribution") or {}
    groups = []
    for key, label in GROUP_LABELS:
        g = att.get(key) or {}
        if key == "flipped_ge_n":
            label = label.replace("N", str(att.get("min_flipped_layers", "N")))
        groups.append(
            {
                "key": key,
                "label": label,
                "tokens": g.get("tokens", 0),
                "eps_hat": g.get("eps_hat"),
                "tv_sum": (g.get("tv_hi") or {}).get("sum"),
                "dlogp_mean": (g.get("abs_dlogp") or {}).get("mean"),
                "dlogp_p99": (g.get("abs_dlogp") or {}).get("p99"),
                "acceptance": (g.get("acceptance") or {}).get("rate"),
            }
        )
    return {
        "result": result,
        "replay": result.get("replay") or {},
        "rows": rows,
        "bins": [_bin_label(lo, hi) for lo, hi in grid.get("position_bins") or []],
        "groups": groups,
        "flipped_share": att.get("flipped_share") or {},
    }
