"""TRM surrogate-error bounds and their budget inversion (docs/bounds.md#the-bounds, docs/bounds.md#budget-inversion).

This module imports **no torch** (math and numpy only): the web process imports it to draw bound-vs-T curves.

Notation (docs/bounds.md#setup-and-notation): ``eps`` = ε = max token TV, ``delta`` = δ = max token
KL(π_roll‖π_θ), ``kl_seq`` = D_KL^seq, ``tv_seq`` = D_TV^seq, ``tv_profile`` = D̄_t (expected TV at position t = 1..T). Positions are 1-based; the
Pinsker-Marginal and Coupling sums run over k = t−1 = 0..T−1; the Adaptive weights use T−t = T−1..0.

Constants (docs/bounds.md#tight-constants): ``"paper"`` uses the papers' factor 4 (default, reproduces their
tables); ``"tight"`` halves every bound (valid for R ∈ [0, 1] because ‖g_t‖∞ ≤ min(1, ε, √(δ/2)) and Error is invariant under R → R − ½).
Every bound is multiplied by ``reward_range`` = r_max − r_min.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

BOUND_IDS = (
    "classical_tv",
    "classical_kl",
    "pm_kl",
    "pm_tv",
    "mix_kl",
    "mix_tv",
    "coup",
    "adap_kl",
    "adap_tv",
    "adap_star",
    "linear",
)
#: Bounds whose budget inversion returns a KL threshold δ; all others return a TV threshold ε
#: (docs/bounds.md#budget-inversion).
KL_PARAMETERISED = ("classical_kl", "pm_kl", "mix_kl", "adap_kl")
CONSTANTS = {"paper": 4.0, "tight": 2.0}


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _check_nonneg(name, x):
    if x is None:
        return None
    x = float(x)
    if math.isnan(x) or x < 0:
        raise ValueError(f"{name} must be a non-negative number (got {x})")
    return x


def sum_sqrt_capped(T: int, delta: float) -> float:
    """S_√(T, δ) = Σ_{k=0}^{T−1} min(1, √(kδ/2)) (docs/bounds.md#the-bounds).

    Closed form: √(δ/2)·Σ_{k=0}^{m} √k + (T−1−m) with m = min(T−1, ⌊2/δ⌋). The boundary term is 1 on either
    side of the cap, so rounding of ⌊2/δ⌋ does not matter.
    """
    if T <= 1 or delta == 0:
        return 0.0
    if not math.isfinite(delta):
        return float(T - 1)
    m = T - 1 if 2.0 / delta >= T - 1 else int(math.floor(2.0 / delta))
    k = np.arange(m + 1, dtype=np.float64)
    head = float(np.minimum(1.0, np.sqrt(k * (delta / 2.0))).sum())
    return head + float(T - 1 - m)


def sum_lin_capped(T: int, eps: float) -> float:
    """S_lin(T, ε) = Σ_{k=0}^{T−1} min(1, kε) = ε·m'(m'+1)/2 + (T−1−m'), m' = min(T−1, ⌊1/ε⌋)
    (docs/bounds.md#the-bounds)."""
    if T <= 1 or eps == 0:
        return 0.0
    m = T - 1 if 1.0 / eps >= T - 1 else int(math.floor(1.0 / eps))
    return eps * m * (m + 1) / 2.0 + float(T - 1 - m)


def _profile(T: int, tv_profile, eps):
    """D̄_t as a float64 array of length T.

    A profile shorter than T is padded with zeros: positions after EOS are an absorbing state with zero divergence
    (docs/bounds.md#sequence-certificate). Without a profile but with ε, the worst case D̄_t ≡ ε is used (valid since D̄_t ≤ ε).
    """
    if tv_profile is None:
        if eps is None:
            return None
        return np.full(T, min(1.0, eps), dtype=np.float64)
    prof = np.asarray(tv_profile, dtype=np.float64).reshape(-1)
    if prof.size > T:
        raise ValueError(f"tv_profile has {prof.size} entries, more than T={T}")
    if np.any(~np.isfinite(prof)) or np.any(prof < 0):
        raise ValueError("tv_profile must be finite and non-negative")
    if prof.size < T:
        prof = np.concatenate([prof, np.zeros(T - prof.size)])
    return np.minimum(prof, 1.0)


def trm_bounds(
    T: int,
    *,
    eps=None,
    delta=None,
    kl_seq=None,
    tv_seq=None,
    tv_profile=None,
    constants: str = "paper",
    reward_range: float = 1.0,
) -> dict:
    """All TRM bounds on |J(π_θ) − J(π_roll) − L(π_θ)| that the given inputs allow
    (the table of docs/bounds.md#the-bounds).

    =============  ================================================  ==========
    id             formula (paper constants, reward range 1)         needs
    =============  ================================================  ==========
    classical_tv   2T(T−1)ε²                                         ε
    classical_kl   T(T−1)δ                                           δ
    pm_kl          4·min(1,√(δ/2))·S_√(T,δ)                          δ
    pm_tv          4·min(1,ε)·S_√(T,δ)                               ε, δ
    mix_kl         4T·min(1,√(δ/2))·min(1,√(D_KL^seq/2))             δ, D_KL^seq
    mix_tv         4T·min(1,ε)·min(1,D_TV^seq)                       ε, D_TV^seq
    coup           4·min(1,ε)·S_lin(T,ε)                             ε
    adap_kl        4Σ_t D̄_t·min(1,√((T−t)δ/2))                       D̄, δ
    adap_tv        4Σ_t D̄_t·min(1,(T−t)ε)                            D̄, ε
    adap_star      4Σ_t D̄_t·min(1,(T−t)ε,√((T−t)δ/2))                D̄, ε, δ
    linear         4Σ_t D̄_t                                          D̄
    =============  ================================================  ==========

    A key whose inputs are missing (or δ = +∞, "unbounded") is absent. If ``tv_profile`` is omitted but ``eps`` is
    given, the worst-case profile D̄_t ≡ ε is used (a valid upper bound, since D̄_t ≤ ε). ``best`` is the minimum of
    the present bounds (B*, docs/bounds.md#unified-bound-b; the classical rows are dominated but reported) and ``argmin``
    its id.
    ``constants="tight"`` halves every bound (docs/bounds.md#tight-constants); all values are multiplied by
    ``reward_range``.
    """
    T = int(T)
    if T < 0:
        raise ValueError("T must be >= 0")
    if constants not in CONSTANTS:
        raise ValueError(f"constants must be one of {sorted(CONSTANTS)}")
    eps = _check_nonneg("eps", eps)
    delta = _check_nonneg("delta", delta)
    kl_seq = _check_nonneg("kl_seq", kl_seq)
    tv_seq = _check_nonneg("tv_seq", tv_seq)
    c = CONSTANTS[constants] * float(reward_range)
    out: dict = {}
    if delta is not None and not math.isfinite(delta):
        delta = None  # unbounded KL: every KL row is unavailable (docs/bounds.md#the-bounds)
    if kl_seq is not None and not math.isfinite(kl_seq):
        kl_seq = None
    if eps is not None:
        eps = min(eps, 1.0)  # TV ≤ 1 always; larger inputs only mean "no information"
        out["classical_tv"] = c / 2.0 * T * (T - 1) * eps * eps
        out["coup"] = c * eps * sum_lin_capped(T, eps)
    if delta is not None:
        out["classical_kl"] = c / 4.0 * T * (T - 1) * delta
        s_sqrt = sum_sqrt_capped(T, delta)
        out["pm_kl"] = c * min(1.0, math.sqrt(delta / 2.0)) * s_sqrt
        if eps is not None:
            out["pm_tv"] = c * eps * s_sqrt
        if kl_seq is not None:
            out["mix_kl"] = c * T * min(1.0, math.sqrt(delta / 2.0)) * min(1.0, math.sqrt(kl_seq / 2.0))
    if eps is not None and tv_seq is not None:
        out["mix_tv"] = c * T * eps * min(1.0, tv_seq)
    prof = _profile(T, tv_profile, eps)
    if prof is not None:
        rem = np.arange(T - 1, -1, -1, dtype=np.float64)  # T − t for t = 1..T
        w_kl = np.minimum(1.0, np.sqrt(rem * delta / 2.0)) if delta is not None else None
        w_tv = np.minimum(1.0, rem * eps) if eps is not None else None
        out["linear"] = c * float(prof.sum())
        if w_kl is not None:
            out["adap_kl"] = c * float(np.dot(prof, w_kl))
        if w_tv is not None:
            out["adap_tv"] = c * float(np.dot(prof, w_tv))
        if w_kl is not None and w_tv is not None:
            out["adap_star"] = c * float(np.dot(prof, np.minimum(w_kl, w_tv)))
    if out:
        argmin = min(out, key=lambda k: (out[k], BOUND_IDS.index(k)))
        out["best"] = out[argmin]
        out["argmin"] = argmin
    return out


def simplified_bounds(T: int, *, eps=None, delta=None, constants: str = "paper", reward_range: float = 1.0) -> dict:
    """Paper-simplified Pinsker-Marginal forms (docs/bounds.md#the-bounds): (4/3)T^{3/2}δ and (8/3)T^{3/2}ε√(δ/2).

    They upper-bound the exact sums only in the small-divergence regime δ ≤ 2/T; ``valid`` says whether it holds.
    """
    c = CONSTANTS[constants] * float(reward_range) / 4.0
    out = {}
    if _finite(delta):
        out["pm_kl"] = c * 4.0 / 3.0 * T**1.5 * delta
        if eps is not None:
            out["pm_tv"] = c * 8.0 / 3.0 * T**1.5 * eps * math.sqrt(delta / 2.0)
        out["valid"] = bool(delta <= 2.0 / max(T, 1))
    return out


def _bound_at(bound_id: str, T: int, x: float, fixed: dict) -> float:
    """Evaluate one bound with its free parameter (δ or ε) set to ``x``; worst cases for what is not fixed.

    Worst cases (docs/bounds.md#budget-inversion): D_KL^seq ≤ Tδ (chain rule), D_TV^seq ≤ min(1, Tε) (coupling),
    D̄_t ≤ ε (or ≤ min(1, √(δ/2)) by Pinsker for adap_kl), δ unknown ⇒ +∞ (the caps saturate). A fixed profile is
    clipped at ε: under the threshold, D̄_t ≤ ε holds by definition.
    """
    constants = fixed.get("constants", "paper")
    reward_range = fixed.get("reward_range", 1.0)
    kw: dict = {"constants": constants, "reward_range": reward_range}
    prof = fixed.get("tv_profile")
    if bound_id in KL_PARAMETERISED:
        delta = x
        eps = fixed.get("eps")
        kw["delta"] = delta
        if bound_id == "mix_kl":
            kl_seq = fixed.get("kl_seq")
            if kl_seq is None and fixed.get("delta_avg") is not None:
                kl_seq = T * float(fixed["delta_avg"])
            kw["kl_seq"] = T * delta if kl_seq is None else kl_seq
        if bound_id == "adap_kl":
            cap = min(1.0, math.sqrt(delta / 2.0))
            if eps is not None:
                cap = min(cap, float(eps))
            kw["tv_profile"] = (
                np.minimum(np.asarray(prof, dtype=np.float64), cap) if prof is not None else np.full(T, cap)
            )
    else:
        eps = x
        kw["eps"] = eps
        delta = fixed.get("delta")
        kw["delta"] = math.inf if delta is None else delta
        if bound_id == "pm_tv" and not _finite(kw["delta"]):
            # δ unknown: S_√ saturates at T−1 (every min(1, √(kδ/2)) = 1 for k ≥ 1).
            return CONSTANTS[constants] * reward_range * min(1.0, eps) * max(T - 1, 0)
        if bound_id == "mix_tv":
            tv_seq = fixed.get("tv_seq")
            kw["tv_seq"] = min(1.0, T * eps) if tv_seq is None else tv_seq
        if bound_id in ("adap_tv", "adap_star", "linear"):
            kw["tv_profile"] = (
                np.minimum(np.asarray(prof, dtype=np.float64), eps) if prof is not None else np.full(T, min(1.0, eps))
            )
        if bound_id == "adap_star" and not _finite(kw["delta"]):
            bound_id = "adap_tv"  # with δ = +∞ the √ weight is 1 and adap_star = adap_tv
    value = trm_bounds(T, **kw).get(bound_id)
    if value is None:
        raise ValueError(f"bound {bound_id!r} cannot be evaluated with {sorted(fixed)}")
    return value


def budget_threshold(bound_id: str, T: int, budget: float, **fixed) -> float:
    """Largest per-token threshold keeping ``bound_id`` ≤ ``budget`` at horizon ``T`` (docs/bounds.md#budget-inversion).

    Returns δ for the KL-parameterised bounds (classical_kl, pm_kl, mix_kl, adap_kl) and ε for the others. Every
    bound is non-decreasing in its parameter, so the inversion is a bisection on [0, 2] (δ) or [0, 1] (ε); above
    those the caps saturate. If even the saturated bound is within budget the constraint is vacuous and the result
    is ``math.inf`` for δ and ``1.0`` for ε (TV never exceeds 1). ``fixed`` may hold ``eps``, ``delta``, ``kl_seq``,
    ``tv_seq``, ``tv_profile``, ``delta_avg``, ``constants``, ``reward_range``; missing ones take their worst case
    (see :func:`_bound_at`). The returned value is on the feasible side of the bisection.
    """
    if bound_id not in BOUND_IDS:
        raise ValueError(f"unknown bound {bound_id!r}; expected one of {BOUND_IDS}")
    budget = float(budget)
    if not budget >= 0:
        raise ValueError("budget must be >= 0")
    T = int(T)
    is_kl = bound_id in KL_PARAMETERISED
    top = 2.0 if is_kl else 1.0
    f = lambda x: _bound_at(bound_id, T, x, fixed)
    if f(top) <= budget:
        return math.inf if is_kl else 1.0
    if f(0.0) > budget:
        return 0.0  # e.g. a fixed measured profile already exceeds the budget
    lo, hi = 0.0, top
    # Bisection to full double precision; a relative stop keeps tiny thresholds (1e-12) accurate too.
    for _ in range(400):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi or hi - lo <= 1e-16 * hi:
            break
        if f(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


invert_budget = budget_threshold  # the name the first API draft used


def guard_threshold(mode: str, T: int, budget: float, **fixed) -> tuple[float, str]:
    """Budget-aware sequence guard: the largest threshold for which **some** bound stays within ``budget``.

    B* is the minimum of the bounds, so the threshold for B* is the maximum of the per-bound thresholds of the
    family that ``mode`` controls: ``"tv"`` → ε (bounds that need only ε, δ unknown ⇒ +∞ unless fixed),
    ``"kl"`` → δ. Returns ``(threshold, bound_id)``.
    """
    ids = (
        ("classical_tv", "coup", "pm_tv", "mix_tv", "adap_tv", "adap_star", "linear")
        if mode == "tv"
        else KL_PARAMETERISED
    )
    best = (-1.0, "")
    for bid in ids:
        try:
            thr = budget_threshold(bid, T, budget, **fixed)
        except ValueError:
            continue
        if thr > best[0]:
            best = (thr, bid)
    return best


def bound_curve(bound_id: str, Ts: Sequence[int], **params) -> list:
    """Convenience for plots: ``trm_bounds(T, **params)[bound_id]`` (or None) for every T in ``Ts``."""
    return [trm_bounds(int(T), **params).get(bound_id) for T in Ts]
