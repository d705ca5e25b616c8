"""The audit rules about numbers (docs/fidelity-rules.md#rules-r0r9): R6 the rollout's log-probs, R7 their semantics
and the top-K lists' consistency with them, R8 the trainer's log-probs (alignment with the rollout, staleness, mixed
policy versions). :func:`workers.fidelity.rules.evaluate_call` runs them, in this order, on a call that passed R0
and R1; each marks its failures in the call's bit words (:mod:`workers.fidelity.codes`).

A *positive* log-prob (> ``positive_tol``) is reported as ``LOGPROB_NONFINITE`` / ``TRAINER_LOGPROB_NONFINITE``
(the code for "not a valid log-probability"; R8 lists no other code for it). ``MIXED_POLICY_VERSION`` marks the
positions whose ``rollout.token_policy_versions`` entry differs from the latest version in the call (the earlier
off-policy segment of a partial rollout) or is null (a partial rollout whose token-to-version map the log does not
give); with ``max_staleness`` each token is judged by its own version, never by the call's last one.
``LOGPROB_UNVERIFIED`` marks the positions of ``rollout.logprob_unverified`` spans: the importer could not show the
value is the engine's log-prob for that id (a placeholder, padding, re-encoded ids); the reasons go to the call's
``logprob_unverified`` entry.
"""

from __future__ import annotations

import numpy as np

from workers.fcr.topk import topk_arrays
from workers.fidelity.codes import fail_all, fail_at


def _floats(values, n):
    """(float|null)[] → (float64 array with NaN at nulls, bool mask of nulls)."""
    if values is None:
        return np.full(n, np.nan), np.ones(n, dtype=bool)
    if None not in values:
        return np.asarray(values, dtype=np.float64).reshape(n), np.zeros(n, dtype=bool)
    missing = np.fromiter((v is None for v in values), dtype=bool, count=n)
    arr = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return arr, missing


def _median(d: np.ndarray) -> float:
    """``np.median`` (mean of the two middle values for an even count) through one ``np.partition``."""
    m = len(d)
    h = m // 2
    if m % 2:
        return float(np.partition(d, h)[h])
    p = np.partition(d, (h - 1, h))
    return float((p[h - 1] + p[h]) / 2)


def _untransformed(sampling: dict) -> bool:
    """R7 (docs/fidelity-rules.md#rules-r0r9): raw log-probs equal processed ones only if sampling does not
    transform the distribution."""
    g = sampling.get

    def eq(key, ok, default_ok=True):
        v = g(key)
        return default_ok if v is None else v in ok

    return (
        eq("temperature", (1, 1.0))
        and eq("top_p", (1, 1.0))
        and eq("top_k", (0, -1))
        and eq("min_p", (0, 0.0))
        and eq("repetition_penalty", (1, 1.0))
        and eq("presence_penalty", (0, 0.0))
        and eq("frequency_penalty", (0, 0.0))
        and not g("logit_bias_present")
        and not g("structured_output")
    )


def rollout_logprobs(rec: dict, result, opts, n: int):
    """R6, per token: missing (null), non-finite or positive, sentinel. Returns (log-probs, usable mask)."""
    r_lp, r_missing = _floats(rec["rollout"]["logprobs"], n)
    finite = np.isfinite(r_lp)
    sentinel = finite & (r_lp <= opts.sentinel + 1e-6)
    nonfinite = (~finite & ~r_missing) | (finite & (r_lp > opts.positive_tol))
    fail_at(result, "LOGPROB_MISSING", r_missing)
    fail_at(result, "LOGPROB_NONFINITE", nonfinite)
    fail_at(result, "SENTINEL_LOGPROB", sentinel)
    unverified = _unverified(rec["rollout"].get("logprob_unverified"), n)
    if unverified is not None:
        fail_at(result, "LOGPROB_UNVERIFIED", unverified)
        result.entry["logprob_unverified"] = sorted({s[2] for s in rec["rollout"]["logprob_unverified"]})
        return r_lp, finite & ~sentinel & ~nonfinite & ~unverified
    return r_lp, finite & ~sentinel & ~nonfinite


def _unverified(spans, n):
    """``rollout.logprob_unverified`` spans → a bool mask (None when there are none)."""
    if not spans:
        return None
    mask = np.zeros(n, dtype=bool)
    for a, b, _ in spans:
        mask[a:b] = True
    return mask


