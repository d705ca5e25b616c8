"""Sequence-level certificates, TRM masks and batch statistics (docs/bounds.md#sequence-certificate,
docs/bounds.md#trm-masks).

Inputs are per-position ``[B, T]`` tensors (``response_mask`` marks valid positions; positions after EOS are an
absorbing state with zero divergence). Per-sequence plug-ins (docs/bounds.md#sequence-certificate):

* ε̂ = max_t tv_hi[t], δ̂ = max_t kl_hi[t] (+∞ if any is unknown) — certified on the **visited** contexts only;
* D_KL^seq ← Σ_t kl_hi[t];  D_TV^seq ← min(1, Σ_t tv_hi[t], √(D_KL^seq/2));
* A(y) = c·Σ_t tv_hi[t]·w_t,  w_t = min(1, (T−t)ε, √((T−t)δ/2))  (c = 4 paper / 2 tight, × reward range):
  its expectation over rollouts is B_Adap^*; average it over the **whole** batch.

Guarantee semantics (must be shown with the numbers): a per-sequence CERT_IN certifies the divergence at the
contexts actually visited. The TRM error bound additionally assumes the threshold holds for all reachable
contexts, which no sample can certify (a high acceptance rate is only evidence).
"""

from __future__ import annotations

import math

import torch

from workers.certify.bounds import CONSTANTS, guard_threshold, trm_bounds

CERT_IN, CERT_OUT, UNDETERMINED, HEURISTIC, DATA_ERROR = 0, 1, 2, 3, 4
SEQ_STATUS_NAMES = {
    CERT_IN: "CERT_IN",
    CERT_OUT: "CERT_OUT",
    UNDETERMINED: "UNDETERMINED",
    HEURISTIC: "HEURISTIC",
    DATA_ERROR: "DATA_ERROR",
}
#: Thresholds used when neither a threshold nor a budget is given: DPPO's TV threshold / TRM-Max δ (k2) /
#: TRM-Avg δ (k3) — docs/bounds.md#sequence-certificate.
DEFAULT_THRESHOLDS = {"tv": 0.15, "kl": 0.05, "k2max": 0.05, "k3mean": 0.001}
MODES = tuple(DEFAULT_THRESHOLDS)
VISITED_CAVEAT = (
    "Certified on visited contexts only: per-sequence statuses and the run's eps_hat/delta_hat bound "
    "the divergence at the contexts the rollouts actually visited. The TRM surrogate-error bounds "
    "additionally assume the threshold holds at every reachable context, which samples cannot "
    "certify (a high acceptance rate is only evidence)."
)


def _mask(x, response_mask):
    if response_mask is None:
        return torch.ones(x.shape, dtype=torch.bool)
    return torch.as_tensor(response_mask).to(torch.bool)


def _masked_max(x, m, empty=0.0):
    return (
        torch.where(m, x, torch.full_like(x, -math.inf)).amax(-1).clamp(min=empty)
        if x.shape[-1]
        else torch.full(x.shape[:-1], empty, dtype=x.dtype)
    )


def adaptive_weights(T_ref, eps, delta, length: int):
    """w_t = min(1, (T_ref−t)ε, √((T_ref−t)δ/2)) for t = 1..length (broadcast over a leading batch dim when
    ``T_ref``/``eps``/``delta`` are ``[B]`` tensors). δ = +∞ drops the √ term (A(y) in docs/bounds.md#sequence-certificate)."""
    t = torch.arange(1, length + 1, dtype=torch.float64)
    T_ref = torch.as_tensor(T_ref, dtype=torch.float64)
    eps = torch.as_tensor(eps, dtype=torch.float64)
    delta = torch.as_tensor(delta, dtype=torch.float64)
    if T_ref.dim():
        T_ref, eps, delta = (
            T_ref[:, None],
            eps.reshape(-1, 1) if eps.dim() else eps,
            delta.reshape(-1, 1) if delta.dim() else delta,
        )
    rem = torch.clamp(T_ref - t, min=0.0)
    w = torch.minimum(torch.ones_like(rem), rem * eps)
    w_kl = torch.sqrt(rem * delta / 2.0)
    w = torch.where(torch.isfinite(w_kl), torch.minimum(w, w_kl), w)
    return w


