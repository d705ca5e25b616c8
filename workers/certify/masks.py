"""Training masks as pure functions over ``[B, T]`` / ``[B, T, K]`` tensors (docs/masks.md).

Every function returns a **keep** mask (``True`` = the token's gradient is kept). Advantages may be per sequence
``[B]`` or per token ``[B, T]``. Direction rule (DPPO, docs/masks.md#dppo): a token is blocked only if the update would move
the sampled token's probability further away — ``A > 0 and r > 1`` or ``A < 0 and r < 1`` (r = π_θ/π_roll) — and its
divergence exceeds the threshold; moves back towards 1 are never blocked.
"""

from __future__ import annotations

import math

import torch

from workers.certify.bounds import guard_threshold
from workers.certify.estimators import bernoulli_kl
from workers.certify.intervals import tv_interval_topk
from workers.certify.adaptive import interval_envelopes
from workers.certify.robust import IN, token_status


def _adv(advantages, shape):
    a = torch.as_tensor(advantages, dtype=torch.float64)
    return a[:, None].expand(shape) if a.dim() == 1 else a.expand(shape)


def _away(logp_roll, logp_train, advantages):
    """Tokens whose update moves r away from 1: (A > 0 and r > 1) or (A < 0 and r < 1)."""
    a = torch.as_tensor(logp_roll, dtype=torch.float64)
    b = torch.as_tensor(logp_train, dtype=torch.float64)
    adv = _adv(advantages, a.shape)
    return ((adv > 0) & (b > a)) | ((adv < 0) & (b < a))


def dppo_divergence(
    logp_roll,
    logp_train,
    divergence="binary_tv",
    *,
    roll_ids=None,
    roll_topk_logp=None,
    train_logp_at_roll_ids=None,
    sampled_id=None,
):
    """DPPO's divergence D_t (docs/masks.md#dppo), a certified **lower** bound on the true divergence.

    ``binary_tv`` |μ(a) − π(a)|, ``binary_kl`` KL(Bern(μ(a))‖Bern(π(a))); ``topk_tv`` / ``topk_kl`` on the reduced
    alphabet TopK(μ) ∪ {a} ∪ {other} with the trainer evaluated at the engine's ids (``train_logp_at_roll_ids``
    aligned with ``roll_ids``, id −1 = padding). Top-K TV equals the lower end of Theorem A with S_q = S_p.
    """
    a = torch.as_tensor(logp_roll, dtype=torch.float64)
    b = torch.as_tensor(logp_train, dtype=torch.float64)
    if divergence == "binary_tv":
        return (torch.exp(a) - torch.exp(b)).abs()
    if divergence == "binary_kl":
        return bernoulli_kl(torch.exp(a), torch.exp(b), a, b)
    if divergence in ("topk_tv", "topk_kl"):
        r = tv_interval_topk(roll_ids, roll_topk_logp, roll_ids, train_logp_at_roll_ids, sampled_id, a, b, caps=False)
        if divergence == "topk_tv":
            return r.lo
        return _coarse_kl(roll_ids, roll_topk_logp, train_logp_at_roll_ids, sampled_id, a, b)
    raise ValueError(f"unknown divergence {divergence!r}")


def _coarse_kl(ids, p_lp, q_lp, y, a, b):
    """Σ_{A'} p log(p/q) + p_other log(p_other/q_other) over A' = listed ids ∪ {y}
    (DPPO Top-K KL, docs/masks.md#dppo)."""
    ids = torch.as_tensor(ids)
    p_lp = torch.as_tensor(p_lp, dtype=torch.float64)
    q_lp = torch.as_tensor(q_lp, dtype=torch.float64)
    y = torch.as_tensor(y)
    keep = (ids >= 0) & (ids != y[..., None])
    p = torch.where(keep, torch.exp(p_lp), 0.0)
    q = torch.where(keep, torch.exp(q_lp), 0.0)
    head = torch.where(keep, p * (p_lp - q_lp), 0.0).sum(-1) + torch.exp(a) * (a - b)
    po = torch.clamp(1.0 - p.sum(-1) - torch.exp(a), min=0.0)
    qo = torch.clamp(1.0 - q.sum(-1) - torch.exp(b), min=1e-12)  # Stable-RL clamps tails at 1e-12
    return head + torch.where(po > 0, po * (torch.log(po.clamp(min=1e-300)) - torch.log(qo)), 0.0)


