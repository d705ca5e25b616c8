"""Certificate checks of docs/fidelity-rules.md#certificate-checks, computed by :mod:`workers.certify` (one
implementation, not two).

Per verifiable position t with sampled token a, the rollout list ``rollout.top_k[t]`` and the trainer list
``trainer.top_k[t]`` (either may be absent: K = 0, i.e. S = {a}) go to
:func:`workers.certify.tv_interval_batch` (Theorem A, top-K caps on) which returns the two-sided TV interval
[L, U] and data-error flags. Decisions at δ: ``inside`` if U ≤ δ, ``outside`` if L > δ, else ``undecided``.
Flags (unsorted / duplicate lists, listed mass above 1, sampled value disagreeing with its entry — beyond double
rounding, see workers/certify/flags.py — …) make the position ``CERT_INPUT_INVALID``. A trainer list that misses
rollout ids is counted (``trainer_list_uncovered_positions``) and warned about: the interval there is looser.

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


def _uncovered_rows(P, Q):
    n = 0
    for r in range(P.shape[0]):
        has_q = False
        for j in range(Q.shape[1]):
            if Q[r, j] >= 0:
                has_q = True
                break
        if not has_q:
            continue
        for k in range(P.shape[1]):
            i = P[r, k]
            if i < 0:
                continue
            found = False
            for j in range(Q.shape[1]):
                if Q[r, j] == i:
                    found = True
                    break
            if not found:
                n += 1
                break
    return n


_compiled = None


def uncovered_rows(P, Q) -> int:
    """Rows where a trainer list (any id ≥ 0) misses an id ≥ 0 of the rollout list: K_p·K_q compares per row,
    compiled with numba on first use (numpy's broadcast of the same test cost ≈ 75 ms per 65 536 top-20 rows)."""
    global _compiled
    if _compiled is None:
        from workers.certify.interval_kernel import compiled_kernel  # the certificate kernel's compile-and-cache policy

        _compiled = compiled_kernel(_uncovered_rows)
    return int(_compiled(np.ascontiguousarray(P, dtype=np.int64), np.ascontiguousarray(Q, dtype=np.int64)))


class CertificateSection:
    """Accumulates calls and certifies them in batches (one :func:`tv_interval_batch` call per flush), since the
    per-call overhead of the torch path dominates small calls."""

    FLUSH_POSITIONS = 1 << 16
    FLUSH_CALLS = 4096

    def __init__(self, opts):
        self.opts = opts
        self.lo, self.hi, self.gap = Distribution(), Distribution(), Distribution()
        self.verifiable_tokens = 0
        self.with_topk = 0
        self.decisions = {"inside": 0, "outside": 0, "undecided": 0, "invalid": 0}
        self.seq_sum_hi = Distribution()
        self.seq_max_hi = Distribution()
        self.pending: list = []
        self.pending_positions = 0
        self.uncovered_positions = 0

    def add(self, res) -> bool:
        """Queue a call's verifiable positions (so far: R5/R9 come later and can only exclude the whole call);
        returns True when the caller should :meth:`flush`."""
        a = res.cert_arrays
        if a and res.n:
            sel = np.flatnonzero(res.words == 0)
            if len(sel):
                self.pending.append((res, sel))
                self.pending_positions += len(sel)
            else:
                res.cert_arrays = {}
        return self.pending_positions >= self.FLUSH_POSITIONS or len(self.pending) >= self.FLUSH_CALLS

    def flush(self):
        """One :func:`tv_interval_batch` call for every queued position; each call keeps its raw intervals in
        ``res.cert_raw`` until :meth:`record` (after R5/R9) decides whether they count."""
        if not self.pending:
            return
        import torch

        from workers.certify import tv_interval_batch

        parts = []
        for res, sel in self.pending:
            a = res.cert_arrays
            n = res.n
            if a["r_tk"] is not None:
                p_ids, p_lp = a["r_tk"][0], np.where(a["r_tk"][0] >= 0, a["r_tk"][1], -np.inf)
            else:
                p_ids, p_lp = _lists(None, n)
            if a["t_tk"] is not None:
                q_ids, q_lp = a["t_tk"][0], np.where(a["t_tk"][0] >= 0, a["t_tk"][1], -np.inf)
            else:
                q_ids, q_lp = _lists(None, n)
            parts.append((p_ids[sel], p_lp[sel], q_ids[sel], q_lp[sel], a["ids"][sel], a["r_lp"][sel], a["t_lp"][sel]))
        Kp = max(p[0].shape[1] for p in parts)
        Kq = max(p[2].shape[1] for p in parts)

        def cat(i, K=None, fill=None):
            if K is None:
                return np.concatenate([p[i] for p in parts])
            out = np.full((sum(len(p[i]) for p in parts), K), fill, dtype=parts[0][i].dtype)
            off = 0
            for p in parts:
                x = p[i]
                out[off : off + len(x), : x.shape[1]] = x
                off += len(x)
            return out

        P_ids, P_lp = cat(0, Kp, -1), cat(1, Kp, -np.inf)
        Q_ids, Q_lp = cat(2, Kq, -1), cat(3, Kq, -np.inf)
        if Kp and Kq:  # fcr/1: trainer.top_k must cover rollout.top_k's ids; where it does not, say so (looser)
            self.uncovered_positions += uncovered_rows(P_ids, Q_ids)
        Y, A, B = cat(4), cat(5), cat(6)
        t = torch.from_numpy
        threads = torch.get_num_threads()  # one batch is small: extra intra-op threads only spin (CPU, not speed)
        if threads != 1:
            torch.set_num_threads(1)
        try:
            # docs/fcr.md#rollout-and-trainer: rollout.top_k is the engine's own top-K (capped); trainer.top_k only has
            # to cover the
            # rollout's ids, in any order, so no cap may be assumed for it
            lo, hi, err = tv_interval_batch(
                t(P_ids), t(P_lp), t(Q_ids), t(Q_lp), t(Y), t(A), t(B), topk_caps=(True, False), return_status=True
            )
        finally:
            if threads != 1:
                torch.set_num_threads(threads)
        lo, hi, err = lo.numpy(), hi.numpy(), err.numpy()
        btv = np.abs(np.exp(A) - np.exp(B))
        off = 0
        for res, sel in self.pending:
            k = len(sel)
            res.cert_raw = (
                sel,
                res.cert_arrays["r_tk"] is not None,
                lo[off : off + k],
                hi[off : off + k],
                err[off : off + k],
                btv[off : off + k],
            )
            res.cert_arrays = {}
            off += k
        self.pending = []
        self.pending_positions = 0

    def record(self, res):
        """Count a call's certificate (docs/fidelity-rules.md#certificate-checks) once its verdict is final.
        Positions are the verifiable ones; a call
        that R5/R9 excluded afterwards has none (its raw intervals are dropped, as if never computed)."""
        raw, res.cert_raw = res.cert_raw, None
        if raw is None:
            return
        sel, has_topk, lo, hi, err, btv = raw
        if not (res.words[sel] == 0).all():  # excluded by R5/R9 (whole-call rules) after the intervals were computed
            return
        n = res.n
        self.verifiable_tokens += len(sel)
        if has_topk:
            self.with_topk += len(sel)
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

            def full(x):
                out = [None] * n
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
            "trainer_list_uncovered_positions": self.uncovered_positions,
        }