def decide(
    mode,
    threshold,
    *,
    eps_hat,
    tv_lo_max,
    delta_hat,
    kl_lo_max,
    mean_hi=None,
    mean_lo=None,
    heuristic_stat=None,
    avg_threshold=None,
):
    """Sequence accept decision and status from per-sequence statistics ``[B]`` (docs/bounds.md#sequence-certificate).

    tv: accept iff ε̂ ≤ θ (CERT_IN); CERT_OUT iff max_t tv_lo > θ; else UNDETERMINED (rejected). kl: the same with
    δ̂ and kl_lo. ``avg_threshold`` adds the average criterion on ``mean_hi`` / ``mean_lo``. Heuristic modes accept
    iff ``heuristic_stat`` ≤ θ and report HEURISTIC. DATA_ERROR is applied by the caller.
    """
    B = eps_hat.shape[0]
    status = torch.full((B,), UNDETERMINED, dtype=torch.int8)
    if mode in ("tv", "kl"):
        up, low = (eps_hat, tv_lo_max) if mode == "tv" else (delta_hat, kl_lo_max)
        accept = up <= threshold
        out = low > threshold
        if avg_threshold is not None:
            accept = accept & (mean_hi <= avg_threshold)
            out = out | (mean_lo > avg_threshold)
        status[out] = CERT_OUT
        status[accept] = CERT_IN
    elif mode in ("k2max", "k3mean"):
        accept = heuristic_stat <= threshold
        status[:] = HEURISTIC
    else:
        raise ValueError(f"mode must be one of {MODES}")
    return accept, status


