"""How a fidelity verdict is worded, so that it cannot be misread (pure Python; the web tier imports it).

The run verdict is about the closed-failure guarantee (nothing unverifiable was trained on) and, when asked for, a
coverage gate (``min_coverage``: the share of policy response tokens that must be verifiable). A log in which no
policy token is verifiable passes the closed-failure check trivially; it is never worded as a plain PASS: the
label says so and the headline — the coverage — comes first everywhere the verdict is shown.
"""

from __future__ import annotations

NOTHING_VERIFIABLE = "PASS — nothing verifiable"


def headline(verifiable: int | None, policy_tokens: int | None) -> str:
    """``"3.1% of policy tokens verifiable (31 of 1,000)"``; says so when there are none."""
    verifiable, policy_tokens = int(verifiable or 0), int(policy_tokens or 0)
    if policy_tokens == 0:
        return "no policy tokens in the log: nothing is verifiable"
    pct = 100.0 * verifiable / policy_tokens
    if verifiable in (0, policy_tokens):
        shown = "0" if verifiable == 0 else "100"
    elif pct < 0.001:  # never rounded to 0% (or to 100% below) what is not
        shown = "< 0.001"
    elif pct < 0.1:
        shown = f"{pct:.1g}"
    elif pct > 99.9:
        shown = f"{min(pct, 99.99):.2f}"
    else:
        shown = f"{pct:.1f}"
    return f"{shown}% of policy tokens verifiable ({verifiable:,} of {policy_tokens:,})"


def verdict_label(verdict: str, verifiable: int | None, policy_tokens: int | None) -> str:
    """``FAIL``, ``PASS``, or :data:`NOTHING_VERIFIABLE` when the closed-failure check passed over zero verifiable
    policy tokens."""
    if verdict == "PASS" and not verifiable:
        return NOTHING_VERIFIABLE
    return verdict


def coverage_gate_reason(verifiable: int, policy_tokens: int, min_coverage: float | None) -> str | None:
    """The verdict reason when a requested coverage gate is not met, else None. ``min_coverage`` is a fraction in
    [0, 1]; with no policy tokens the coverage is 0."""
    if min_coverage is None:
        return None
    frac = verifiable / policy_tokens if policy_tokens else 0.0
    if frac + 1e-12 >= min_coverage:
        return None
    return (
        f"coverage gate: {frac:.2%} of policy tokens verifiable ({verifiable} of {policy_tokens}), "
        f"below the required {min_coverage:.2%}"
    )


def check_min_coverage(value) -> float | None:
    """Validate a ``min_coverage`` option: a number in [0, 1] (a fraction, not a percentage) or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"min_coverage must be a fraction in [0, 1] (e.g. 0.9 for 90%), got {value!r}")
    return float(value)
