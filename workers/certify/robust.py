"""Error-robust (fail-closed) widening and token statuses (docs/intervals.md#error-robust-widening).

Error model: every logged log-prob ℓ̃ satisfies |ℓ̃ − ℓ| ≤ η. For storage rounding with unit roundoff u
(fp32 2⁻²⁴, bf16 2⁻⁸, fp16 2⁻¹¹) η = u·|ℓ̃|/(1−u), plus the normalisation slack ν of a floating-point
log_softmax (a common offset of all values, :data:`NORM_SLACK`) when a precision is declared. If logits were rounded by at most η_z, each log-softmax value
moves by at most 2η_z: pass ``eta=2*eta_z``. Each probability then lies in [p̃e^{−η}, p̃e^{η}].
"""

from __future__ import annotations

import torch

UNIT_ROUNDOFF = {"exact": 0.0, "fp64": 2.0**-53, "fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
# Normalisation slack ν (log space) added to every value's η for a declared precision: a log_softmax computed in
# floating point is off by a common offset — the rounding of its log-sum-exp, ≈ u·|max logit| plus a few u — so
# listed fp32 probabilities can sum slightly above 1 and a value near 0 (p ≈ 1) is off by far more than u·|ℓ̃|.
# 256 units of fp32 roundoff (1.5e-5) cover logits up to |z| ≈ 250; storage in bf16/fp16 still means an fp32 (or
# wider) softmax. Declare an explicit ``eta`` for anything else. Measured: fp32 log_softmax over 50–152k logits of
# scale ≤ 10 deviates from float64 by ≤ 89 u beyond u·|ℓ̃| (tests/certify/test_normalisation_slack.py).
NORM_SLACK = {"exact": 0.0, "fp64": 256 * 2.0**-53, "fp32": 2.0**-16, "fp16": 2.0**-16, "bf16": 2.0**-16}

# Token status codes (int8 tensors). UNDETERMINED is treated as OUT by every mask but counted separately.
IN, OUT, UNDETERMINED, DATA_ERROR = 0, 1, 2, 3
STATUS_NAMES = {IN: "IN", OUT: "OUT", UNDETERMINED: "UNDETERMINED", DATA_ERROR: "DATA_ERROR"}


def eta_from_precision(logp: torch.Tensor, precision: str | None = "exact", eta=None) -> torch.Tensor:
    """Per-value log-space error bound η for the logged values ``logp`` (docs/intervals.md#error-robust-widening).

    ``eta`` (a number or tensor broadcastable to ``logp``) overrides ``precision``; otherwise
    η = u·|ℓ̃|/(1−u) + ν with u the unit roundoff of ``precision`` and ν its normalisation slack
    (:data:`NORM_SLACK`; ``"exact"`` gives η = 0).
    """
    logp = torch.as_tensor(logp, dtype=torch.float64)
    if eta is not None:
        e = torch.as_tensor(eta, dtype=torch.float64)
        if torch.any(e < 0) or torch.any(torch.isnan(e)):
            raise ValueError("eta must be non-negative")
        return e.expand_as(logp) if e.dim() <= logp.dim() else e
    if precision is None:
        precision = "exact"
    try:
        u = UNIT_ROUNDOFF[precision]
    except KeyError:
        raise ValueError(f"precision must be one of {sorted(UNIT_ROUNDOFF)}") from None
    if u == 0.0:
        return torch.zeros_like(logp)
    return torch.nan_to_num(logp.abs(), nan=0.0, posinf=0.0) * (u / (1.0 - u)) + NORM_SLACK[precision]


def token_status(lo: torch.Tensor, hi: torch.Tensor, threshold: float, err: torch.Tensor | None = None):
    """Three-valued token status against a threshold θ (docs/intervals.md#token-status): IN if hi ≤ θ, OUT if lo > θ, else
    UNDETERMINED;
    DATA_ERROR wherever ``err`` is non-zero (fail closed)."""
    status = torch.full(lo.shape, UNDETERMINED, dtype=torch.int8)
    status[hi <= threshold] = IN
    status[lo > threshold] = OUT
    if err is not None:
        status[err != 0] = DATA_ERROR
    return status
