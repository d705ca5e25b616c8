"""Partial run certificates that merge: one file certified in pieces, by any number of workers, in any order.

Contract (what other code may rely on; no Django, no torch import at module level):

* ``plan = plan_certificate(path, **options)`` (workers/certify/file.py) — the certify options of
  :func:`~workers.certify.file.certify_file`, resolved once for the whole file into a JSON-safe dict (threshold,
  mode, precision, caps, …). Only ``budget`` without ``threshold``/``T_ref`` needs a whole-file quantity (the longest
  policy response, which fixes the threshold before any sequence is decided); that pre-pass happens here, once:
  for fcr-parquet/1 it reads two columns, for JSONL it parses every line (as ``certify_file`` always did).
* ``part = certify_part(path, plan, chunk=None, sequence_sink=None, progress=None)`` → :class:`Partial` — certifies
  the records of one piece: ``chunk`` is a :class:`workers.fcr.chunks.Chunk` (or its ``to_dict()``), None = the
  whole file. Line numbers, errors and sequence rows are those of the whole file.
* ``a.merge(b)`` → ``a`` (in place) — associative and commutative: merging the partials of any cut of a file into
  pieces, in any order and grouping, gives the same :class:`Partial` as one pass over the file, bit for bit.
  ``Partial.merged(parts)`` merges a list.
* ``summarise(part, plan)`` (workers/certify/summary.py) → the run certificate dict; ``certify_file(path, **o)`` is
  exactly ``summarise(certify_part(path, plan_certificate(path, **o)), plan)``.
* ``part.to_json()`` / ``Partial.from_json(doc)`` — a JSON-safe (orjson) round trip that preserves every bit
  (a DB row or a Celery message can carry a partial). Size: O(#steps + longest response + max_errors).
* Merge only partials certified under **one plan**: accept decisions, token statuses and the caveats depend on it
  (nothing checks this). For a run that grows (pieces arriving over time) fix the plan up front with an explicit
  ``threshold`` or ``T_ref``: a ``budget`` alone derives the threshold from the longest response of the file at hand,
  which a later piece may change.

What merges how (docs/certify.md, "Partial certificates"):

* counts (records, sequences, tokens, statuses, accepted, skipped reasons, length buckets, per-step counts, the
  quantile histograms) — integer sums; maxima (ε̂, δ̂, max TV lower end, longest response, per-step maxima, the
  metrics' extremes) — max; "any top-K list seen" — or;
* sums of floats (Σ ε̂, Σ D_KL^seq, Σ D_TV^seq, Σ A(y), Σ k3, the per-position TV profile, per-step sums, the
  14 per-step metric sums) — **exact** sums (workers/certify/exact.py), rounded once when read, so neither the
  order of chunks nor where a file is cut changes a bit. Each term is a per-sequence value (a sequence never spans
  two pieces), computed the same way whichever piece holds it;
* the error list — the ``max_errors`` errors with the smallest line numbers (and ``errors_total`` counts all);
  the first uncovered top-K sequence — the one with the smallest line;
* quantiles (|Δ log p| p50/p99) come from the merged log-binned histograms: counts add exactly, so a merged
  quantile equals the one-pass quantile; its error against the true quantile is the bin width (within 6 %,
  workers/certify/step_metrics.py).

Not mergeable, hence kept out of partials: the per-sequence rows, which are handed to ``sequence_sink`` piece by
piece (a store keyed by line number makes a retried piece idempotent).
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from workers.certify.exact import ExactSums, decode_float, encode_float
from workers.certify.step_metrics import StepMetrics

TOKEN_STATUS = ("IN", "OUT", "UNDETERMINED", "DATA_ERROR")
SEQ_STATUS = ("CERT_IN", "CERT_OUT", "UNDETERMINED", "HEURISTIC", "DATA_ERROR")
RUN_SUMS = ("eps", "kl_seq", "tv_seq", "k3", "A")  # slots of Partial.sums: per-sequence terms, exact
STEP_SUMS = ("eps", "k3")  # slots of each step's exact sums
_INTS = (
    "records",
    "policy",
    "tokens",
    "ok_tokens",
    "accepted",
    "sequences",
    "ok_sequences",
    "T_ref",
    "errors_total",
    "uncovered_seqs",
    "uncovered_positions",
)
_MAXES = ("eps_max", "delta_max", "tv_lo_max")
_STEP_INTS = ("sequences", "tokens", "accepted", "eps_n", "ok_tokens")


class Partial:
    """Run-level accumulators of a piece of a run log (bounded: O(#steps + max length + max_errors))."""

    def __init__(self, max_errors: int = 100):
        self.records = self.policy = self.tokens = self.ok_tokens = 0
        self.accepted = self.sequences = self.ok_sequences = 0
        self.skipped = defaultdict(int)
        self.seq_counts = dict.fromkeys(SEQ_STATUS, 0)
        self.tok_counts = dict.fromkeys(TOKEN_STATUS, 0)
        self.eps_max = self.delta_max = self.tv_lo_max = 0.0
        self.sums = ExactSums(len(RUN_SUMS))
        self.T_ref = 0
        self.profile = ExactSums()  # Σ over certified sequences of tv_hi at position t (slot t − 1)
        self.has_topk_p = self.has_topk_q = False
        self.max_errors = max_errors
        self.errors: list[dict] = []
        self.errors_total = 0
        self.uncovered_seqs = self.uncovered_positions = 0
        self.uncovered_first = None  # (line, call_id) of the uncovered sequence with the smallest line
        self.steps: dict = {}
        self.buckets: dict = {}
        self.metrics = StepMetrics()

    # ---- accumulation (workers/certify/file.py) ----------------------------------------------------------------
    def uncovered(self, meta, positions):
        first = (meta["line"], meta["call_id"])
        if self.uncovered_first is None or first[0] < self.uncovered_first[0]:
            self.uncovered_first = first
        self.uncovered_seqs += 1
        self.uncovered_positions += positions

    def error(self, line, call_id, reason):
        self.errors_total += 1
        self.errors.append({"line": line, "call_id": call_id, "reason": reason})
        if len(self.errors) >= 2 * self.max_errors + 64:  # keep the smallest lines, bounded
            self._trim_errors()

    def _trim_errors(self):
        self.errors = heapq.nsmallest(self.max_errors, self.errors, key=lambda e: e["line"])

    def first_errors(self) -> list[dict]:
        """The ``max_errors`` errors with the smallest line numbers, in line order."""
        self._trim_errors()
        return sorted(self.errors, key=lambda e: e["line"])

    def step(self, step):
        s = self.steps.get(step)
        if s is None:
            s = self.steps[step] = {
                "sequences": 0,
                "tokens": 0,
                "accepted": 0,
                "eps_max": 0.0,
                "eps_n": 0,
                "delta_max": 0.0,
                "ok_tokens": 0,
                "status": dict.fromkeys(SEQ_STATUS, 0),
                "sums": ExactSums(len(STEP_SUMS)),
            }
        return s

    def bucket(self, label, accept):
        b = self.buckets.setdefault(label, [0, 0])
        b[0] += 1
        b[1] += int(accept)

    def total(self, name: str) -> float:
        """A run-level exact sum (RUN_SUMS), rounded once."""
        return self.sums.value(RUN_SUMS.index(name))

    @staticmethod
    def step_total(s: dict, name: str) -> float:
        return s["sums"].value(STEP_SUMS.index(name))

    # ---- merge -------------------------------------------------------------------------------------------------
    def merge(self, other: "Partial") -> "Partial":
        """Add ``other`` into this partial (in place; returns self). Associative and commutative."""
        for k in _INTS:
            setattr(
                self,
                k,
                max(getattr(self, k), getattr(other, k)) if k == "T_ref" else getattr(self, k) + getattr(other, k),
            )
        for k in _MAXES:
            setattr(self, k, max(getattr(self, k), getattr(other, k)))
        for k, v in other.skipped.items():
            self.skipped[k] += v
        for d, o in ((self.seq_counts, other.seq_counts), (self.tok_counts, other.tok_counts)):
            for k, v in o.items():
                d[k] += v
        self.sums.merge(other.sums)
        self.profile.merge(other.profile)
        self.has_topk_p |= other.has_topk_p
        self.has_topk_q |= other.has_topk_q
        self.max_errors = max(self.max_errors, other.max_errors)
        self.errors = self.errors + other.errors
        self._trim_errors()
        if other.uncovered_first is not None and (
            self.uncovered_first is None or other.uncovered_first[0] < self.uncovered_first[0]
        ):
            self.uncovered_first = other.uncovered_first
        for key, o in other.steps.items():
            s = self.step(key)
            for k in _STEP_INTS:
                s[k] += o[k]
            s["eps_max"] = max(s["eps_max"], o["eps_max"])
            s["delta_max"] = max(s["delta_max"], o["delta_max"])
            for k, v in o["status"].items():
                s["status"][k] += v
            s["sums"].merge(o["sums"])
        for label, (n, acc) in other.buckets.items():
            b = self.buckets.setdefault(label, [0, 0])
            b[0] += n
            b[1] += acc
        self.metrics.merge(other.metrics)
        return self

    @classmethod
    def merged(cls, parts) -> "Partial":
        parts = list(parts)
        out = cls(max((p.max_errors for p in parts), default=100))
        for p in parts:
            out.merge(p)
        return out

    # ---- JSON --------------------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        self._trim_errors()
        return {
            "version": 1,
            **{k: getattr(self, k) for k in _INTS},
            **{k: encode_float(getattr(self, k)) for k in _MAXES},
            "skipped": dict(self.skipped),
            "seq_counts": self.seq_counts,
            "tok_counts": self.tok_counts,
            "sums": self.sums.to_json(),
            "profile": self.profile.to_json(),
            "has_topk_p": self.has_topk_p,
            "has_topk_q": self.has_topk_q,
            "max_errors": self.max_errors,
            "errors": self.errors,
            "uncovered_first": self.uncovered_first,
            "steps": [
                [
                    key,
                    {
                        **{k: s[k] for k in _STEP_INTS},
                        "eps_max": encode_float(s["eps_max"]),
                        "delta_max": encode_float(s["delta_max"]),
                        "status": s["status"],
                        "sums": s["sums"].to_json(),
                    },
                ]
                for key, s in self.steps.items()
            ],
            "buckets": self.buckets,
            "metrics": self.metrics.to_json(),
        }

    @classmethod
    def from_json(cls, doc: dict) -> "Partial":
        if doc.get("version") != 1:
            raise ValueError(f"unknown partial certificate version {doc.get('version')!r}")
        self = cls(int(doc["max_errors"]))
        for k in _INTS:
            setattr(self, k, int(doc[k]))
        for k in _MAXES:
            setattr(self, k, decode_float(doc[k]))
        self.skipped.update(doc["skipped"])
        self.seq_counts.update(doc["seq_counts"])
        self.tok_counts.update(doc["tok_counts"])
        self.sums = ExactSums.from_json(doc["sums"])
        self.profile = ExactSums.from_json(doc["profile"])
        self.has_topk_p, self.has_topk_q = bool(doc["has_topk_p"]), bool(doc["has_topk_q"])
        self.errors = list(doc["errors"])
        self.uncovered_first = tuple(doc["uncovered_first"]) if doc["uncovered_first"] is not None else None
        for key, s in doc["steps"]:
            self.steps[key] = {
                **{k: int(s[k]) for k in _STEP_INTS},
                "eps_max": decode_float(s["eps_max"]),
                "delta_max": decode_float(s["delta_max"]),
                "status": dict(s["status"]),
                "sums": ExactSums.from_json(s["sums"]),
            }
        self.buckets = {k: list(v) for k, v in doc["buckets"].items()}
        self.metrics = StepMetrics.from_json(doc["metrics"])
        return self
