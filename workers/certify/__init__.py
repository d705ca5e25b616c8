"""Divergence certificates for RL training runs (docs/certify.md#what-is-certified).

Importing this package is cheap: the torch-based parts load on first use (module ``__getattr__``), so
``import workers.certify.bounds`` — used by the web process for bound-vs-T curves — never imports torch.

Modules (each readable on its own):

* :mod:`.bounds`      TRM bounds, B*, budget inversion (no torch)           docs/bounds.md#the-bounds
* :mod:`.estimators`  per-token estimators from sampled-token log-probs     docs/intervals.md#per-token-estimators
* :mod:`.robust`      storage-precision error model η and token statuses    docs/intervals.md#error-robust-widening
* :mod:`.intervals`   two-sided TV intervals from top-K lists / full q, KL  docs/intervals.md#tv-interval-from-top-k-lists
* :mod:`.adaptive`    adaptive-K envelopes, tolerance and decision rules    docs/intervals.md#adaptive-k
* :mod:`.sequence`    sequence certificates, TRM masks, batch statistics    docs/bounds.md#sequence-certificate
* :mod:`.masks`       training masks: DPPO, C-DPPO, verl heuristic rejection  docs/masks.md
* :mod:`.file`        ``certify_file``: streaming over fcr/1 JSONL / gzip
* :mod:`.records`     one policy record → the certifier's arrays, or the reason it cannot be certified
* :mod:`.partial`     partial certificates of pieces of a file and their exact merge   docs/certify.md
* :mod:`.exact`       exact (order-independent) float64 sums for the partials
* :mod:`.summary`     a (merged) partial → the run certificate: bounds, budget, steps, caveats
* :mod:`.cli`         ``python -m workers.certify``
"""

from __future__ import annotations

from workers.certify.bounds import budget_threshold, guard_threshold, invert_budget, simplified_bounds, trm_bounds
from workers.lazy import lazy_exports

_LAZY = {
    "sampled_estimates": "estimators",
    "sampled_certificate": "estimators",
    "tv_interval": "intervals",
    "tv_interval_batch": "intervals",
    "tv_interval_topk": "intervals",
    "tv_interval_fullq": "intervals",
    "kl_bounds": "intervals",
    "exact_tv_kl": "intervals",
    "adaptive_k": "adaptive",
    "interval_envelopes": "adaptive",
    "eta_from_precision": "robust",
    "token_status": "robust",
    "sequence_certificate": "sequence",
    "trm_mask": "sequence",
    "acceptance_by_length": "sequence",
    "dppo_mask": "masks",
    "cdppo_mask": "masks",
    "verl_rs_mask": "masks",
    "dppo_divergence": "masks",
    "certify_file": "file",
    "DataError": "intervals",
}

__all__ = ["trm_bounds", "budget_threshold", "invert_budget", "guard_threshold", "simplified_bounds", *_LAZY]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
