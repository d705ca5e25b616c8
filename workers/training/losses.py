"""Policy-gradient losses in one gradient form (docs/masks.md, docs/bounds.md#trm-masks).

Every loss here is written as

    loss = −(1/Z) · Σ_{i,t} M_{i,t} · sg(w_{i,t}) · Â_{i,t} · log π_θ(y_{i,t} | c_{i,t})

so that its gradient is exactly the unified form of DPPO (docs/masks.md#dppo),

    ∇loss = −(1/Z) · Σ_{i,t} M_{i,t} · w_{i,t} · Â_{i,t} · ∇log π_θ(y_{i,t} | c_{i,t}),

with a keep mask ``M`` ∈ {0, 1} (bool), a non-negative weight ``w`` (stop-gradient) and a normaliser ``Z``:

* ``"token"``  Z = Σ_{i,t} m_{i,t} (valid tokens; DAPO / token mean),
* ``"seq"``    per-sequence token mean, then the mean over sequences (GRPO),
* ``"batch"``  Z = N, the number of sequences, with rejected sequences contributing zero (TRM,
  docs/bounds.md#trm-masks).

Ratios (bypass mode, the only anchor is the behaviour policy μ = π_roll, as DPPO requires, docs/masks.md#dppo):
``r = π_θ(y)/π_roll(y)`` from the log-probs. The decoupled corrections (TIS, IcePop, Seq-TIS/MIS;
docs/masks.md#importance-weights-and-related-corrections) also
accept ``logp_old`` (the trainer's recompute at θ_old): then ``k = π_old/π_roll`` is the mismatch ratio and
``r_old = π_θ/π_old`` the policy-drift ratio whose PPO clip multiplies in; without ``logp_old`` (bypass) π_old = π_θ
(detached), r_old ≡ 1 and the PPO factor is inert.

=================  ====================================================  =====================================
loss               M (keep)                                              w (stop-gradient)
=================  ====================================================  =====================================
ppo_clip / GRPO    ¬[(Â>0 ∧ r>1+ε_h) ∨ (Â<0 ∧ r<1−ε_l)]                   r
tis                PPO(r_old)                                            min(k, C)·r_old
seq_tis            PPO(r_old)                                            min(Π_t k_t, C)·r_old
seq_mis            PPO(r_old) ∧ Π_t k_t ≤ C                              Π_t k_t·r_old
icepop             PPO(r_old) ∧ α ≤ k ≤ β                                k·r_old
cispo              1 (or the PPO mask with ``ppo_mask=True``)            min(r, 1+ε_h^IS)
dppo               DPPO rule (workers.certify.masks.dppo_mask)           min(r, C)  (C = ∞ by default)
trm                sequence accept (workers.certify.sequence.trm_mask)   r  (Z = N)
cdppo              C-DPPO rule (workers.certify.masks.cdppo_mask)        min(r, C)
=================  ====================================================  =====================================

The masks are **not** re-implemented here: DPPO, C-DPPO and TRM masks come from :mod:`workers.certify` (one
implementation). All mask statistics are computed in float64 from detached log-probs; only ``logp`` carries a
gradient. Each function returns a :class:`LossOut` ``(loss, keep, weight, info)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from workers.certify.masks import cdppo_mask, dppo_mask
from workers.certify.sequence import trm_mask

LOG_CLAMP = 20.0  # log-ratio clamp (verl SAFETY_BOUND, Stable-RL min(log r, 20))


class LossOut(NamedTuple):
    loss: torch.Tensor  # scalar, differentiable w.r.t. ``logp``
    keep: torch.Tensor  # bool [B, T]  M (already multiplied by the response mask)
    weight: torch.Tensor  # float [B, T] w (detached)
    info: dict  # statistics: masked fractions, normaliser, sequence accepts, …


# ---- helpers ------------------------------------------------------------------------------------------------------
def _mask(response_mask, like):
    if response_mask is None:
        return torch.ones(like.shape, dtype=torch.bool, device=like.device)
    return torch.as_tensor(response_mask, device=like.device).to(torch.bool)


def _adv(advantages, like):
    a = torch.as_tensor(advantages, device=like.device).to(like.dtype)
    return a[:, None].expand(like.shape) if a.dim() == 1 else a.expand(like.shape)


def log_ratio(logp_num, logp_den):
    """log(π_num/π_den) clamped to ±20 (verl's SAFETY_BOUND, docs/masks.md#verl-rejection-sampling)."""
    return torch.clamp(logp_num - logp_den, -LOG_CLAMP, LOG_CLAMP)


def normaliser(m: torch.Tensor, norm: str) -> torch.Tensor:
    """Per-token normalisation weights ν_{i,t} with loss = −Σ ν·M·w·Â·log π (see module docstring).

    ``token``: 1/Σm; ``seq``: 1/(N·|o_i|) (GRPO); ``batch``: 1/N (TRM,
    docs/bounds.md#trm-masks: rejected sequences still count in N).
    """
    mf = m.to(torch.float64)
    N = max(m.shape[0], 1)
    if norm == "token":
        return mf / mf.sum().clamp(min=1.0)
    if norm == "seq":
        return mf / (mf.sum(-1, keepdim=True).clamp(min=1.0) * N)
    if norm == "batch":
        return mf / N
    raise ValueError(f"norm must be 'token', 'seq' or 'batch' (got {norm!r})")


def unified_loss(logp, keep, weight, advantages, response_mask=None, *, norm="token", info=None) -> LossOut:
    """loss = −Σ ν·M·sg(w)·Â·log π_θ (module docstring); gradient M·w·Â·∇log π_θ normalised by ν
    (docs/masks.md#dppo)."""
    m = _mask(response_mask, logp)
    keep = keep.to(torch.bool) & m
    w = torch.as_tensor(weight, device=logp.device).detach().to(torch.float64)
    adv = _adv(advantages, w)
    nu = normaliser(m, norm)
    coef = torch.where(keep, nu * w * adv, torch.zeros_like(w)).to(logp.dtype)
    loss = -(coef * torch.where(m, logp, torch.zeros_like(logp))).sum()
    n_tok = int(m.sum())
    info = dict(info or {})
    info.update(
        {
            "norm": norm,
            "tokens": n_tok,
            "masked_tokens": int((m & ~keep).sum()),
            "masked_fraction": float((m & ~keep).sum()) / max(n_tok, 1),
            "mean_weight": float(torch.where(keep, w, torch.zeros_like(w)).sum()) / max(int(keep.sum()), 1),
        }
    )
    return LossOut(loss, keep, w, info)


def ppo_keep(ratio, advantages, eps_low=0.2, eps_high=0.28):
    """PPO/GRPO clip as a keep mask (docs/masks.md#ppo-clip): M = 0 iff (Â>0 ∧ r>1+ε_high) or (Â<0 ∧ r<1−ε_low).

    For min(r·Â, clip(r, 1−ε_l, 1+ε_h)·Â) this is exactly where the clipped (constant) branch is active; elsewhere
    the gradient is r·Â·∇log π. Note the leak of docs/masks.md#ppo-clip: Â<0 with r ≫ 1 is *not* clipped.
    """
    r = torch.as_tensor(ratio, dtype=torch.float64)
    adv = _adv(advantages, r)
    return ~(((adv > 0) & (r > 1.0 + eps_high)) | ((adv < 0) & (r < 1.0 - eps_low)))


def _cpu(x):
    """Detached CPU float64/int copy (the certify masks build CPU tensors; the loss itself stays on ``logp``'s device)."""
    if x is None:
        return None
    if isinstance(x, dict):
        return {k: _cpu(v) for k, v in x.items()}
    t = torch.as_tensor(x).detach().cpu()
    return t.to(torch.float64) if t.is_floating_point() else t


def _ratios(logp, logp_roll, logp_old):
    """(r, k, r_old) in float64, detached: r = π_θ/π_roll, k = π_old/π_roll, r_old = π_θ/π_old."""
    lp = logp.detach().to(torch.float64)
    lr = torch.as_tensor(logp_roll, dtype=torch.float64, device=lp.device)
    lo = lp if logp_old is None else torch.as_tensor(logp_old, dtype=torch.float64, device=lp.device)
    return torch.exp(log_ratio(lp, lr)), torch.exp(log_ratio(lo, lr)), torch.exp(log_ratio(lp, lo))


# ---- token-level clipping / reweighting ---------------------------------------------------------------------------
def ppo_clip_loss(logp, logp_roll, advantages, response_mask=None, *, eps_low=0.2, eps_high=0.28, norm="token"):
    """PPO / GRPO clipped surrogate anchored at the rollout policy (docs/masks.md#ppo-clip): M = PPO(r), w = r,
    r = π_θ/π_roll.

    Gradient equals that of −ν·min(r·Â, clip(r, 1−ε_low, 1+ε_high)·Â). Defaults: DAPO/GRPO range [0.8, 1.28].
    """
    r, _, _ = _ratios(logp, logp_roll, None)
    keep = ppo_keep(r, advantages, eps_low, eps_high)
    return unified_loss(logp, keep, r, advantages, response_mask, norm=norm)


def grpo_clip_loss(logp, logp_roll, advantages, response_mask=None, *, eps_low=0.2, eps_high=0.28, norm="seq"):
    """GRPO: the PPO clip with per-sequence token means (``norm="seq"``), ε_low 0.2 / ε_high 0.28
    (docs/masks.md#ppo-clip)."""
    return ppo_clip_loss(logp, logp_roll, advantages, response_mask, eps_low=eps_low, eps_high=eps_high, norm=norm)


def tis_loss(
    logp, logp_roll, advantages, response_mask=None, *, C=2.0, logp_old=None, eps_low=0.2, eps_high=0.28, norm="token"
):
    """Token TIS (docs/masks.md#importance-weights-and-related-corrections): w = min(k, C)·r_old, M = PPO(r_old);
    k = π_old/π_roll, r_old = π_θ/π_old.

    Bypass (``logp_old=None``): k = π_θ/π_roll, r_old ≡ 1 — DPPO's "PG-TIS": M = 1, w = min(r, C). verl default C = 2.
    """
    _, k, r_old = _ratios(logp, logp_roll, logp_old)
    keep = ppo_keep(r_old, advantages, eps_low, eps_high)
    return unified_loss(
        logp,
        keep,
        torch.clamp(k, max=C) * r_old,
        advantages,
        response_mask,
        norm=norm,
        info={"truncated_fraction": float((k > C).to(torch.float64).mean())},
    )


def _seq_log_k(logp, logp_roll, logp_old, response_mask):
    dev = logp.device
    lp = (
        logp.detach().to(torch.float64)
        if logp_old is None
        else torch.as_tensor(logp_old, dtype=torch.float64, device=dev)
    )
    m = _mask(response_mask, lp)
    lk = torch.where(m, lp - torch.as_tensor(logp_roll, dtype=torch.float64, device=dev), torch.zeros_like(lp)).sum(-1)
    return torch.clamp(lk, -LOG_CLAMP, LOG_CLAMP), m


def seq_tis_loss(
    logp, logp_roll, advantages, response_mask=None, *, C=2.0, logp_old=None, eps_low=0.2, eps_high=0.28, norm="token"
):
    """Sequence TIS (docs/masks.md#importance-weights-and-related-corrections): w = min(Π_t k_t, C)·r_old broadcast
    over the sequence, M = PPO(r_old);
    Π_t k_t = exp(clamp(Σ_t log k_t, ±20))."""
    _, _, r_old = _ratios(logp, logp_roll, logp_old)
    lk, m = _seq_log_k(logp, logp_roll, logp_old, response_mask)
    w_seq = torch.clamp(torch.exp(lk), max=C)
    keep = ppo_keep(r_old, advantages, eps_low, eps_high)
    return unified_loss(logp, keep, w_seq[:, None] * r_old, advantages, response_mask, norm=norm)


def seq_mis_loss(
    logp, logp_roll, advantages, response_mask=None, *, C=2.0, logp_old=None, eps_low=0.2, eps_high=0.28, norm="token"
):
    """Sequence MIS (docs/masks.md#importance-weights-and-related-corrections): ρ(y)·1[ρ(y) ≤ C] —
    M = PPO(r_old) ∧ Π_t k_t ≤ C, w = Π_t k_t·r_old."""
    _, _, r_old = _ratios(logp, logp_roll, logp_old)
    lk, m = _seq_log_k(logp, logp_roll, logp_old, response_mask)
    rho = torch.exp(lk)
    seq_ok = rho <= C
    keep = ppo_keep(r_old, advantages, eps_low, eps_high) & seq_ok[:, None]
    return unified_loss(
        logp,
        keep,
        rho[:, None] * r_old,
        advantages,
        response_mask,
        norm=norm,
        info={"sequences_rejected": int((~seq_ok).sum()), "sequences": int(rho.numel())},
    )


def icepop_loss(
    logp,
    logp_roll,
    advantages,
    response_mask=None,
    *,
    alpha=0.5,
    beta=5.0,
    logp_old=None,
    eps_low=0.2,
    eps_high=0.28,
    norm="token",
):
    """IcePop (Ring-1T α = 0.5, β = 5; docs/masks.md#importance-weights-and-related-corrections):
    M = PPO(r_old) ∧ α ≤ k ≤ β, w = k·r_old (weights outside are zeroed)."""
    _, k, r_old = _ratios(logp, logp_roll, logp_old)
    keep = ppo_keep(r_old, advantages, eps_low, eps_high) & (k >= alpha) & (k <= beta)
    return unified_loss(logp, keep, k * r_old, advantages, response_mask, norm=norm)


def cispo_loss(
    logp,
    logp_roll,
    advantages,
    response_mask=None,
    *,
    eps_high_is=2.0,
    ppo_mask=False,
    eps_low=0.2,
    eps_high=0.28,
    norm="token",
):
    """CISPO (docs/masks.md#importance-weights-and-related-corrections): keep every token, clip the stop-gradient
    weight: w = min(r, 1+ε_high^IS), M = 1 (or the PPO mask with ``ppo_mask=True``, the "general form"). Default 1+ε_high^IS = 3 is DPPO's "PG-TIS (CISPO)" C = 3."""
    r, _, _ = _ratios(logp, logp_roll, None)
    keep = ppo_keep(r, advantages, eps_low, eps_high) if ppo_mask else torch.ones_like(r, dtype=torch.bool)
    return unified_loss(logp, keep, torch.clamp(r, max=1.0 + eps_high_is), advantages, response_mask, norm=norm)


# ---- DPPO / C-DPPO / TRM (masks from workers.certify) -------------------------------------------------------------
def dppo_loss(
    logp,
    logp_roll,
    advantages,
    response_mask=None,
    *,
    threshold=0.15,
    divergence="binary_tv",
    C=math.inf,
    topk=None,
    norm="token",
):
    """DPPO (docs/masks.md#dppo): M from :func:`workers.certify.masks.dppo_mask` — M = 0 iff (Â>0 ∧ r>1 ∧ D>δ) or
    (Â<0 ∧ r<1 ∧ D>δ) — and w = min(r, C).

    ``divergence`` ∈ {binary_tv, binary_kl, topk_tv, topk_kl}; thresholds TV 0.15–0.2, KL 0.05. Top-K needs
    ``topk = {"roll_ids", "roll_topk_logp", "train_logp_at_roll_ids", "sampled_id"}`` ([B, T, K], id −1 = pad;
    the trainer's log-probs evaluated at the engine's ids, detached).
    """
    lp = _cpu(logp)
    keep = dppo_mask(
        _cpu(logp_roll),
        lp,
        _cpu(advantages),
        threshold,
        divergence=divergence,
        response_mask=_cpu(response_mask),
        **(_cpu(topk) or {}),
    )
    r, _, _ = _ratios(logp, logp_roll, None)
    return unified_loss(
        logp,
        keep.to(logp.device),
        torch.clamp(r, max=C),
        advantages,
        response_mask,
        norm=norm,
        info={"divergence": divergence, "threshold": threshold},
    )


def cdppo_loss(
    logp,
    logp_roll,
    advantages,
    response_mask=None,
    *,
    lists,
    threshold=0.15,
    C=math.inf,
    precision="fp32",
    eta=None,
    adaptive=True,
    budget=None,
    T_ref=None,
    constants="paper",
    caps=True,
    norm="token",
):
    """C-DPPO: DPPO's direction rule on the **certified** two-sided TV interval (docs/masks.md#c-dppo).

    M from :func:`workers.certify.masks.cdppo_mask`: a direction-unsafe token is kept only if its robust TV upper
    end is ≤ θ (status IN; UNDETERMINED fails closed), DATA_ERROR drops, adaptive K tightens the interval, and the
    optional budget-aware guard drops whole sequences whose certified ε̂ exceeds the budget threshold. w = min(r, C).
    ``lists = {"p_ids", "p_lp", "q_ids", "q_lp", "sampled_id"}`` ([B, T, K] engine / trainer top-K lists).
    """
    lp = _cpu(logp)
    lists = _cpu(lists)
    keep, cinfo = cdppo_mask(
        lists["p_ids"],
        lists["p_lp"],
        lists["q_ids"],
        lists["q_lp"],
        lists["sampled_id"],
        _cpu(logp_roll),
        lp,
        _cpu(advantages),
        threshold,
        response_mask=_cpu(response_mask),
        caps=caps,
        precision=precision,
        eta=eta,
        adaptive=adaptive,
        budget=budget,
        T_ref=T_ref,
        constants=constants,
        return_info=True,
    )
    r, _, _ = _ratios(logp, logp_roll, None)
    m = _mask(_cpu(response_mask), lp)
    st = cinfo["status"]
    info = {
        "threshold": threshold,
        "precision": precision,
        "status_counts": {
            name: int(((st == code) & m).sum())
            for code, name in ((0, "IN"), (1, "OUT"), (2, "UNDETERMINED"), (3, "DATA_ERROR"))
        },
    }
    if cinfo["guard"] is not None:
        g = cinfo["guard"]
        info["guard"] = {
            "eps_star": g["eps_star"],
            "via": g["via"],
            "sequences_dropped": int((~g["sequence_ok"]).sum()),
        }
    return unified_loss(
        logp, keep.to(logp.device), torch.clamp(r, max=C), advantages, response_mask, norm=norm, info=info
    )


def trm_loss(
    logp,
    logp_roll,
    advantages,
    response_mask=None,
    *,
    mode="kl",
    threshold=0.05,
    avg_threshold=None,
    tv=None,
    kl=None,
    tv_lo=None,
    kl_lo=None,
    norm="batch",
):
    """TRM (docs/bounds.md#trm-masks): whole-sequence mask M_i from :func:`workers.certify.sequence.trm_mask`,
    w = ρ_t = π_θ/π_roll,
    gradient (1/N)·Σ_i M_i·Â_i·Σ_t ρ_t·∇log π_θ (normalised by the **total** N, ``norm="batch"``).

    ``mode="kl"`` TRM-Max with the exact per-token ``kl`` (= KL(π_roll‖π_θ) over the full vocabulary; optional
    ``avg_threshold`` = the combined max + average criterion), ``"tv"`` its TV analogue with exact ``tv``;
    ``"k2max"`` / ``"k3mean"`` the sample-based, **heuristic** verl equivalents (seq_max_k2 / seq_mean_k3).
    Defaults: TRM-Max δ = 0.05 (TRM-Avg δ = 0.001).
    """
    lp = _cpu(logp)
    m = _mask(_cpu(response_mask), lp)
    if mode in ("k2max", "k3mean"):
        accept, status = trm_mask(
            response_mask=m, mode=mode, threshold=threshold, logp_roll=_cpu(logp_roll), logp_train=lp
        )
    else:
        tvt, klt, tv_lo, kl_lo = _cpu(tv), _cpu(kl), _cpu(tv_lo), _cpu(kl_lo)
        if mode == "kl" and klt is None:
            raise ValueError("TRM mode 'kl' needs the exact per-token KL (kl=…)")
        if tvt is None:
            tvt = torch.sqrt(klt / 2.0).clamp(max=1.0)  # Pinsker (only enters the unused TV side of the report)
        accept, status = trm_mask(
            tv_lo=tvt if tv_lo is None else tv_lo,
            tv_hi=tvt,
            kl_lo=klt if kl_lo is None else kl_lo,
            kl_hi=klt,
            response_mask=m,
            mode=mode,
            threshold=threshold,
            avg_threshold=avg_threshold,
        )
    keep = accept.to(logp.device)[:, None].expand(logp.shape)
    r, _, _ = _ratios(logp, logp_roll, None)
    return unified_loss(
        logp,
        keep,
        r,
        advantages,
        response_mask,
        norm=norm,
        info={
            "mode": mode,
            "threshold": threshold,
            "sequences": int(accept.numel()),
            "sequences_rejected": int((~accept).sum()),
            "acceptance_rate": float(accept.to(torch.float64).mean()) if accept.numel() else None,
        },
    )


LOSSES = {
    "ppo": ppo_clip_loss,
    "grpo": grpo_clip_loss,
    "tis": tis_loss,
    "seq_tis": seq_tis_loss,
    "seq_mis": seq_mis_loss,
    "icepop": icepop_loss,
    "cispo": cispo_loss,
    "dppo": dppo_loss,
    "cdppo": cdppo_loss,
    "trm": trm_loss,
}
