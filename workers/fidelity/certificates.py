"""Certificate checks of spec/fidelity.md §6.3, computed by :mod:`workers.certify` (one implementation, not two).

Per verifiable position t with sampled token a, the rollout list ``rollout.top_k[t]`` and the trainer list
``trainer.top_k[t]`` (either may be absent: K = 0, i.e. S = {a}) go to
:func:`workers.certify.tv_interval_batch` (Theorem A, top-K caps on) which returns the two-sided TV interval
[L, U] and data-error flags. Decisions at δ: ``inside`` if U ≤ δ, ``outside`` if L > δ, else ``undecided``.
Flags (unsorted / duplicate lists, listed mass above 1 + 1e-4, sampled value disagreeing with its entry, …) make
the position ``CERT_INPUT_INVALID``.

Certificates are reported separately; they change verifiability only with ``require_certificate`` (then positions
without top-K get ``CERT_MISSING`` and invalid ones ``CERT_INPUT_INVALID``).
"""
from __future__ import annotations

import numpy as np

from workers.fidelity.coverage import Distribution
from workers.fidelity.rules import BIT, topk_arrays

DETAIL_MAX_TOKENS = 256  # per-position lists in the call entry only for calls up to this length


def _lists(tk, n):
    if tk is None:
        return np.full((n, 0), -1, dtype=np.int64), np.zeros((n, 0))
    ids, lps, _ = topk_arrays(tk, n)
    return ids, np.where(ids >= 0, lps, -np.inf)


class CertificateSection:
    def __init__(self, opts):
        self.opts = opts
        self.lo, self.hi, self.gap = Distribution(), Distribution(), Distribution()
        self.verifiable_tokens = 0
        self.with_topk = 0
        self.decisions = {"inside": 0, "outside": 0, "undecided": 0, "invalid": 0}
        self.seq_sum_hi = Distribution()
        self.seq_max_hi = Distribution()

    def add(self, res):
        a = res.cert_arrays
        if not a:
            return
        n = res.n
        pos = np.flatnonzero(res.words == 0) if n else np.zeros(0, dtype=np.int64)
        self.verifiable_tokens += len(pos)
        has_topk = a["r_tk"] is not None
        if len(pos) == 0:
            return
        if has_topk:
            self.with_topk += len(pos)
        import torch

        from workers.certify import tv_interval_batch

        p_ids, p_lp = (a["r_tk"][0], np.where(a["r_tk"][0] >= 0, a["r_tk"][1], -np.inf)) if has_topk else _lists(None, n)
        q_ids, q_lp = _lists(a["t_tk"], n) if isinstance(a["t_tk"], list) else _lists(None, n)
        # certify's padding convention: id −1, trailing
        sel = pos
        y = np.asarray(a["ids"], dtype=np.int64)[sel]
        lo, hi, err = tv_interval_batch(
            torch.from_numpy(np.ascontiguousarray(p_ids[sel])), torch.from_numpy(np.ascontiguousarray(p_lp[sel])),
            torch.from_numpy(np.ascontiguousarray(q_ids[sel])), torch.from_numpy(np.ascontiguousarray(q_lp[sel])),
            torch.from_numpy(y), torch.from_numpy(a["r_lp"][sel].copy()), torch.from_numpy(a["t_lp"][sel].copy()),
            topk_caps=True, return_status=True)
        lo, hi, err = lo.numpy(), hi.numpy(), err.numpy()
        bad = err != 0
        good = ~bad
        delta = self.opts.delta
        dec = np.where(hi <= delta, "inside", np.where(lo > delta, "outside", "undecided")).astype(object)
        dec[bad] = "invalid"
        for k in self.decisions:
            self.decisions[k] += int((dec == k).sum())
        self.lo.add(lo[good])
        self.hi.add(hi[good])
        self.gap.add((hi - lo)[good])
        btv = np.abs(np.exp(a["r_lp"][sel]) - np.exp(a["t_lp"][sel]))
        cert = {
            "positions": int(len(sel)),
            "top_k": has_topk,
            "sum_hi": float(hi[good].sum()),
            "max_hi": float(hi[good].max()) if good.any() else None,
            "inside": int((dec == "inside").sum()),
            "outside": int((dec == "outside").sum()),
            "undecided": int((dec == "undecided").sum()),
            "invalid": int(bad.sum()),
        }
        if good.any():
            self.seq_sum_hi.add(np.array([cert["sum_hi"]]))
            self.seq_max_hi.add(np.array([cert["max_hi"]]))
        if n <= DETAIL_MAX_TOKENS:
            def full(x, fill=None):
                out = [fill] * n
                for i, v in zip(sel.tolist(), x):
                    out[i] = v
                return out
            cert["lo"] = full([float(v) for v in lo])
            cert["hi"] = full([float(v) for v in hi])
            cert["gap"] = full([float(v) for v in hi - lo])
            cert["binary_tv"] = full([float(v) for v in btv])
            cert["decision"] = full(dec.tolist())
        res.entry["certificate"] = cert
        if self.opts.require_certificate:
            words = res.words
            if not has_topk:
                words[sel] |= BIT["CERT_MISSING"]
            words[sel[bad]] |= BIT["CERT_INPUT_INVALID"]

    def summary(self) -> dict:
        return {
            "delta": self.opts.delta,
            "verifiable_tokens": self.verifiable_tokens,
            "with_top_k": self.with_topk,
            "top_k_share": (self.with_topk / self.verifiable_tokens) if self.verifiable_tokens else None,
            "lo": self.lo.summary(),
            "hi": self.hi.summary(),
            "gap": self.gap.summary(),
            "decisions": self.decisions,
            "sequence_sum_hi": self.seq_sum_hi.summary(),
            "sequence_max_hi": self.seq_max_hi.summary(),
        }
