"""The fidelity audit (docs/fidelity-rules.md) over a whole ``fcr/1`` file (``audit_file``) or a list
(``audit_records``).

One parse per record (records may come in any order, docs/fcr.md#principles, so the context rules wait for the
whole file):

1. **Evaluation pass** — one streaming read; each record is parsed and validated once and gets every rule that
   depends on it alone (R0–R4, R6–R8, :mod:`.rules`), its certificate intervals
   (docs/fidelity-rules.md#certificate-checks; batched across calls,
   :mod:`.certificates`) and its alignment distributions. The same pass builds the **index**: per call
   ``(run_id, call_id) → first line`` (duplicates — the first occurrence is always read first — and R5 context
   sources), per trajectory the root policy call (lowest ``call_index``: prompt length + 16-byte digest), per policy
   call and (merged mode) per ``trainer.sample_id`` member one small tuple. For each call it also records the
   prefix digests against the root / predecessor known *so far* (for a file in call order these are final).
   The result waits in a temporary spill file (compact: bit words, the per-call entry, certificate intervals; never
   the record), so memory is O(calls) small tuples, never O(tokens).
2. **Fix-up pass** — only if the file is out of order: re-reads just the records whose root or predecessor changed
   after they were read and recomputes those prefix digests (R5, R9:
   docs/fidelity-rules.md#rules-r0r9; TITO: docs/fidelity-rules.md#the-prefix-invariant-tito).
3. **Verdict pass** — reads the spill in file order: R5 (lineage) and R9 (merge chain) — both fail a whole call —
   then the verdict, spans, certificate counts (only if the call still has verifiable positions), coverage
   (:mod:`.coverage`), the loss-mask export (:mod:`.masks_export`) and ``call_sink`` batches.

So peak memory = one record + the index + a certificate batch (≤ 65 536 positions) + whatever ``calls[]`` keeps
(``max_calls_in_report``; nothing by default when a ``call_sink`` takes the calls). Gzip input is read by magic, like
the validator. Python's cyclic garbage collector is paused while the audit runs (collected every few thousand
lines): parsing allocates millions of short-lived lists, and with a large heap (e.g. torch imported) the collector
otherwise costs more than the parse.
"""

from __future__ import annotations

import gc
import pickle
import struct
import tempfile
from collections.abc import Callable, Iterable

import numpy as np

from workers.fcr.gc_pause import GC_EVERY, GcPaused
from workers.fidelity.coverage import Coverage, coverage_meta
from workers.fidelity.lineage_index import UNAUDITABLE, LineageIndex
from workers.fidelity.masks_export import MaskWriter
from workers.fidelity.rules import BIT, AuditOptions, CallResult, Lineage, apply_lineage, evaluate_call, finalize
from workers.fidelity.sources import Unauditable, critical, file_source, list_source, parse, record_issues
from workers.fidelity.tokenizer import TokenizerRegistry
from workers.fidelity.verdict import coverage_gate_reason, headline, verdict_label

REPORT_SCHEMA = "fcr-audit/1"
READ_SHARE = 0.9  # progress: the evaluation pass (bytes read) is 0 → 0.9, the verdict pass 0.9 → 1.0
_LEN = struct.Struct("<Q")  # spill framing: length of each call's pickle


# ------------------------------------------------------------------------------------------- audit
def _malformed_line(line, reason) -> CallResult:
    entry = {
        "line": line,
        "call_id": None,
        "run_id": None,
        "trajectory_id": None,
        "call_index": None,
        "sample_id": None,
        "step": None,
        "role": "unknown",
        "role_source": None,
        "purpose": None,
        "inferred_purpose": None,
        "n_tokens": 0,
        "verifiable_tokens": 0,
        "verdict": "excluded",
        "primary_reason": "MALFORMED",
        "reasons": ["MALFORMED"],
        "spans": [],
        "rules": {"R0": "fail"},
        "malformed": [{"field": "", "reason": reason}],
        "loss_mask_used": False,
        "closed_failure_violations": 0,
        "drift_if_retokenized": None,
        "alignment": None,
        "lineage": None,
        "certificate": None,
    }
    return CallResult(
        entry=entry, n=0, words=np.zeros(0, dtype=np.uint32), role="unknown", call_codes=int(BIT["MALFORMED"])
    )


