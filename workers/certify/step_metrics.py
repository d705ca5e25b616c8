"""Per-step mismatch metrics that trainers already log, computed by the certificate engine from the same tokens.

Over the certified (non-DATA_ERROR) tokens of each step, with Δ = trainer − rollout log-prob of the sampled token and
ρ = exp(clamp(Δ, ±20)) the token importance weight (π_train / π_rollout):

* ``abs_diff_mean`` / ``_p50`` / ``_p99`` / ``_max``: |Δ| (verl's ``train_rollout_logprob_abs_diff`` is the mean);
* ``k1`` = mean(−Δ) (verl ``rollout_corr/kl``), ``k2`` = mean(Δ²/2), ``k3`` = mean(ρ − 1 − Δ) (``rollout_corr/k3_kl``);
* ``chi2`` = mean(ρ²) − 1 (``rollout_corr/chi2_token``);
* ``training_ppl``, ``rollout_ppl``: mean over sequences of exp(−mean log-prob); ``ppl_ratio`` = mean over sequences
  of exp(mean rollout − mean trainer log-prob) (``rollout_corr/ppl_ratio``);
* ``is_weight_mean`` / ``_max`` / ``_min`` / ``_std``: ρ; ``tis_clip_rate``: share of tokens with ρ above the TIS cap
  (truncated IS, weight min(ρ, C)); ``mis_mask_rate``: share of tokens with ρ outside [1/C, C] (masked IS / token
  rejection sampling masks them), ``mis_seq_mask_rate``: share of sequences with at least one such token.

Quantiles come from a per-step histogram of |Δ| with 40 log-spaced bins per decade over [1e-8, 1e2] (a bin spans a
factor 1.06; the quantile is the smallest value with CDF ≥ q, reported as its bin's geometric centre, 0 below 1e-8), so memory per step is fixed
(≈ 3 KB) whatever its size; means, maxima and rates are exact. No Django import.

Sums are exact (workers/certify/exact.py) and :meth:`StepMetrics.merge` adds two accumulators (sums, maxima and
histogram counts), so metrics merged from pieces of a file equal one pass over it, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from workers.certify.exact import ExactSums, decode_float, encode_float

TIS_CAP = 2.0  # verl's default rollout_is_threshold
MIS_BAND = (0.5, 2.0)  # token rejection band [1/C, C] with C = 2
SAFETY = 20.0  # exp(±20), as verl's rollout correction
LO_EXP, HI_EXP, PER_DECADE = -8, 2, 40
N_BINS = (HI_EXP - LO_EXP) * PER_DECADE + 2  # + underflow (< 1e-8, incl. 0) and overflow (≥ 1e2)

_SUMS = (
    "tokens",
    "abs",
    "k1",
    "k2",
    "k3",
    "rho",
    "rho2",
    "tis",
    "mis",
    "seqs",
    "seq_mis",
    "train_ppl",
    "roll_ppl",
    "ppl_ratio",
)
_MAXES = ("abs_max", "rho_max", "neg_rho_min")


def log_bin(x: np.ndarray) -> np.ndarray:
    """The histogram bin of each |Δ log p| (log-spaced, ``PER_DECADE`` a decade from 10**LO_EXP; bin 0 below it);
    the routing audit bins its values the same way."""
    with np.errstate(divide="ignore"):
        idx = np.floor((np.log10(np.maximum(x, 1e-300)) - LO_EXP) * PER_DECADE).astype(np.int64) + 1
    idx[x < 10.0**LO_EXP] = 0
    return np.clip(idx, 0, N_BINS - 1)


def _centre(i: int) -> float:
    if i == 0:
        return 0.0
    return 10.0 ** (LO_EXP + (i - 0.5) / PER_DECADE)


class StepMetrics:
    """Accumulates the metrics per step, chunk by chunk (bounded: O(#steps) arrays of fixed size)."""

    def __init__(self):
        self.sums: dict = {}
        self.maxes: dict = {}
        self.hist: dict = {}

    def add(self, steps: list, lens: np.ndarray, ok: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        """One chunk: ``steps`` (one per sequence), ``lens`` token counts, ``ok`` which sequences are certified,
        ``a``/``b`` rollout/trainer log-probs of the sampled tokens, flat in sequence order.

        Sums are formed per sequence (a sequence never spans chunks) and added to their step exactly, so the result
        does not depend on where chunks end or in which order they are merged."""
        if not ok.any():
            return
        nseq = len(lens)
        seg = np.repeat(np.arange(nseq), lens)
        tok_ok = ok[seg]
        d = (b - a)[tok_ok]
        aa, bb = a[tok_ok], b[tok_ok]
        tseg = seg[tok_ok]
        dc = np.clip(d, -SAFETY, SAFETY)
        rho = np.exp(dc)
        absd = np.abs(d)
        mis = (rho < MIS_BAND[0]) | (rho > MIS_BAND[1])

        def per_seq(w):
            return np.bincount(tseg, weights=w, minlength=nseq)

        n_tok = per_seq(np.ones_like(d))
        with np.errstate(divide="ignore", invalid="ignore"):
            mean_a, mean_b = per_seq(aa) / n_tok, per_seq(bb) / n_tok
        seq_mis = per_seq(mis.astype(np.float64))
        rows = np.stack(
            [
                n_tok,
                per_seq(absd),
                per_seq(-d),
                per_seq(0.5 * d * d),
                per_seq(rho - 1.0 - dc),
                per_seq(rho),
                per_seq(rho * rho),
                per_seq((rho > TIS_CAP).astype(np.float64)),
                seq_mis,
                np.ones(nseq),
                (seq_mis > 0).astype(np.float64),
                np.exp(np.minimum(-mean_b, 700)),
                np.exp(np.minimum(-mean_a, 700)),
                np.exp(np.clip(mean_a - mean_b, -700, 700)),
            ],
            axis=1,
        )
        mx = np.full((nseq, 3), -np.inf)
        np.maximum.at(mx[:, 0], tseg, absd)
        np.maximum.at(mx[:, 1], tseg, rho)
        np.maximum.at(mx[:, 2], tseg, -rho)
        hist = np.bincount(tseg * N_BINS + log_bin(absd), minlength=nseq * N_BINS).reshape(nseq, N_BINS)
        groups: dict = {}
        for i in np.flatnonzero(ok & (n_tok > 0)).tolist():
            groups.setdefault(steps[i], []).append(i)
        slots = np.arange(len(_SUMS))
        for k, idx in groups.items():
            if k not in self.sums:
                self.sums[k] = ExactSums(len(_SUMS))
                self.maxes[k] = np.full(len(_MAXES), -np.inf)
                self.hist[k] = np.zeros(N_BINS, np.int64)
            self.sums[k].add(np.tile(slots, len(idx)), rows[idx])
            np.maximum(self.maxes[k], mx[idx].max(0), out=self.maxes[k])
            self.hist[k] += hist[idx].sum(0)

    def merge(self, other: "StepMetrics") -> "StepMetrics":
        """Add ``other``'s steps into this one (in place): exact sums, maxima, histogram counts."""
        for k in other.sums:
            if k in self.sums:
                self.sums[k].merge(other.sums[k])
                np.maximum(self.maxes[k], other.maxes[k], out=self.maxes[k])
                self.hist[k] += other.hist[k]
            else:
                self.sums[k] = ExactSums().merge(other.sums[k])
                self.maxes[k], self.hist[k] = other.maxes[k].copy(), other.hist[k].copy()
        return self

    def to_json(self) -> list:
        return [
            [k, self.sums[k].to_json(), [encode_float(x) for x in self.maxes[k].tolist()], self.hist[k].tolist()]
            for k in self.sums
        ]

    @classmethod
    def from_json(cls, doc: list) -> "StepMetrics":
        self = cls()
        for k, sums, maxes, hist in doc:
            self.sums[k] = ExactSums.from_json(sums)
            self.maxes[k] = np.array([decode_float(x) for x in maxes])
            self.hist[k] = np.asarray(hist, np.int64)
        return self

    @staticmethod
    def _quantile(hist: np.ndarray, q: float) -> float:
        c = np.cumsum(hist)
        return _centre(int(np.searchsorted(c, q * c[-1], side="left")))

    def _finish(self, s: np.ndarray, mx: np.ndarray, hist: np.ndarray) -> dict:
        v = dict(zip(_SUMS, s.tolist()))
        n, ns = v["tokens"], v["seqs"]
        if not n:
            return {}
        mean_rho = v["rho"] / n
        out = {
            "abs_diff_mean": v["abs"] / n,
            "abs_diff_p50": self._quantile(hist, 0.5),
            "abs_diff_p99": self._quantile(hist, 0.99),
            "abs_diff_max": float(mx[0]),
            "k1": v["k1"] / n,
            "k2": v["k2"] / n,
            "k3": v["k3"] / n,
            "chi2": v["rho2"] / n - 1.0,
            "training_ppl": v["train_ppl"] / ns if ns else None,
            "rollout_ppl": v["roll_ppl"] / ns if ns else None,
            "ppl_ratio": v["ppl_ratio"] / ns if ns else None,
            "is_weight_mean": mean_rho,
            "is_weight_max": float(mx[1]),
            "is_weight_min": float(-mx[2]),
            "is_weight_std": math.sqrt(max(v["rho2"] / n - mean_rho * mean_rho, 0.0)),
            "tis_clip_rate": v["tis"] / n,
            "mis_mask_rate": v["mis"] / n,
            "mis_seq_mask_rate": v["seq_mis"] / ns if ns else None,
            "tokens": int(n),
        }
        return {k: (x if x is None or math.isfinite(x) else None) for k, x in out.items()}

    def step(self, key) -> dict:
        """The metrics of one step (empty when it has no certified token)."""
        if key not in self.sums:
            return {}
        return self._finish(self.sums[key].values(), self.maxes[key], self.hist[key])

    def run(self) -> dict:
        """The same metrics over every certified token of the run."""
        if not self.sums:
            return {}
        s = ExactSums()
        for part in self.sums.values():
            s.merge(part)
        mx = np.max(np.stack(list(self.maxes.values())), axis=0)
        return self._finish(s.values(), mx, sum(self.hist.values()))

    @staticmethod
    def options() -> dict:
        return {
            "tis_cap": TIS_CAP,
            "mis_band": list(MIS_BAND),
            "safety_clamp": SAFETY,
            "quantile_bins_per_decade": PER_DECADE,
            "quantile_range": [10.0**LO_EXP, 10.0**HI_EXP],
        }