def sequence_certificate(
    tv_lo,
    tv_hi,
    kl_hi=None,
    response_mask=None,
    *,
    kl_lo=None,
    err=None,
    mode="tv",
    threshold=None,
    avg_threshold=None,
    budget=None,
    T_ref=None,
    constants="paper",
    reward_range=1.0,
    heuristic=None,
    weights_from="batch",
) -> dict:
    """Per-sequence certificate and accept decision over ``[B, T]`` inputs (docs/bounds.md#sequence-certificate).

    ``mode``: ``"tv"`` (accept iff ε̂ ≤ θ with robust tv_hi), ``"kl"`` (TRM-Max: accept iff δ̂ ≤ θ; +∞ never passes),
    or the heuristic verl-equivalent ``"k2max"`` (max_t k2 ≤ θ) / ``"k3mean"`` (mean_t k3 ≤ θ) which need
    ``heuristic={"k2": …, "k3": …}`` and give status HEURISTIC. ``avg_threshold`` adds TRM's average criterion
    (mean_t kl_hi, or mean_t tv_hi in TV mode). ``threshold=None`` with a ``budget``: the budget-aware threshold
    (max over the mode's bounds of :func:`budget_threshold` at ``T_ref``); with neither, DEFAULT_THRESHOLDS.
    Status: CERT_IN (accepted), CERT_OUT (a certified lower end exceeds θ), UNDETERMINED (rejected, fail closed),
    DATA_ERROR (any flagged position). ``weights_from="batch"`` uses the batch's ε̂, δ̂ and T_ref in A(y);
    ``"sequence"`` uses each sequence's own ε̂, δ̂ and length (streaming use).
    Returns per-sequence ``[B]`` tensors and the batch-level ``bounds`` / ``threshold`` / ``acceptance_rate``.
    """
    tv_lo = torch.as_tensor(tv_lo, dtype=torch.float64)
    tv_hi = torch.as_tensor(tv_hi, dtype=torch.float64)
    m = _mask(tv_hi, response_mask)
    Bn, Tn = tv_hi.shape
    lengths = m.sum(-1)
    kl_hi = torch.full_like(tv_hi, math.inf) if kl_hi is None else torch.as_tensor(kl_hi, dtype=torch.float64)
    kl_lo = 2.0 * tv_lo * tv_lo if kl_lo is None else torch.as_tensor(kl_lo, dtype=torch.float64)
    bad = torch.zeros(Bn, dtype=torch.bool) if err is None else ((torch.as_tensor(err) != 0) & m).any(-1)
    zero = torch.zeros_like(tv_hi)
    tv_hi_m = torch.where(m, tv_hi, zero)
    tv_lo_m = torch.where(m, tv_lo, zero)
    kl_hi_m = torch.where(m, kl_hi, zero)
    eps_hat = _masked_max(tv_hi, m)
    tv_lo_max = _masked_max(tv_lo, m)
    delta_hat = _masked_max(kl_hi, m)
    kl_lo_max = _masked_max(kl_lo, m)
    kl_seq = kl_hi_m.sum(-1)
    tv_sum = tv_hi_m.sum(-1)
    tv_seq = torch.minimum(torch.clamp(tv_sum, max=1.0), torch.sqrt(kl_seq / 2.0))
    n = lengths.clamp(min=1).to(torch.float64)
    ok = ~bad
    T_batch = int(lengths.max()) if Bn else 0
    T_ref = T_batch if T_ref is None else int(T_ref)

    # --- A(y) ---------------------------------------------------------------------------------------------------
    c = CONSTANTS[constants] * float(reward_range)
    if weights_from == "sequence":
        w = adaptive_weights(lengths.to(torch.float64), eps_hat, delta_hat, Tn)
    else:
        e_b = float(eps_hat[ok].max()) if ok.any() else 1.0
        d_b = float(delta_hat[ok].max()) if ok.any() else math.inf
        w = adaptive_weights(T_ref, e_b, d_b, Tn).expand(Bn, Tn)
    A_y = c * (tv_hi_m * w).sum(-1)

    # --- decision -------------------------------------------------------------------------------------------------
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    threshold_source = "given"
    if threshold is None and budget is not None and mode in ("tv", "kl"):
        threshold, via = guard_threshold(mode, T_ref, budget, constants=constants, reward_range=reward_range)
        threshold_source = f"budget via {via}"
    elif threshold is None:
        threshold = DEFAULT_THRESHOLDS[mode]
        threshold_source = "default"
    heur = None
    if mode in ("k2max", "k3mean"):
        if not heuristic:
            raise ValueError(f"mode {mode!r} needs heuristic={{'k2': …, 'k3': …}} per-token estimates")
        if mode == "k2max":
            heur = _masked_max(torch.as_tensor(heuristic["k2"], dtype=torch.float64), m)
        else:
            heur = torch.where(m, torch.as_tensor(heuristic["k3"], dtype=torch.float64), zero).sum(-1) / n
    accept, status = decide(
        mode,
        threshold,
        eps_hat=eps_hat,
        tv_lo_max=tv_lo_max,
        delta_hat=delta_hat,
        kl_lo_max=kl_lo_max,
        mean_hi=(tv_hi_m if mode != "kl" else kl_hi_m).sum(-1) / n,
        mean_lo=(tv_lo_m if mode != "kl" else torch.where(m, kl_lo, zero)).sum(-1) / n,
        heuristic_stat=heur,
        avg_threshold=avg_threshold,
    )
    accept = accept & ok
    status[bad] = DATA_ERROR

    # --- batch-level bounds at the batch's measured values (valid sequences only) ------------------------------
    bounds = {}
    if ok.any():
        T_b = max(T_ref, T_batch)
        prof = (tv_hi_m[ok].sum(0) / int(ok.sum()))[:T_b].tolist()  # D̄_t plug-in (zeros after EOS)
        d_b = float(delta_hat[ok].max())
        bounds = trm_bounds(
            T_b,
            eps=float(eps_hat[ok].max()),
            delta=d_b if math.isfinite(d_b) else None,
            kl_seq=float(kl_seq[ok].mean()) if math.isfinite(d_b) else None,
            tv_seq=float(tv_seq[ok].mean()),
            tv_profile=prof,
            constants=constants,
            reward_range=reward_range,
        )
    return {
        "accept": accept,
        "status": status,
        "length": lengths,
        "eps_hat": eps_hat,
        "delta_hat": delta_hat,
        "tv_lo_max": tv_lo_max,
        "kl_lo_max": kl_lo_max,
        "kl_seq": kl_seq,
        "tv_seq": tv_seq,
        "A_y": A_y,
        "threshold": float(threshold),
        "threshold_source": threshold_source,
        "T_ref": T_ref,
        "acceptance_rate": float(accept.to(torch.float64).mean()) if Bn else None,
        "bounds": bounds,
    }