def semantics_and_topk(rec: dict, result, opts, ids, n: int, r_lp, r_ok, topk: dict):
    """R7: the log-probs mean what the trainer computes (processed, or raw under an untransformed request) — a
    call-level check; and each listed sampled id's top-K log-prob agrees with ``rollout.logprobs`` — per token.
    Returns (rollout top-K arrays or None, response ids as int64 or None)."""
    eng = rec.get("engine")
    mode = eng.get("logprobs_mode") if isinstance(eng, dict) else None
    if not isinstance(eng, dict) or (mode == "raw_logprobs" and not isinstance(rec.get("sampling"), dict)):
        fail_all(result, "R7_NOT_EVALUABLE")
    elif not (
        mode == "processed_logprobs"
        or (
            mode == "raw_logprobs"
            and eng.get("generation_config_source") == "request_only"
            and _untransformed(rec["sampling"])
        )
    ):
        fail_all(result, "LOGPROB_SEMANTICS_UNVERIFIED")
    rtk = rec["rollout"].get("top_k")
    if rtk is None or not n:
        return None, None
    ids_arr = np.asarray(ids, dtype=np.int64)
    r_tk = topk.get("rollout") or topk_arrays(rtk, n)
    tk_ids, tk_lps, _ = r_tk
    hit = tk_ids == ids_arr[:, None]
    listed = hit.any(1)
    val = np.where(hit, tk_lps, 0.0).sum(1)
    bad = listed & r_ok & ~(np.abs(val - np.where(r_ok, r_lp, 0.0)) <= opts.topk_tol)
    fail_at(result, "TOPK_INCONSISTENT", bad)
    return r_tk, ids_arr


def trainer_logprobs(rec: dict, trainer: dict, result, opts, n: int, r_lp, r_ok):
    """R8: the trainer's log-probs are present and valid, aligned with the rollout's (median |difference| ≤
    ``tau_align``), not stale (with ``max_staleness``), and the rollout's tokens come from one policy version.
    Returns the trainer's log-probs (NaN where it has none)."""
    t_vals = trainer.get("logprobs")
    if t_vals is None:
        fail_all(result, "TRAINER_LOGPROB_MISSING")
        t_ok = np.zeros(n, dtype=bool)
        t_lp = np.full(n, np.nan)
    else:
        t_lp, t_missing = _floats(t_vals, n)
        t_fin = np.isfinite(t_lp)
        t_bad = (~t_fin & ~t_missing) | (t_fin & (t_lp > opts.positive_tol))
        fail_at(result, "TRAINER_LOGPROB_MISSING", t_missing)
        fail_at(result, "TRAINER_LOGPROB_NONFINITE", t_bad)
        t_ok = t_fin & ~t_bad
    _alignment(result, opts, r_lp, r_ok, t_lp, t_ok)
    tpv = rec["rollout"].get("token_policy_versions")
    versions = _versions(tpv, n) if tpv and n else None
    if opts.max_staleness is not None:
        _staleness(rec, trainer, result, opts, versions)
    if versions is not None:
        v, known = versions
        latest = v[known].max() if known.any() else 0
        fail_at(result, "MIXED_POLICY_VERSION", ~known | (v != latest))
    return t_lp


def _versions(tpv, n):
    """``rollout.token_policy_versions`` → (int64 versions, bool mask of the known ones)."""
    known = np.fromiter((x is not None for x in tpv), dtype=bool, count=n)
    return np.fromiter((x if x is not None else -1 for x in tpv), dtype=np.int64, count=n), known


def _staleness(rec, trainer, result, opts, versions) -> None:
    """R8 staleness: ``trainer.policy_version`` − the version that sampled each token ≤ ``max_staleness``. With
    per-token versions every token is judged by its own (an unknown one cannot be judged); without them, by
    ``model.policy_version``."""
    tv = trainer.get("policy_version")
    if type(tv) is not int:
        fail_all(result, "R8_NOT_EVALUABLE")
        return
    if versions is not None:
        v, known = versions
        fail_at(result, "R8_NOT_EVALUABLE", ~known)
        fail_at(result, "STALE_ROLLOUT", known & (tv - v > opts.max_staleness))
        return
    model = rec.get("model")
    mv = model.get("policy_version") if isinstance(model, dict) else None
    if type(mv) is not int:
        fail_all(result, "R8_NOT_EVALUABLE")
    elif tv - mv > opts.max_staleness:
        fail_all(result, "STALE_ROLLOUT")


def _alignment(result, opts, r_lp, r_ok, t_lp, t_ok) -> None:
    both = r_ok & t_ok
    if not both.any():
        result.entry["alignment"] = None
        return
    d = np.abs(t_lp[both] - r_lp[both])
    med = _median(d)
    result.align_diff = d
    result.binary_tv = np.abs(np.exp(t_lp[both]) - np.exp(r_lp[both]))
    result.entry["alignment"] = {
        "median_abs_diff": med,
        "mean_abs_diff": float(d.mean()),
        "max_abs_diff": float(d.max()),
        "positions": int(both.sum()),
    }
    if med > opts.tau_align:
        fail_all(result, "TRAINER_MISALIGNED")
