"""The coverage report (docs/fidelity-rules.md#coverage-report), accumulated call by call (memory: O(trajectories +
breakdown keys)).

Token-level distributions (alignment |Δ|, binary TV, certificate bounds) are exact up to ``EXACT_LIMIT`` values and
then continue on a log-binned histogram (bin width 0.5 % of a decade ≈ 1.2 % relative), so quantiles of very large
runs are approximate to that precision; counts, sums, means and maxima stay exact.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from workers.fidelity.rules import BIT, CODES, CallResult

EXACT_LIMIT = 1_000_000


class Distribution:
    """Streaming summary of non-negative values: count, mean, max, p50, p99 (exact, then log-histogram)."""

    LO, HI, PER_DECADE = -12.0, 3.0, 200

    def __init__(self):
        self.count = 0
        self.total = 0.0
        self.max = None
        self.zeros = 0
        self.nbins = int((self.HI - self.LO) * self.PER_DECADE)
        self.hist = np.zeros(self.nbins + 1, dtype=np.int64)
        self._exact: list[np.ndarray] | None = []
        self._pending: list[np.ndarray] = []
        self._pending_n = 0

    BATCH = 1 << 16  # values buffered before one vectorised update (per-call arrays are often short)

    def add(self, x: np.ndarray | None):
        if x is None or len(x) == 0:
            return
        self._pending.append(np.asarray(x, dtype=np.float64))
        self._pending_n += len(x)
        if self._pending_n >= self.BATCH:
            self._flush()

    def _flush(self):
        if not self._pending:
            return
        x = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending, self._pending_n = [], 0
        self.count += len(x)
        self.total += float(x.sum())
        m = float(x.max())
        self.max = m if self.max is None else max(self.max, m)
        if self._exact is not None:
            self._exact.append(x)
            if self.count > EXACT_LIMIT:
                self._exact = None
        z = x <= 0
        self.zeros += int(z.sum())
        pos = x[~z]
        if len(pos):
            b = np.clip(((np.log10(pos) - self.LO) * self.PER_DECADE).astype(np.int64), 0, self.nbins)
            self.hist += np.bincount(b, minlength=self.nbins + 1)

    def quantile(self, q: float):
        self._flush()
        if not self.count:
            return None
        if self._exact is not None:
            if len(self._exact) > 1:  # concatenated once, kept for the next quantile
                self._exact = [np.concatenate(self._exact)]
            return float(np.quantile(self._exact[0], q))
        rank = q * (self.count - 1)
        if rank < self.zeros:
            return 0.0
        c = np.cumsum(self.hist) + self.zeros
        b = int(np.searchsorted(c, rank, side="right"))
        return float(10 ** (self.LO + (b + 0.5) / self.PER_DECADE))

    def summary(self) -> dict:
        self._flush()
        return {
            "count": self.count,
            "mean": (self.total / self.count) if self.count else None,
            "p50": self.quantile(0.5),
            "p99": self.quantile(0.99),
            "max": self.max,
            "exact": self._exact is not None,
        }


def _lowest_bit_codes(words: np.ndarray) -> np.ndarray:
    w = words[words != 0].astype(np.int64)
    low = w & -w
    return np.log2(low).astype(np.int64)


def coverage_meta(rec) -> dict:
    """The few record fields coverage needs (so queued calls need not keep whole records)."""
    if not isinstance(rec, dict):
        return {}
    g = lambda d, k: d.get(k) if isinstance(d, dict) else None
    h = rec.get("harness")
    return {
        "prompt_provenance": g(rec.get("prompt"), "provenance"),
        "response_provenance": g(rec.get("response"), "provenance"),
        "harness_version": g(h, "version"),
        "environment_image": g(g(h, "environment"), "image_digest"),
        "tokenizer_sha256": g(rec.get("tokenizer"), "sha256"),
        "chat_template_sha256": g(rec.get("chat_template"), "sha256"),
    }


class Coverage:
    def __init__(self, opts):
        self.opts = opts
        self.by_role = {r: {"verifiable": 0, "partial": 0, "excluded": 0} for r in ("policy", "background", "unknown")}
        self.calls = 0
        self.policy_tokens = 0
        self.verifiable_policy_tokens = 0
        self.response_tokens = 0
        self.verifiable_tokens = 0
        self.excl_primary = np.zeros(len(CODES), dtype=np.int64)
        self.excl_any = np.zeros(len(CODES), dtype=np.int64)
        self.excl_primary_all = np.zeros(len(CODES), dtype=np.int64)
        self.call_primary = defaultdict(int)
        self.traj = defaultdict(lambda: [0, 0])  # (run, traj) -> [policy tokens, verifiable]
        self.ledger = defaultdict(lambda: {"calls": 0, "tokens": 0})
        self.prov_prompt = defaultdict(int)
        self.prov_response = defaultdict(int)
        self.drift_calls = [0, 0]  # evaluated, drifted
        self.drift_tokens = [0, 0]
        self.align = Distribution()
        self.btv = Distribution()
        self.misaligned_calls = 0
        self.tito = [0, 0]  # policy calls with a predecessor, of which not a prefix extension
        self.cf_tokens = 0
        self.cf_calls: list = []
        self.cf_calls_n = 0
        self.mask_calls = 0
        self.policy_calls_without_mask = 0
        self.used_tokens = 0
        self.used_tokens_audited = 0
        self.breakdowns = {
            k: defaultdict(lambda: {"calls": 0, "policy_tokens": 0, "verifiable_policy_tokens": 0})
            for k in ("step", "harness_version", "environment_image", "tokenizer_sha256", "chat_template_sha256")
        }
        self.cert = None  # filled by the certificate section

    # ------------------------------------------------------------------ accumulate
    def add_alignment(self, res: CallResult):
        """Alignment distributions (|trainer − rollout|, binary TV; docs/fidelity-rules.md#coverage-report): R5/R9
        do not change them, so they are taken when the call is evaluated and its arrays released before the call
        waits for its lineage."""
        self.align.add(res.align_diff)
        self.btv.add(res.binary_tv)
        res.align_diff = res.binary_tv = None

    def add(self, res: CallResult, meta: dict):
        """Count one final call (verdict, spans and words after every rule)."""
        e = res.entry
        role = res.role
        self.calls += 1
        self.by_role[role][e["verdict"]] += 1
        if e["primary_reason"]:
            self.call_primary[e["primary_reason"]] += 1
        n, nv = res.n, e["verifiable_tokens"]
        self.response_tokens += n
        self.verifiable_tokens += nv
        self._add_exclusions(res.words, role)
        self._add_tokens(e, role, n, nv)
        if meta:
            self.prov_prompt[str(meta["prompt_provenance"])] += 1
            self.prov_response[str(meta["response_provenance"])] += 1
        if role == "policy":
            self._add_diagnostics(e, n)
        if "TRAINER_MISALIGNED" in e["reasons"]:
            self.misaligned_calls += 1
        self._add_closed_failure(res, e, role)
        if meta:
            self._add_breakdowns(e, meta, role, n, nv)

    def _add_exclusions(self, words, role: str) -> None:
        """Exclusions by primary reason (every call, and policy calls) and by any reason (policy calls)."""
        bad = words[words != 0]
        if not len(bad):
            return
        prim = _lowest_bit_codes(bad)
        self.excl_primary_all += np.bincount(prim, minlength=len(CODES))
        if role != "policy":
            return
        self.excl_primary += np.bincount(prim, minlength=len(CODES))
        union = int(np.bitwise_or.reduce(bad))
        for i, c in enumerate(CODES):
            if union >> i & 1:
                self.excl_any[i] += int((bad & BIT[c] != 0).sum())

    def _add_tokens(self, e: dict, role: str, n: int, nv: int) -> None:
        """Policy tokens per trajectory, or the background ledger by role and purpose."""
        if role == "policy":
            self.policy_tokens += n
            self.verifiable_policy_tokens += nv
            t = self.traj[(e["run_id"], e["trajectory_id"])]
            t[0] += n
            t[1] += nv
            return
        label = e.get("purpose") or e.get("inferred_purpose") or "unspecified"
        k = f"{role}:{label}"
        self.ledger[k]["calls"] += 1
        self.ledger[k]["tokens"] += n

    def _add_diagnostics(self, e: dict, n: int) -> None:
        """A policy call's drift-if-retokenized and TITO prefix diagnostics (never a verdict)."""
        if e.get("drift_if_retokenized") is not None:
            self.drift_calls[0] += 1
            self.drift_tokens[0] += n
            if e["drift_if_retokenized"]:
                self.drift_calls[1] += 1
                self.drift_tokens[1] += n
        if e.get("tito_prefix_ok") is not None:
            self.tito[0] += 1
            self.tito[1] += int(not e["tito_prefix_ok"])

    def _add_closed_failure(self, res: CallResult, e: dict, role: str) -> None:
        """The closed-failure check (docs/fidelity-rules.md#definitions): used tokens, and used ∧ ¬verifiable."""
        viol = e["closed_failure_violations"]
        if res.loss_mask_used is not None:
            self.mask_calls += 1
            used = int(res.loss_mask_used.sum())
            self.used_tokens += used
            if "MALFORMED" not in e["reasons"]:
                self.used_tokens_audited += used
        elif role == "policy":
            self.policy_calls_without_mask += 1
        if viol:
            self.cf_tokens += viol
            self.cf_calls_n += 1
            if len(self.cf_calls) < 100:
                self.cf_calls.append({"call_id": e["call_id"], "line": e["line"], "violations": viol})

    def _add_breakdowns(self, e: dict, meta: dict, role: str, n: int, nv: int) -> None:
        """Breakdowns by step, harness, image, tokenizer and template (docs/fidelity-rules.md#coverage-report)."""
        for k, v in (
            ("step", e["step"]),
            ("harness_version", meta["harness_version"]),
            ("environment_image", meta["environment_image"]),
            ("tokenizer_sha256", meta["tokenizer_sha256"]),
            ("chat_template_sha256", meta["chat_template_sha256"]),
        ):
            b = self.breakdowns[k][str(v)]
            b["calls"] += 1
            if role == "policy":
                b["policy_tokens"] += n
                b["verifiable_policy_tokens"] += nv

    # ------------------------------------------------------------------ report
    def report(self, *, chain_breaks: list, merged_samples: int, unparsed_lines: int) -> dict:
        frac = lambda a, b: (a / b) if b else None
        trajs = list(self.traj.values())
        fully = sum(1 for t in trajs if t[0] and t[1] == t[0])
        none_ = sum(1 for t in trajs if t[0] and t[1] == 0)
        partial = sum(1 for t in trajs if t[0] and 0 < t[1] < t[0])
        covs = [t[1] / t[0] for t in trajs if t[0]]
        unknown = self.by_role["unknown"]
        n_unknown = sum(unknown.values())
        # a change means two *known* templates: token-input calls (completions, /generate: no template, "None")
        # and importers' "unknown" placeholder say nothing about one
        policy_templates = {
            k
            for k, v in self.breakdowns["chat_template_sha256"].items()
            if v["policy_tokens"] and k not in ("None", "unknown")
        }
        return {
            "calls": {
                "total": self.calls,
                "by_role": self.by_role,
                "spurious_call_rate": frac(n_unknown, self.calls),
                "by_primary_reason": dict(sorted(self.call_primary.items())),
                "unparsed_lines": unparsed_lines,
            },
            "policy_tokens": self.policy_tokens,
            "verifiable_policy_tokens": self.verifiable_policy_tokens,
            "verifiable_fraction": frac(self.verifiable_policy_tokens, self.policy_tokens),
            "response_tokens": self.response_tokens,
            "gross_verifiable_fraction": frac(self.verifiable_tokens, self.response_tokens),
            "excluded_policy_tokens_by_primary_reason": {c: int(v) for c, v in zip(CODES, self.excl_primary) if v},
            "excluded_policy_tokens_by_any_reason": {c: int(v) for c, v in zip(CODES, self.excl_any) if v},
            "excluded_tokens_by_primary_reason": {c: int(v) for c, v in zip(CODES, self.excl_primary_all) if v},
            "trajectories": {
                "total": len(trajs),
                "fully_verifiable": fully,
                "partially_verifiable": partial,
                "not_verifiable": none_,
                "min_coverage": min(covs) if covs else None,
            },
            "samples": {
                "merged_samples": merged_samples,
                "chain_breaks": len(chain_breaks),
                "chain_break_sites": chain_breaks[:100],
            },
            "background_ledger": {k: v for k, v in sorted(self.ledger.items())},
            "provenance": {
                "prompt": dict(sorted(self.prov_prompt.items())),
                "response": dict(sorted(self.prov_response.items())),
            },
            "drift": {
                "engine_policy_calls_evaluated": self.drift_calls[0],
                "calls_drifting_if_retokenized": self.drift_calls[1],
                "call_share": frac(self.drift_calls[1], self.drift_calls[0]),
                "token_share": frac(self.drift_tokens[1], self.drift_tokens[0]),
                "chain_breaks": len(chain_breaks),
                "tito_checked_calls": self.tito[0],
                "tito_chain_breaks": self.tito[1],
            },
            "logprob_alignment": {
                "abs_diff": self.align.summary(),
                "binary_tv": self.btv.summary(),
                "calls_failing_tau_align": self.misaligned_calls,
                "tau_align": self.opts.tau_align,
            },
            "certificates": self.cert,
            "closed_failure": {
                "violating_tokens": self.cf_tokens,
                "violating_calls": self.cf_calls_n,
                "violations": self.cf_calls,
                "calls_with_loss_mask": self.mask_calls,
                "policy_calls_without_loss_mask": self.policy_calls_without_mask,
                "trainer_used_tokens": self.used_tokens,
                "operational_coverage": frac(self.used_tokens_audited, self.used_tokens),
            },
            "breakdowns": {k: dict(sorted(v.items())) for k, v in self.breakdowns.items()},
            "template_change": len(policy_templates) > 1,
        }