def _run(
    source,
    *,
    mode,
    tokenizer,
    masks_out,
    masks_format,
    path_label,
    progress=None,
    progress_every=2000,
    call_sink=None,
    sink_batch=1000,
    **options,
) -> dict:
    audit = _Audit(mode, tokenizer, progress, options)
    keep = audit.opts.max_calls_in_report
    keep = keep if keep is not None else (0 if call_sink else None)
    with GcPaused(), tempfile.TemporaryFile(prefix="fidelity-audit-") as spill_file:
        spill = _Spill(spill_file)
        audit.evaluate_pass(source, spill, progress_every)
        audit.fix_up_pass(source)
        calls, truncated, masks = audit.verdict_pass(spill, masks_out, masks_format, keep, call_sink, sink_batch)
    audit.report(1.0, "done")
    return audit.result(path_label, calls, truncated, masks)


class _Spill:
    """The evaluation pass's results waiting for the verdict pass, in file order: one self-contained pickle per call
    (a shared Pickler's memo would keep every call alive), each framed by its length."""

    def __init__(self, file):
        self.file, self.count = file, 0

    def write(self, item) -> None:
        data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        self.file.write(_LEN.pack(len(data)))
        self.file.write(data)
        self.count += 1

    def read_all(self):
        self.file.seek(0)
        for _ in range(self.count):
            (size,) = _LEN.unpack(self.file.read(_LEN.size))
            yield pickle.loads(self.file.read(size))