def dppo_mask(logp_roll, logp_train, advantages, threshold, *, divergence="binary_tv", response_mask=None, **topk):
    """DPPO keep mask (docs/masks.md#dppo): M_t = 0 iff (Â>0 ∧ r>1 ∧ D>δ) or (Â<0 ∧ r<1 ∧ D>δ). Thresholds: TV 0.15–0.2,
    KL 0.05."""
    D = dppo_divergence(logp_roll, logp_train, divergence, **topk)
    keep = ~(_away(logp_roll, logp_train, advantages) & (D > threshold))
    if response_mask is not None:
        keep &= torch.as_tensor(response_mask).to(torch.bool)
    return keep


def cdppo_mask(
    p_ids,
    p_lp,
    q_ids,
    q_lp,
    sampled_id,
    logp_roll,
    logp_train,
    advantages,
    threshold,
    *,
    response_mask=None,
    caps=True,
    precision="fp32",
    eta=None,
    adaptive=False,
    budget=None,
    T_ref=None,
    constants="paper",
    reward_range=1.0,
    return_info=False,
):
    """Certified DPPO (C-DPPO) keep mask over ``[B, T, K]`` lists.

    * certified two-sided TV interval with error-robust widening (``precision`` / ``eta``,
      docs/intervals.md#error-robust-widening);
    * the **upper** end decides: a direction-unsafe token is kept only if its status is IN (hi ≤ θ);
      UNDETERMINED counts as outside (fail closed); DATA_ERROR tokens are always dropped;
    * ``adaptive=True`` uses the running envelopes over K = 0..K_max (docs/intervals.md#adaptive-k): they can only tighten the
      interval
      (and report the K that decided each token) but cost K_max + 1 interval evaluations, hence off by default;
    * ``budget``: the budget-aware sequence guard drops every token of a sequence whose certified ε̂ exceeds the
      largest ε keeping some TRM bound ≤ budget at horizon ``T_ref`` (default: the batch's max length).
    Returns ``keep`` (bool ``[B, T]``) or ``(keep, info)`` with ``info`` = lo, hi, status, K_used, guard.
    """
    a = torch.as_tensor(logp_roll, dtype=torch.float64)
    b = torch.as_tensor(logp_train, dtype=torch.float64)
    if adaptive:
        LO, HI, err = interval_envelopes(
            p_ids, p_lp, q_ids, q_lp, sampled_id, a, b, caps=caps, precision=precision, eta=eta
        )
        lo, hi = LO[..., -1], HI[..., -1]
        decided = (HI <= threshold) | (LO > threshold)
        K_used = torch.where(
            decided.any(-1),
            decided.to(torch.uint8).argmax(-1),
            torch.full(lo.shape, LO.shape[-1] - 1, dtype=torch.int64),
        )
    else:
        r = tv_interval_topk(p_ids, p_lp, q_ids, q_lp, sampled_id, a, b, caps=caps, precision=precision, eta=eta)
        lo, hi, err = r.lo, r.hi, r.err
        K_used = None
    status = token_status(lo, hi, threshold, err)
    keep = ~(_away(a, b, advantages) & (status != IN)) & (err == 0)
    m = torch.ones(a.shape, dtype=torch.bool) if response_mask is None else torch.as_tensor(response_mask).bool()
    keep &= m
    guard = None
    if budget is not None:
        lengths = m.sum(-1)
        T_g = int(lengths.max()) if T_ref is None else int(T_ref)
        eps_star, via = guard_threshold("tv", T_g, budget, constants=constants, reward_range=reward_range)
        eps_hat = torch.where(m, hi, torch.zeros_like(hi)).amax(-1) if hi.shape[-1] else torch.zeros(hi.shape[0])
        seq_ok = eps_hat <= eps_star
        keep &= seq_ok[:, None]
        guard = {"eps_star": eps_star, "via": via, "sequence_ok": seq_ok}
    if return_info:
        return keep, {"lo": lo, "hi": hi, "status": status, "err": err, "K_used": K_used, "guard": guard}
    return keep


