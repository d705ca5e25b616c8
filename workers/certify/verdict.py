"""One verdict per run certificate, in plain words (docs/certify.md#the-run-verdict).

Every page, the API, the CI gate, toasts and alerts show the verdict this module computes, so a run is never "OK" in
one place and "not certified" in another. The verdict is decided from the certificate's own numbers, in this order:

1. ``not_verifiable`` — no sequence could be certified (every one is a data error, skipped, or the log is empty):
   the data cannot prove anything, whatever the budget.
2. ``data_errors`` — some sequences are unusable records. They are left out of ε̂, δ̂ and the bounds, so any bound
   speaks only of the rest: the run is not called certified while part of it was never read.
3. ``certified`` — the best bound B* at the reference length T is within the error budget E.
4. ``vacuous`` — B* is at least the reward range (r_max − r_min): no objective difference can exceed that, so the
   bound proves nothing at this divergence.
5. ``over_budget`` — B* is meaningful but above E.

Beside the verdict it reports what would change it (the budget inversion, docs/bounds.md#budget-inversion): the
largest per-token TV ε that keeps some bound within E at T, next to the run's certified ε̂; and what masking at the
certificate's threshold keeps (the acceptance rate) and what bound the kept batch then has (every bound evaluated at
ε = threshold, worst case for everything not measured).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from workers.certify.bounds import BOUND_IDS, KL_PARAMETERISED, budget_threshold, trm_bounds

DEFAULT_BUDGET = 0.1  # the run page's default error budget E when the certificate was made without one

#: verdict code → short label (the badge); the codes are stable API values
LABELS = {
    "certified": "Certified within budget",
    "over_budget": "Not certified: over budget",
    "vacuous": "Not certified: the bound says nothing",
    "data_errors": "Data errors",
    "not_verifiable": "Not verifiable",
}
#: which verdicts a CI gate passes
PASSING = frozenset({"certified"})


@dataclass(frozen=True)
class Verdict:
    code: str
    label: str
    sentence: str  # why, and what would change it
    budget: float
    needed_eps: float | None = None  # the largest per-token TV that meets the budget at T (the inversion)
    kept_share: float | None = None  # share of sequences a mask at the certificate's threshold keeps
    kept_bound: float | None = None  # the best bound of that kept batch

    @property
    def passed(self) -> bool:
        return self.code in PASSING

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def _g(x: float) -> str:
    return f"{x:.3g}"


def needed_eps(T: int, budget: float, constants: str = "paper", reward_range: float = 1.0) -> float:
    """The largest per-token TV ε for which some TV-parameterised bound stays within ``budget`` at ``T``."""
    return max(
        budget_threshold(bid, max(int(T), 1), budget, constants=constants, reward_range=reward_range)
        for bid in BOUND_IDS
        if bid not in KL_PARAMETERISED
    )


def run_verdict(summary: dict, bounds: dict, options: dict | None = None, budget: float | None = None) -> Verdict:
    """The verdict of a complete certificate (its ``summary``, ``bounds`` and ``options`` as stored)."""
    options = options or {}
    if budget is None:
        budget = options.get("budget")
    budget = DEFAULT_BUDGET if budget is None else float(budget)
    constants = options.get("constants") or "paper"
    reward_range = float(options.get("reward_range") or 1.0)
    sequences = int(summary.get("sequences") or 0)
    certified = int(summary.get("sequences_certified") or 0)
    errors = int(((summary.get("status_counts") or {}).get("sequences") or {}).get("DATA_ERROR") or 0)
    T = int(summary.get("T_ref") or 1)

    def verdict(code: str, sentence: str, **extra) -> Verdict:
        return Verdict(code=code, label=LABELS[code], sentence=sentence, budget=budget, **extra)

    if certified == 0:
        why = (
            f"all {sequences} sequences are unusable records"
            if sequences and errors >= sequences
            else f"none of its {sequences} sequences could be certified"
            if sequences
            else "the log holds no policy sequence"
        )
        return verdict(
            "not_verifiable",
            f"Nothing can be proved about this run: {why}. Log the rollout's and the "
            f"trainer's log-probs of each sampled token (docs/fcr.md) and upload again.",
        )
    need = needed_eps(T, budget, constants, reward_range)
    eps = summary.get("eps_hat")
    threshold = summary.get("threshold")
    kept_share = summary.get("acceptance_rate")
    kept_bound = None
    if threshold is not None and options.get("mode", "tv") == "tv":
        kept_bound = trm_bounds(T, eps=float(threshold), constants=constants, reward_range=reward_range).get("best")
    extra = {"needed_eps": need, "kept_share": kept_share, "kept_bound": kept_bound}
    gap = f"The budget E = {_g(budget)} needs every token's TV at most {_g(need)} over {T} tokens" + (
        f"; this run's certified ε̂ is {_g(eps)}." if eps is not None else "."
    )
    if errors:
        return verdict(
            "data_errors",
            f"{errors} of {sequences} sequences are unusable records and are left out of "
            f"every number; the bounds speak only of the other {sequences - errors}. Fix "
            f"the records listed under Errors and upload again.",
            **extra,
        )
    best = bounds.get("best")
    if best is not None and math.isfinite(best) and best <= budget:
        return verdict(
            "certified",
            f"The best bound B* = {_g(best)} at {T} tokens is within the budget "
            f"E = {_g(budget)}: on the contexts these rollouts visited, the trainer's "
            f"surrogate objective is off by at most {_g(best)}.",
            **extra,
        )
    mask = ""  # said only where masking helps: the kept batch's bound is a worst case at ε = threshold, which
    # can exceed the whole batch's measured B* (that one uses the measured per-position divergence)
    if kept_share is not None and kept_bound is not None and (best is None or kept_bound < best):
        mask = (
            f" Masking at the threshold ε ≤ {_g(threshold)} keeps {kept_share:.0%} of sequences, whose bound is "
            f"then {_g(kept_bound)}."
        )
    if best is None or not math.isfinite(best) or best >= reward_range:
        shown = "unbounded" if best is None or not math.isfinite(best) else _g(best)
        return verdict(
            "vacuous",
            f"B* = {shown} at {T} tokens is not below the reward range {_g(reward_range)}, "
            f"the largest error there can be: at this divergence the certificate proves "
            f"nothing. {gap}{mask}",
            **extra,
        )
    return verdict(
        "over_budget",
        f"The best bound B* = {_g(best)} at {T} tokens is above the budget E = {_g(budget)}. {gap}{mask}",
        **extra,
    )
