"""Per-token estimators from the sampled token's two log-probs (docs/intervals.md#per-token-estimators).

a = log p(y) (rollout / engine), b = log q(y) (trainer), log ρ = b − a, ρ = π_θ/π_roll.
Only ``bin_tv`` / ``tv_lo``, ``bin_kl`` and ``tv_hi`` are certificates; k1/k2/k3/TV-hat are single-sample
estimators that can miss divergence sitting on unsampled tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from workers.certify.robust import eta_from_precision


def _f64(x):
    return torch.as_tensor(x, dtype=torch.float64)


def bernoulli_kl(p: torch.Tensor, q: torch.Tensor, log_p=None, log_q=None) -> torch.Tensor:
    """KL(Bern(p) ‖ Bern(q)) = p·log(p/q) + (1−p)·log((1−p)/(1−q)), with 0·log 0 = 0
    (DPPO Binary-KL, docs/masks.md#dppo)."""
    log_p = torch.log(p) if log_p is None else log_p
    log_q = torch.log(q) if log_q is None else log_q
    p1, q1 = 1.0 - p, 1.0 - q
    head = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p))
    tail = torch.where(p1 > 0, p1 * (torch.log(p1) - torch.log(q1)), torch.zeros_like(p))
    return head + tail


def sampled_estimates(logp_roll, logp_train, eta_roll=0.0, eta_train=0.0) -> dict:
    """All the quantities of docs/intervals.md#per-token-estimators from the sampled-token log-probs (any shape;
    float64).

    Returns ``k1 = −log ρ``, ``k2 = ½(log ρ)²``, ``k3 = ρ − 1 − log ρ``, ``abslog = |log ρ|``, ``tv_hat = ½|ρ − 1|``,
    ``rev_kl = ρ log ρ − ρ + 1`` (unbiased for KL(q‖p)), ``bin_tv = |p_y − q_y|``, ``bin_kl = KL(Bern(p_y)‖Bern(q_y))``,
    and the robust certificates (docs/intervals.md#error-robust-widening, with per-value log-space errors η):
    ``tv_lo = max(0, p⁻−q⁺, q⁻−p⁺)``,
    ``tv_hi = 1 − min(p⁻, q⁻)``, ``abslog_hi = |b − a| + η_a + η_b``, ``k2_hi = ½·abslog_hi²``.
    With η = 0, ``tv_lo`` = Binary-TV (a certified lower bound) and ``tv_hi`` the "TV upper" of the table.
    """
    a = _f64(logp_roll)
    b = _f64(logp_train)
    ea = eta_from_precision(a, eta=eta_roll) if not isinstance(eta_roll, str) else eta_from_precision(a, eta_roll)
    eb = eta_from_precision(b, eta=eta_train) if not isinstance(eta_train, str) else eta_from_precision(b, eta_train)
    log_rho = b - a
    rho = torch.exp(log_rho)
    p, q = torch.exp(a), torch.exp(b)
    p_lo, p_hi = torch.exp(a - ea), torch.clamp(torch.exp(a + ea), max=1.0)
    q_lo, q_hi = torch.exp(b - eb), torch.clamp(torch.exp(b + eb), max=1.0)
    abslog_hi = log_rho.abs() + ea + eb
    return {
        "k1": -log_rho,
        "k2": 0.5 * log_rho * log_rho,
        "k3": rho - 1.0 - log_rho,
        "abslog": log_rho.abs(),
        "tv_hat": 0.5 * (rho - 1.0).abs(),
        "rev_kl": rho * log_rho - rho + 1.0,
        "bin_tv": (p - q).abs(),
        "bin_kl": bernoulli_kl(p, q, a, b),
        "tv_lo": torch.clamp(torch.maximum(p_lo - q_hi, q_lo - p_hi), min=0.0),
        "tv_hi": torch.clamp(1.0 - torch.minimum(p_lo, q_lo), 0.0, 1.0),
        "abslog_hi": abslog_hi,
        "k2_hi": 0.5 * abslog_hi * abslog_hi,
    }


_CHUNK = 1 << 15  # elements per pass of the sampled-only certificate: its two temporaries stay in the L1/L2 cache


def sampled_certificate(logp_roll: torch.Tensor, logp_train: torch.Tensor):
    """The cheapest certificate (hot path for sampled-only data): ``(lo, hi)`` with lo = |p_y − q_y| and
    hi = 1 − min(p_y, q_y) (S_p = S_q = {y} in docs/intervals.md#special-cases-dppos-approximations-are-lower-ends);
    η = 0 — use :func:`sampled_estimates` for η > 0.

    One fused pass in cache-sized chunks: p = e^a, q = e^b (float64, numpy's vectorised exp), then
    lo = |p − q| and hi = 1 − min(p, q) straight into the outputs. The outputs are one numpy allocation (large
    numpy buffers are backed by transparent huge pages, so first touch costs far fewer page faults).
    """
    a = _f64(logp_roll).detach()
    b = _f64(logp_train).detach()
    if a.device.type != "cpu" or b.device.type != "cpu":  # on an accelerator: the same two formulas in torch
        p, q = torch.exp(a), torch.exp(b)
        return (p - q).abs(), 1.0 - torch.minimum(p, q)
    shape = torch.broadcast_shapes(a.shape, b.shape)
    a = a.expand(shape).contiguous().numpy().reshape(-1)
    b = b.expand(shape).contiguous().numpy().reshape(-1)
    n = a.size
    out = np.empty((2, n))
    lo, hi = out[0], out[1]
    m = min(n, _CHUNK)
    p, q = np.empty(m), np.empty(m)
    for s in range(0, n, _CHUNK):
        e = min(n, s + _CHUNK)
        k = e - s
        pp, qq = p[:k], q[:k]
        np.exp(a[s:e], out=pp)
        np.exp(b[s:e], out=qq)
        np.subtract(pp, qq, out=lo[s:e])
        np.abs(lo[s:e], out=lo[s:e])
        np.minimum(pp, qq, out=pp)
        np.subtract(1.0, pp, out=hi[s:e])
    return torch.from_numpy(lo).reshape(shape), torch.from_numpy(hi).reshape(shape)