# ---- verl rollout-correction rejection sampling (heuristic, docs/masks.md#verl-rejection-sampling) ---------------
SAFETY_BOUND = 20.0


def _parse_k1(spec):
    """verl k1 threshold: ``"lower_upper"`` in ratio space, or one number = upper with lower = 1/upper."""
    if isinstance(spec, str) and "_" in spec:
        lo, hi = (float(x) for x in spec.split("_"))
    else:
        hi = float(spec)
        lo = 1.0 / hi
    return math.log(lo), math.log(hi)


def verl_rs_mask(logp_roll, logp_train, response_mask, option, threshold):
    """verl-compatible rejection mask (PR #4544 semantics, docs/masks.md#verl-rejection-sampling) — **heuristic, not a
    certificate**.

    ``option`` is a comma-chained list of ``token_k{1,2,3}``, ``seq_sum_k{1,2,3}``, ``seq_mean_k{1,2,3}``,
    ``seq_max_k{2,3}`` (logical AND); ``threshold`` one spec per option or one broadcast to all (string
    ``"a_b,c"`` or list). log r = log π_train − log π_roll clamped to ±20; k1 = −log r, k2 = ½(log r)²,
    k3 = e^{log r} − 1 − log r. Sequence options broadcast to all tokens; the result is multiplied into the mask.
    """
    a = torch.as_tensor(logp_roll, dtype=torch.float64)
    b = torch.as_tensor(logp_train, dtype=torch.float64)
    m = torch.as_tensor(response_mask).to(torch.bool)
    log_r = torch.clamp(b - a, -SAFETY_BOUND, SAFETY_BOUND)
    ks = {"k1": -log_r, "k2": 0.5 * log_r * log_r, "k3": torch.exp(log_r) - 1.0 - log_r}
    opts = [o.strip() for o in option.split(",")]
    ths = (
        threshold.split(",")
        if isinstance(threshold, str)
        else (list(threshold) if isinstance(threshold, (list, tuple)) else [threshold])
    )
    if len(ths) == 1:
        ths = ths * len(opts)
    if len(ths) != len(opts):
        raise ValueError("one threshold per option, or one for all")
    keep = m.clone()
    n = m.sum(-1).clamp(min=1).to(torch.float64)
    for opt, th in zip(opts, ths):
        scope, _, k = opt.rpartition("_")
        if (
            k not in ks
            or scope not in ("token", "seq_sum", "seq_mean", "seq_max")
            or (scope == "seq_max" and k == "k1")
        ):
            raise ValueError(f"unknown rollout_rs option {opt!r}")
        x = torch.where(m, ks[k], torch.zeros_like(ks[k]))
        if scope == "token":
            stat = x
        elif scope == "seq_sum":
            stat = x.sum(-1, keepdim=True)
        elif scope == "seq_mean":
            stat = x.sum(-1, keepdim=True) / n[:, None]
        else:
            stat = torch.where(m, ks[k], torch.full_like(x, -math.inf)).amax(-1, keepdim=True)
        if k == "k1":
            lo, hi = _parse_k1(th)
            ok = (stat >= lo) & (stat <= hi)
        else:
            ok = stat <= float(th)
        keep &= ok.expand_as(m)
    return keep