def trm_mask(
    tv_lo=None,
    tv_hi=None,
    kl_lo=None,
    kl_hi=None,
    response_mask=None,
    *,
    mode="kl",
    threshold=None,
    avg_threshold=None,
    err=None,
    logp_roll=None,
    logp_train=None,
):
    """TRM sequence mask (docs/bounds.md#trm-masks, docs/bounds.md#sequence-certificate): ``(accept [B] bool,
    status [B] int8)``.

    ``mode="kl"`` TRM-Max with certified ``kl_hi`` (+ optional average criterion), ``"tv"`` its TV analogue; the
    heuristic verl-equivalent modes ``"k2max"`` (seq_max_k2) and ``"k3mean"`` (seq_mean_k3) take the sampled
    log-probs and give status HEURISTIC (not a certificate).
    """
    heuristic = None
    if mode in ("k2max", "k3mean"):
        from workers.certify.estimators import sampled_estimates

        est = sampled_estimates(logp_roll, logp_train)
        heuristic = {"k2": est["k2"], "k3": est["k3"]}
        tv_lo, tv_hi = est["tv_lo"], est["tv_hi"]
    r = sequence_certificate(
        tv_lo,
        tv_hi,
        kl_hi,
        response_mask,
        kl_lo=kl_lo,
        err=err,
        mode=mode,
        threshold=threshold,
        avg_threshold=avg_threshold,
        heuristic=heuristic,
    )
    return r["accept"], r["status"]


LENGTH_EDGES = (64, 128, 256, 512, 1024, 2048, 4096, 8192)


def length_bucket(length: int, edges=LENGTH_EDGES) -> str:
    """Bucket label ``"≤64"``, ``"65-128"``, …, ``">8192"``."""
    prev = 0
    for e in edges:
        if length <= e:
            return f"<={e}" if prev == 0 else f"{prev + 1}-{e}"
        prev = e
    return f">{edges[-1]}"


def acceptance_by_length(accept, lengths, edges=LENGTH_EDGES) -> list[dict]:
    """Acceptance rate by length bucket (TRM's length-bias diagnostic, docs/bounds.md#trm-masks): list of
    ``{bucket, sequences, accepted, acceptance_rate}`` in bucket order (empty buckets omitted)."""
    accept = torch.as_tensor(accept).to(torch.bool).tolist()
    lengths = torch.as_tensor(lengths).tolist()
    agg: dict = {}
    for a, n in zip(accept, lengths):
        k = length_bucket(int(n), edges)
        s = agg.setdefault(k, [0, 0])
        s[0] += 1
        s[1] += int(a)
    order = [length_bucket(e, edges) for e in edges] + [f">{edges[-1]}"]
    return [
        {"bucket": k, "sequences": agg[k][0], "accepted": agg[k][1], "acceptance_rate": agg[k][1] / agg[k][0]}
        for k in order
        if k in agg
    ]
