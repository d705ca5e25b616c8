"""An independent, loop-by-loop statement of the routing audit's definitions (sets and dicts, no numpy tricks),
used to check the vectorised engine."""

from __future__ import annotations


def reference_audit(calls, N=2):
    """``calls``: list of dicts with ``rollout``/``trainer`` nested lists [T][L][K] (negative = not recorded) and
    ``metric`` (a list of per-token floats). Returns the counts the engine reports."""
    out = {
        "pairs_verified": 0,
        "pairs_flipped": 0,
        "per_layer": {},
        "per_pos": {},
        "agree": 0,
        "flipped": 0,
        "unverifiable": 0,
        "sum": {"agree": 0.0, "flipped": 0.0, "unverifiable": 0.0, "ge_n": 0.0},
        "ge_n": 0,
        "by_n": {},
    }
    for c in calls:
        for t, (rt, tt) in enumerate(zip(c["rollout"], c["trainer"])):
            flips = 0
            missing = False
            for layer, (a, b) in enumerate(zip(rt, tt)):
                if min(a) < 0 or min(b) < 0:
                    missing = True
                    continue
                f = set(a) != set(b)
                out["pairs_verified"] += 1
                out["pairs_flipped"] += f
                v, fl = out["per_layer"].get(layer, (0, 0))
                out["per_layer"][layer] = (v + 1, fl + f)
                v, fl = out["per_pos"].get(t, (0, 0))
                out["per_pos"][t] = (v + 1, fl + f)
                flips += f
            g = "flipped" if flips else ("unverifiable" if missing else "agree")
            out[g] += 1
            out["sum"][g] += c["metric"][t]
            if flips >= N:
                out["ge_n"] += 1
                out["sum"]["ge_n"] += c["metric"][t]
            if g != "unverifiable":
                out["by_n"][flips] = out["by_n"].get(flips, 0) + 1
    return out