class _Audit:
    """One audit's state across its three passes (the module docstring)."""

    def __init__(self, mode, tokenizer, progress, options):
        self.mode, self.progress = mode, progress
        self.opts = AuditOptions(mode=mode, **options)
        self.registry = TokenizerRegistry.coerce(tokenizer)
        self.index = LineageIndex(merged=(mode == "merged"))
        self.cov = Coverage(self.opts)
        self.certs = None
        if self.opts.certificates:
            from workers.fidelity.certificates import CertificateSection

            self.certs = CertificateSection(self.opts)
        self.unparsed = 0
        self.unregistered: set[str] = set()

    def report(self, fraction, message):
        if self.progress is not None:
            self.progress(min(1.0, max(0.0, fraction)), message)

    def evaluate_pass(self, source, spill: _Spill, progress_every: int) -> None:
        """Pass 1: evaluate every record once (R0–R4, R6–R8, certificate intervals) and index it."""
        certs = self.certs
        waiting: list = []  # calls whose certificate intervals are not computed yet, in file order
        next_report = 0.01

        def spill_waiting():
            certs.flush()
            for item in waiting:
                spill.write(item)
            waiting.clear()

        for line, raw, offset, frac in source():
            if self.progress is not None and (frac >= next_report or line % progress_every == 0):
                next_report = frac + 0.01
                self.report(READ_SHARE * frac, f"auditing: {frac:.0%} of the file read (line {line})")
            if line % GC_EVERY == 0:
                gc.collect(1)
            rec, err = parse(raw)
            if rec is None and err is None:
                continue  # blank line
            if rec is None:
                self.unparsed += 1
                res, meta = _malformed_line(line, err), {}
            else:
                self.index.add(line, rec)
                res = _evaluate(rec, raw, line, self.index, self.registry, self.unregistered, self.opts)
                meta = coverage_meta(rec)
            rec = raw = None  # release the record before the next parse
            res.entry["byte_offset"] = offset
            self.cov.add_alignment(res)
            if certs is None:
                spill.write((res, meta))
            else:
                waiting.append((res, meta))
                if (res.cert_arrays and certs.add(res)) or len(waiting) >= certs.FLUSH_CALLS:
                    spill_waiting()
            res = meta = None
        if certs is not None:
            spill_waiting()

    def fix_up_pass(self, source) -> None:
        """Pass 2 (out-of-order files only): prefix checks against the final roots and predecessors."""
        fix = self.index.resolve()
        if fix:
            self.report(READ_SHARE, f"re-reading {len(fix)} out-of-order call(s)")
            for line, raw, _, _ in source():
                checks = fix.get(line)
                if checks is not None:
                    rec, _ = parse(raw)
                    self.index.apply_fixes(line, rec, checks)
        self.index.finish()

    def verdict_pass(self, spill: _Spill, masks_out, masks_format, keep, call_sink, sink_batch):
        """Pass 3: verdicts in file order → coverage, the mask export, ``call_sink`` and ``calls[]``."""
        count, opts = spill.count, self.opts
        self.report(READ_SHARE, f"read {count} call(s); final verdicts")
        writer = MaskWriter(masks_out, masks_format) if masks_out else None
        calls: list[dict] = []
        batch: list[dict] = []
        truncated = False
        try:
            for i, (res, meta) in enumerate(spill.read_all()):
                if res.lineage_input is not None:
                    lineage = self.index.lineage(res.entry["line"], res.entry["run_id"], res.lineage_input)
                    apply_lineage(res, lineage, opts)
                if self.certs is not None:
                    self.certs.record(res)
                    if opts.require_certificate:
                        finalize(res)
                self.cov.add(res, meta)
                if writer is not None:
                    writer.write(res.entry, res.words == 0)
                if keep is None or len(calls) < keep:
                    calls.append(res.entry)
                else:
                    truncated = True
                if call_sink is not None:
                    batch.append(res.entry)
                    if len(batch) >= sink_batch:
                        call_sink(batch)
                        batch = []
                        self.report(READ_SHARE + (1 - READ_SHARE) * (i + 1) / count, f"stored {i + 1} of {count} calls")
                if i % GC_EVERY == 0:
                    gc.collect(1)
                res = meta = None
            if call_sink is not None and batch:
                call_sink(batch)
        finally:
            masks = writer.close() if writer is not None else None
        return calls, truncated, masks

    def result(self, path_label, calls, truncated, masks) -> dict:
        """The report (schema ``fcr-audit/1``): the verdict and why, coverage, calls, the mask export, warnings."""
        opts, cov = self.opts, self.cov
        if self.certs is not None:
            cov.cert = self.certs.summary()
        coverage = cov.report(
            chain_breaks=self.index.chain_breaks, merged_samples=self.index.merged_samples, unparsed_lines=self.unparsed
        )
        n_ver, n_pol = coverage["verifiable_policy_tokens"], coverage["policy_tokens"]
        reasons = self._verdict_reasons(n_ver, n_pol)
        verdict = "FAIL" if reasons else "PASS"
        return {
            "schema": REPORT_SCHEMA,
            "file": path_label,
            "mode": self.mode,
            "headline": headline(n_ver, n_pol),
            "verdict": verdict,
            "verdict_label": verdict_label(verdict, n_ver, n_pol),
            "verdict_reasons": reasons,
            "min_coverage": opts.min_coverage,
            "closed_failure_violations": cov.cf_tokens,
            "coverage": coverage,
            "calls": calls,
            "calls_truncated": truncated,
            "loss_mask": {
                "definition": "verifiable ∧ policy response token; per call = the verifiable spans of calls[]",
                "export": masks,
            },
            "tokenizers": {"registered": self.registry.shas(), "unregistered_seen": sorted(self.unregistered)},
            "protocol_warnings": self._protocol_warnings(coverage, n_ver),
            "options": {k: v for k, v in vars(opts).items()},
        }

    def _verdict_reasons(self, n_ver: int, n_pol: int) -> list[str]:
        """Why the audit fails (none: it passes)."""
        reasons = []
        violations = self.cov.cf_tokens
        if violations:
            reasons.append(f"closed-failure violations: {violations} trainer-used token(s) are not verifiable")
        if self.unparsed:
            reasons.append(
                f"{self.unparsed} line(s) could not be read as records (fail closed: they may be training data)"
            )
        if self.opts.require_loss_mask and self.cov.policy_calls_without_mask:
            reasons.append(f"{self.cov.policy_calls_without_mask} policy call(s) lack trainer.loss_mask_used")
        gate = coverage_gate_reason(n_ver, n_pol, self.opts.min_coverage)
        if gate:
            reasons.append(gate)
        return reasons

    def _protocol_warnings(self, coverage: dict, n_ver: int) -> list[str]:
        """What the log's producer should change, though the verdict stands."""
        warnings = []
        if not n_ver:
            warnings.append(
                "no policy token is verifiable: the closed-failure check passes trivially and says "
                "nothing about this log's data; see the exclusions by reason (e.g. "
                "TRAINER_LOGPROB_MISSING: attach the trainer side with `python -m workers.fidelity join`)"
            )
        if coverage["calls"]["spurious_call_rate"]:
            warnings.append(
                "calls with undeclared role (role 'unknown') reached the log: use the negotiated "
                "protocol (docs/fcr.md#negotiated-protocol) so background calls are declared or rejected"
            )
        if coverage["template_change"]:
            warnings.append("policy calls use more than one chat-template hash (mid-run template change)")
        unc = (coverage.get("certificates") or {}).get("trainer_list_uncovered_positions")
        if unc:
            warnings.append(
                f"trainer.top_k misses ids of rollout.top_k at {unc} position(s) sent for certificates: "
                "fcr/1 requires the trainer list to cover them; the certificates there are looser"
            )
        if self.unregistered:
            warnings.append(
                "records reference tokenizer hashes that are not registered; tokenizer-dependent checks "
                "fail closed for them"
            )
        return warnings


