"""The coverage statement printed beside every verdict and grade: what a run measured (dtypes x points x values x
layouts x modes x device, the range of every swept dimension, fixed and seed-drawn points, public and hidden
seeds). Torch-free."""

from __future__ import annotations


def coverage_statement(contract, measurements: list, device: str, plan, results: dict | None = None) -> dict:
    """What was measured, beside every grade: dtypes x shapes x values x layouts x modes x device, the range of
    every swept dimension, how many points were fixed and how many drawn from the seeds, and (from the decoded
    ``results``) how many launches ran and how many of them on inputs allocated anew for that launch."""
    scope = contract.data["scope"]
    dims: dict[str, set] = {}
    values, layouts, points, drawn = set(), set(), set(), set()
    reached: dict[str, int] = {}  # issue #24: the largest value measured at a point drawn to reach each dimension
    skip = {"value", "layout", "drawn", "trial", "seed", "config", "probe", "R"}
    for m in measurements:
        p = m.get("point") or {}
        key = tuple(
            sorted((k, v) for k, v in p.items() if k not in ("trial", "config") and isinstance(v, (int, float, str)))
        )
        points.add(key)
        if p.get("drawn"):
            drawn.add(key)
        if isinstance(p.get("reach"), str) and isinstance(p.get(p["reach"]), int):
            reached[p["reach"]] = max(reached.get(p["reach"], 0), p[p["reach"]])
        if p.get("value"):
            values.add(str(p["value"]))
        if p.get("layout"):
            layouts.add(str(p["layout"]))
        for k, v in p.items():
            if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool):
                dims.setdefault(k, set()).add(v)
    dtypes = sorted(set(scope["dtypes"].get("inputs") or []) | {scope["dtypes"]["output"]})
    modes = list(scope.get("modes") or ["forward"])
    seeds = {
        "public": sum(1 for _, c in plan if c == "public"),
        "hidden": sum(1 for _, c in plan if c == "hidden"),
        "explicit": sum(1 for _, c in plan if c == "explicit"),
    }
    ranges = {k: {"min": min(v), "max": max(v), "distinct": len(v)} for k, v in sorted(dims.items())}
    sweep = contract.protocol_params.get("sweep") or {}
    launches = {
        "total": sum(len(r.get("times") or []) for r in (results or {}).values()),
        "fresh_inputs": sum(int(r.get("fresh_launches") or 0) for r in (results or {}).values()),
    }
    text = (
        f"{'/'.join(dtypes)} x {len(points)} points ({len(drawn)} drawn from seeds; "
        + ", ".join(f"{k} {r['min']:g}..{r['max']:g}" for k, r in ranges.items())
        + ")"
        + (f" reaching {', '.join(f'{k} {v}' for k, v in sorted(reached.items()))}" if reached else "")
        + f" x values {'/'.join(sorted(values)) or '-'}"
        + (f" x layouts {'/'.join(sorted(layouts))}" if layouts else "")
        + f" x {'/'.join(modes)} x {device}; seeds {seeds['public']} public + {seeds['hidden']} hidden"
        + (f" + {seeds['explicit']} explicit" if seeds["explicit"] else "")
        + (f"; {launches['total']} launches, {launches['fresh_inputs']} on fresh input allocations" if results else "")
    )
    return {
        "dtypes": dtypes,
        "modes": modes,
        "device": device,
        "values": sorted(values),
        "layouts": sorted(layouts),
        "dims": ranges,
        "declared_dims": scope["shape_class"].get("dims") or {},
        "points": len(points),
        "drawn_points": len(drawn),
        "reached": dict(sorted(reached.items())),
        "seeds": seeds,
        "launches": launches,
        "measurements": len(measurements),
        "budget": sweep.get("budget"),
        "sampling": sweep.get("sampling"),
        "text": text,
    }
