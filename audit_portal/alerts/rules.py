"""What an alert rule decides, as a pure function of a run's metrics (no Django: the services feed it).

A *snapshot* is the run so far: ``{"best_bound": B* or None, "certified": bool, "steps": [{"step": int,
"eps_hat_max": float|None, "abs_diff_mean": float|None, "mis_mask_rate": float|None}, …]}`` with steps in order.
``evaluate`` answers whether the rule's condition holds now (``None`` when the data cannot say yet: too few steps,
nothing certified), with the value it compared and a sentence. The services turn a change of that answer into one
event per crossing (docs/alerts.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workers.jsonsafe import finite_or_none

BUDGET, EPS_RISING, ABS_DIFF_RISING, MASK_RATE = "budget", "eps_rising", "abs_diff_rising", "mask_rate"
KINDS = {
    BUDGET: "best bound B* of the run so far above the budget",
    EPS_RISING: "ε̂ (largest per step) rising over the last N steps",
    ABS_DIFF_RISING: "|Δ log p| mean rising over the last N steps",
    MASK_RATE: "MIS mask rate (token share) above X, mean over the last N steps",
}
KIND_CHOICES = list(KINDS.items())  # the model's and the API's choices: one enum in the API schema
# the per-step series a rising or rate rule reads
SERIES = {EPS_RISING: "eps_hat_max", ABS_DIFF_RISING: "abs_diff_mean", MASK_RATE: "mis_mask_rate"}
MAX_WINDOW = 1000


@dataclass(frozen=True)
class Verdict:
    holds: bool | None  # None: not decidable yet; the rule's state is left as it was
    value: float | None
    message: str


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of value against step: a rise per step that one noisy step cannot fake the way
    "last minus first" can."""
    n = len(points)
    mx = math.fsum(x for x, _ in points) / n
    my = math.fsum(y for _, y in points) / n
    sxx = math.fsum((x - mx) ** 2 for x, _ in points)
    return math.fsum((x - mx) * (y - my) for x, y in points) / sxx if sxx > 0 else 0.0


def _last(snapshot: dict, key: str, window: int) -> list[tuple[float, float]]:
    points = [
        (float(s["step"]), finite_or_none(s.get(key))) for s in snapshot.get("steps") or [] if s.get("step") is not None
    ]
    return [(x, y) for x, y in points if y is not None][-window:]


def evaluate(kind: str, threshold: float, window: int, snapshot: dict) -> Verdict:
    if kind == BUDGET:
        if not snapshot.get("certified"):
            return Verdict(None, None, "nothing certified yet")
        best = finite_or_none(snapshot.get("best_bound"))
        if best is None:  # as the client's budget gate: a run that certifies no bound does not meet any budget
            return Verdict(True, None, f"no bound could be certified for the run so far (budget {threshold:g})")
        return Verdict(
            best > threshold, best, f"B* = {best:.4g} {'>' if best > threshold else '≤'} budget {threshold:g}"
        )
    if kind in (EPS_RISING, ABS_DIFF_RISING):
        points = _last(snapshot, SERIES[kind], window)
        if len(points) < max(2, window):
            return Verdict(None, None, f"{len(points)} of the {max(2, window)} steps needed")
        rise = slope(points)
        name = "ε̂" if kind == EPS_RISING else "|Δ log p| mean"
        return Verdict(
            rise > threshold,
            rise,
            f"{name} changes by {rise:+.4g} per step over steps "
            f"{points[0][0]:g}–{points[-1][0]:g} (alert above {threshold:+g})",
        )
    if kind == MASK_RATE:
        points = _last(snapshot, SERIES[kind], window)
        if len(points) < window:
            return Verdict(None, None, f"{len(points)} of the {window} steps needed")
        rate = math.fsum(y for _, y in points) / len(points)
        return Verdict(
            rate > threshold,
            rate,
            f"MIS mask rate {rate:.4g} over steps {points[0][0]:g}–"
            f"{points[-1][0]:g} {'>' if rate > threshold else '≤'} {threshold:g}",
        )
    raise ValueError(f"unknown rule kind {kind!r}")