def _evaluate(rec, raw, line, index, registry, unregistered, opts) -> CallResult:
    """Every rule of docs/fidelity-rules.md#rules-r0r9 that depends on this record alone; R5/R9 wait for the whole
    index (``lineage_input``)."""
    issues, topk = record_issues(rec, raw)
    if line in index.malformed and not critical(issues):
        issues.append(Unauditable(ValueError("index pass rejected it")))
    tok = None
    tsha = (rec.get("tokenizer") or {}).get("sha256") if isinstance(rec.get("tokenizer"), dict) else None
    if tsha is not None:
        tok = registry.get(tsha)
        if tok is None and len(unregistered) < 100:
            unregistered.add(str(tsha))
    try:
        dup = index.duplicate_of(line, rec) if not critical(issues) else None
        return evaluate_call(
            rec,
            line=line,
            issues=issues,
            tokenizer=tok,
            lineage=Lineage(duplicate_of_line=dup),
            opts=opts,
            defer_lineage=True,
            topk=topk,
        )
    except UNAUDITABLE as exc:  # e.g. ids beyond int64: fail closed on this record, not the run
        return evaluate_call(rec, line=line, issues=[Unauditable(exc)], tokenizer=None, lineage=Lineage(), opts=opts)


def audit_file(
    path,
    *,
    mode: str = "transition",
    tokenizer=None,
    masks_out=None,
    masks_format: str = "jsonl",
    progress: Callable[[float, str], None] | None = None,
    call_sink: Callable[[list[dict]], None] | None = None,
    sink_batch: int = 1000,
    **options,
) -> dict:
    """Audit an ``fcr/1`` JSONL file (plain or gzip). See the module docstring for the passes and memory.

    ``tokenizer``: None, a :class:`~workers.fidelity.tokenizer.FidelityTokenizer`, a path to ``tokenizer.json``, a
    :class:`~workers.fidelity.tokenizer.TokenizerRegistry`, or a list of those. ``masks_out``: path for the loss-mask
    export (``masks_format`` ``"jsonl"`` or ``"bin"``, see :mod:`.masks_export`). Other ``options`` are the fields of
    :class:`~workers.fidelity.rules.AuditOptions` (``tau_align``, ``max_staleness``, ``allow_inferred_roles``, …).

    ``call_sink(entries)`` receives the per-call entries (the items of ``calls[]``, final verdicts) in file order, in
    batches of ``sink_batch``; with a sink, ``calls[]`` keeps only ``max_calls_in_report`` entries (default none), so
    the audit never holds every call. Entries carry ``byte_offset`` (the line's offset in a plain file, else None).

    ``progress(fraction, message)``: ``0.9 × fraction of the file's bytes read`` during the evaluation pass (at
    least every 1 % of the file and every ``progress_every`` lines), then 0.9 → 1.0 as verdicts go to the sink, and
    1.0 at the end. An exception raised by ``progress`` or ``call_sink`` (e.g. a cancelled job) stops the audit.
    """
    return _run(
        file_source(path),
        mode=mode,
        tokenizer=tokenizer,
        masks_out=masks_out,
        masks_format=masks_format,
        progress=progress,
        call_sink=call_sink,
        sink_batch=sink_batch,
        path_label=str(path),
        **options,
    )


def audit_records(
    records: Iterable,
    *,
    mode: str = "transition",
    tokenizer=None,
    masks_out=None,
    masks_format: str = "jsonl",
    progress: Callable[[float, str], None] | None = None,
    call_sink: Callable[[list[dict]], None] | None = None,
    sink_batch: int = 1000,
    **options,
) -> dict:
    """:func:`audit_file` over in-memory records (dicts, or JSON ``bytes``/``str`` lines); line numbers are 1-based
    positions in the list (progress: fraction of the records read; ``byte_offset`` is None)."""
    return _run(
        list_source(list(records)),
        mode=mode,
        tokenizer=tokenizer,
        masks_out=masks_out,
        masks_format=masks_format,
        progress=progress,
        call_sink=call_sink,
        sink_batch=sink_batch,
        path_label=None,
        **options,
    )
