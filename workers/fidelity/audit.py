"""The fidelity audit of spec/fidelity.md §6 over a whole ``fcr/1`` file (``audit_file``) or a list (``audit_records``).

Memory model (streaming, order-independent — §4.1 says records may come in any order):

1. **Index pass** — one streaming read; keeps per call only ``(run_id, call_id) → first line`` (duplicates, §6.2 R5
   context sources), per trajectory the root policy call's prompt length and a 16-byte digest, and (merged mode)
   per ``trainer.sample_id`` one small tuple per call. Memory is O(calls) small tuples, never O(tokens).
2. **Chain pass** (merged mode only, and only if some sample has ≥ 2 calls) — re-reads the file and compares the
   digest of each chained prompt's prefix with the previous call's prompt+response digest (§6.2 R9).
3. **Evaluation pass** — re-reads the file, one record at a time: R0–R9 (:mod:`.rules`), the certificate section,
   coverage accumulation (:mod:`.coverage`) and the streaming loss-mask export (:mod:`.masks_export`).

So peak memory = one record + the index + the report's ``calls[]`` list (cap it with ``max_calls_in_report`` for
very large runs; coverage and the mask export still see every call). Gzip input is read by magic, like the
validator. The only per-token Python work left is parsing; the rule checks are numpy over each call's arrays.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator

import numpy as np
import orjson

from workers.fcr.reader import FcrParseError
from workers.fcr.validate import array_bools_possible, iter_raw_lines, validate_record
from workers.fidelity.coverage import Coverage, coverage_meta
from workers.fidelity.masks_export import MaskWriter
from workers.fidelity.rules import AuditOptions, CallResult, Lineage, evaluate_call, finalize, is_critical
from workers.fidelity.tokenizer import TokenizerRegistry

REPORT_SCHEMA = "fcr-audit/1"


# ------------------------------------------------------------------------------------------- input
class _Broken:
    def __init__(self, reason):
        self.reason = reason


def _file_source(path):
    def lines() -> Iterator[tuple[int, object]]:
        try:
            yield from iter_raw_lines(path)
        except FcrParseError as exc:
            yield exc.line, _Broken(exc.reason)
    return lines


def _list_source(records: list):
    def lines():
        for i, r in enumerate(records, start=1):
            yield i, r
    return lines


def _parse(raw):
    """→ (record or None, error or None). orjson first; stdlib json accepts NaN/Infinity so R6/R8 can see them."""
    if isinstance(raw, _Broken):
        return None, raw.reason
    if isinstance(raw, dict):
        return raw, None
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if isinstance(raw, (bytes, bytearray)):
        if not raw.strip():
            return None, None
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            try:
                rec = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                return None, f"not valid JSON ({exc})"
        if not isinstance(rec, dict):
            return None, f"expected a JSON object, got {type(rec).__name__}"
        return rec, None
    return None, f"expected a JSON object, got {type(raw).__name__}"


_UNAUDITABLE = (OverflowError, ValueError, TypeError, KeyError, IndexError)


class _Unauditable:
    severity = "error"
    field = ""

    def __init__(self, exc):
        self.reason = f"record cannot be audited ({type(exc).__name__}: {exc})"


def _digest(ids) -> bytes:
    a = np.asarray(ids) if len(ids) else np.zeros(0, dtype=np.int64)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError("token ids are not a flat list of integers")
    return hashlib.blake2b(a.astype(np.int64, copy=False).tobytes(), digest_size=16).digest()


def _issues(rec, raw):
    fast = isinstance(raw, (bytes, bytearray)) and not array_bools_possible(raw)
    return [i for i in validate_record(rec, lint=False, no_array_bools=fast) if i.severity == "error"]


def _critical(issues):
    return [i for i in issues if is_critical(i.field)]


def _str(v):
    return v if isinstance(v, str) else None


# ------------------------------------------------------------------------------------------- index
class _Index:
    def __init__(self, merged: bool):
        self.merged = merged
        self.first_line: dict = {}
        self.roots: dict = {}  # (run, traj) -> [call_index, line, prompt_len, digest]
        self.samples: dict = {}  # (run, sid) -> [(call_index, line, call_id, prompt_len, seq_len, seq_digest)]
        self.malformed: set[int] = set()  # records the index could not digest (e.g. ids beyond int64)
        self.broken_lines: set[int] = set()
        self.chain_breaks: list = []
        self.policy_seq: dict = {}  # (run, traj) -> [(call_index, line, seq_len, seq_digest)] of policy calls
        self.tito_prev: dict = {}  # line -> (seq_len, seq_digest) of the previous policy call of its trajectory

    def add(self, line, rec, raw):
        """Index one parsed record. No validation here (the evaluation pass validates every record once): a
        record whose index fields are unusable is simply left out of the index."""
        if type(rec.get("call_id")) is not str or not isinstance(rec.get("prompt"), dict) \
                or not isinstance(rec.get("response"), dict) or rec.get("schema") != "fcr/1":
            return
        try:
            self._add(line, rec)
        except _UNAUDITABLE:
            self.malformed.add(line)

    def _add(self, line, rec):
        run, cid = _str(rec.get("run_id")), rec["call_id"]
        self.first_line.setdefault((run, cid), line)
        prompt = rec["prompt"]["token_ids"]
        if type(prompt) is not list or type(rec["response"].get("token_ids")) is not list:
            return
        traj, ci = _str(rec.get("trajectory_id")), rec.get("call_index")
        if type(ci) is not int or traj is None:
            return
        if rec.get("role") == "policy":
            key = (run, traj)
            cur = self.roots.get(key)
            if cur is None or ci < cur[0]:
                self.roots[key] = [ci, line, len(prompt), _digest(prompt)]
            seq = prompt + rec["response"]["token_ids"]
            self.policy_seq.setdefault(key, []).append((ci, line, len(seq), _digest(seq)))
        sid = _str((rec.get("trainer") or {}).get("sample_id"))
        if self.merged and sid is not None:
            seq = prompt + rec["response"]["token_ids"]
            self.samples.setdefault((run, sid), []).append(
                (ci, line, cid, len(prompt), len(seq), _digest(seq)))

    def finish(self):
        """After the index pass: each policy call's predecessor in its trajectory (TITO diagnostic, §1.2)."""
        for members in self.policy_seq.values():
            members.sort()
            for prev, cur in zip(members, members[1:]):
                self.tito_prev[cur[1]] = (prev[2], prev[3])
        self.policy_seq = {}

    def chain_requirements(self) -> dict:
        """line → (prefix length, expected digest, sample key) for every chained call after the first."""
        need = {}
        for key, members in self.samples.items():
            members.sort()
            for prev, cur in zip(members, members[1:]):
                need[cur[1]] = (prev[4], prev[5], key)
        return need

    def apply_chain(self, results: dict):
        """results: line → bool (prefix ok). Mark the first break and every later call of the sample."""
        for key, members in self.samples.items():
            broken = False
            for m in members[1:]:
                if not broken and not results.get(m[1], False):
                    broken = True
                    self.chain_breaks.append({"run_id": key[0], "sample_id": key[1], "call_id": m[2],
                                              "call_index": m[0], "line": m[1]})
                if broken:
                    self.broken_lines.add(m[1])

    def lineage(self, line, rec) -> Lineage:
        run = _str(rec.get("run_id"))
        lin = Lineage()
        if _str(rec.get("trajectory_id")) is None or type(rec.get("call_index")) is not int:
            lin.evaluable = False
        first = self.first_line.get((run, rec.get("call_id")))
        if first is not None and first != line:
            lin.duplicate_of_line = first
        root = self.roots.get((run, _str(rec.get("trajectory_id"))))
        if root is not None:
            if root[1] == line:
                lin.is_root = True
            else:
                prompt = rec["prompt"]["token_ids"]
                L = root[2]
                lin.root_prefix_ok = len(prompt) >= L and _digest(prompt[:L]) == root[3]
        src = _str(rec["prompt"].get("context_source_call_id"))
        lin.context_source_present = src is not None and (run, src) in self.first_line
        lin.chain_broken = line in self.broken_lines
        prev = self.tito_prev.get(line)
        if prev is not None:
            prompt = rec["prompt"]["token_ids"]
            lin.tito_prefix_ok = len(prompt) >= prev[0] and _digest(prompt[:prev[0]]) == prev[1]
        return lin


# ------------------------------------------------------------------------------------------- audit
def _malformed_line(line, reason) -> CallResult:
    entry = {"line": line, "call_id": None, "run_id": None, "trajectory_id": None, "call_index": None,
             "sample_id": None, "step": None, "role": "unknown", "role_source": None, "purpose": None,
             "inferred_purpose": None, "n_tokens": 0, "verifiable_tokens": 0, "verdict": "excluded",
             "primary_reason": "MALFORMED", "reasons": ["MALFORMED"], "spans": [], "rules": {"R0": "fail"},
             "malformed": [{"field": "", "reason": reason}], "loss_mask_used": False,
             "closed_failure_violations": 0, "drift_if_retokenized": None, "alignment": None, "lineage": None,
             "certificate": None}
    return CallResult(entry=entry, n=0, words=np.zeros(0, dtype=np.uint32), role="unknown")


def _run(source, *, mode, tokenizer, masks_out, masks_format, path_label, progress=None, progress_every=2000,
         **options) -> dict:
    opts = AuditOptions(mode=mode, **options)
    registry = TokenizerRegistry.coerce(tokenizer)
    index = _Index(merged=(mode == "merged"))

    def report(fraction, message):
        if progress is not None:
            progress(min(1.0, max(0.0, fraction)), message)

    # pass 1: index (progress 0 → 0.3 by line count is unknown yet: report lines read)
    last_line = 0
    for line, raw in source():
        last_line = line
        if progress is not None and line % progress_every == 0:
            report(0.0, f"indexing: line {line}")
        rec, err = _parse(raw)
        if rec is not None:
            index.add(line, rec, raw)
        rec = None  # free this record before the next parse (lets the allocator reuse its memory)

    index.finish()

    # pass 2: merge chains (merged mode)
    need = index.chain_requirements() if index.merged else {}
    if need:
        ok = {}
        for line, raw in source():
            req = need.get(line)
            if req is None:
                continue
            rec, _ = _parse(raw)
            if rec is None or line in index.malformed:
                ok[line] = False
                continue
            prompt = rec["prompt"]["token_ids"]
            ok[line] = len(prompt) >= req[0] and _digest(prompt[:req[0]]) == req[1]
        index.apply_chain(ok)

    report(0.3, f"indexed {last_line} lines")

    # pass 3: evaluate (progress 0.3 → 1.0 by line number)
    cov = Coverage(opts)
    certs = None
    if opts.certificates:
        from workers.fidelity.certificates import CertificateSection

        certs = CertificateSection(opts)
    writer = MaskWriter(masks_out, masks_format) if masks_out else None
    calls: list[dict] = []
    state = {"truncated": False}
    unparsed = 0
    unregistered: set[str] = set()
    waiting: list = []  # calls queued for a certificate flush, in file order

    def emit(res, meta):
        if opts.require_certificate:
            finalize(res)
        cov.add(res, meta)
        if writer is not None:
            writer.write(res.entry, res.words == 0)
        if opts.max_calls_in_report is None or len(calls) < opts.max_calls_in_report:
            calls.append(res.entry)
        else:
            state["truncated"] = True

    def drain():
        if certs is not None:
            certs.flush()
        for item in waiting:
            emit(*item)
        waiting.clear()

    try:
        for line, raw in source():
            if progress is not None and line % progress_every == 0:
                report(0.3 + 0.7 * line / max(last_line, 1), f"auditing: line {line} of {last_line}")
            rec = res = item = None  # free the previous record before parsing the next one
            rec, err = _parse(raw)
            if rec is None and err is None:
                continue  # blank line
            if rec is None:
                unparsed += 1
                res = _malformed_line(line, err)
            else:
                issues = _issues(rec, raw)
                if line in index.malformed and not _critical(issues):
                    issues.append(_Unauditable(ValueError("index pass rejected it")))
                tok = None
                tsha = (rec.get("tokenizer") or {}).get("sha256") if isinstance(rec.get("tokenizer"), dict) else None
                if tsha is not None:
                    tok = registry.get(tsha)
                    if tok is None and len(unregistered) < 100:
                        unregistered.add(str(tsha))
                try:
                    lineage = index.lineage(line, rec) if not _critical(issues) else Lineage()
                    res = evaluate_call(rec, line=line, issues=issues, tokenizer=tok, lineage=lineage, opts=opts)
                except _UNAUDITABLE as exc:  # e.g. ids beyond int64: fail closed on this record, not the run
                    res = evaluate_call(rec, line=line, issues=[_Unauditable(exc)], tokenizer=None,
                                        lineage=Lineage(), opts=opts)
            item = (res, coverage_meta(rec))
            if certs is None:
                emit(*item)
            else:
                waiting.append(item)
                if (res.cert_arrays and certs.add(res)) or len(waiting) >= certs.FLUSH_CALLS:
                    drain()
        drain()
    finally:
        masks = writer.close() if writer is not None else None
    truncated_calls = state["truncated"]

    report(1.0, "done")
    if certs is not None:
        cov.cert = certs.summary()
    coverage = cov.report(chain_breaks=index.chain_breaks, merged_samples=len(index.samples),
                          unparsed_lines=unparsed)
    violations = cov.cf_tokens
    reasons = []
    if violations:
        reasons.append(f"closed-failure violations: {violations} trainer-used token(s) are not verifiable")
    if unparsed:
        reasons.append(f"{unparsed} line(s) could not be read as records (fail closed: they may be training data)")
    if opts.require_loss_mask and cov.policy_calls_without_mask:
        reasons.append(f"{cov.policy_calls_without_mask} policy call(s) lack trainer.loss_mask_used")
    warnings = []
    if coverage["calls"]["spurious_call_rate"]:
        warnings.append("calls with undeclared role (role 'unknown') reached the log: use the negotiated protocol "
                        "(§4.4) so background calls are declared or rejected")
    if coverage["template_change"]:
        warnings.append("policy calls use more than one chat-template hash (mid-run template change)")
    if unregistered:
        warnings.append("records reference tokenizer hashes that are not registered; tokenizer-dependent checks "
                        "fail closed for them")
    return {
        "schema": REPORT_SCHEMA,
        "file": path_label,
        "mode": mode,
        "verdict": "FAIL" if reasons else "PASS",
        "verdict_reasons": reasons,
        "closed_failure_violations": violations,
        "coverage": coverage,
        "calls": calls,
        "calls_truncated": truncated_calls,
        "loss_mask": {
            "definition": "verifiable ∧ policy response token; per call = the verifiable spans of calls[]",
            "export": masks,
        },
        "tokenizers": {"registered": registry.shas(), "unregistered_seen": sorted(unregistered)},
        "protocol_warnings": warnings,
        "options": {k: v for k, v in vars(opts).items()},
    }


def audit_file(path, *, mode: str = "transition", tokenizer=None, masks_out=None, masks_format: str = "jsonl",
               progress=None, **options) -> dict:
    """Audit an ``fcr/1`` JSONL file (plain or gzip). See the module docstring for the memory model.

    ``tokenizer``: None, a :class:`~workers.fidelity.tokenizer.FidelityTokenizer`, a path to ``tokenizer.json``, a
    :class:`~workers.fidelity.tokenizer.TokenizerRegistry`, or a list of those. ``masks_out``: path for the loss-mask
    export (``masks_format`` ``"jsonl"`` or ``"bin"``, see :mod:`.masks_export`). Other ``options`` are the fields of
    :class:`~workers.fidelity.rules.AuditOptions` (``tau_align``, ``max_staleness``, ``allow_inferred_roles``, …).
    ``progress(fraction, message)`` is called every ``progress_every`` (2000) lines: 0.0 while indexing (the line
    count is not known yet), then 0.3 → 1.0 through the evaluation pass.
    """
    return _run(_file_source(path), mode=mode, tokenizer=tokenizer, masks_out=masks_out, masks_format=masks_format,
                progress=progress,
                path_label=str(path), **options)


def audit_records(records: Iterable, *, mode: str = "transition", tokenizer=None, masks_out=None,
                  masks_format: str = "jsonl", **options) -> dict:
    """:func:`audit_file` over in-memory records (dicts, or JSON ``bytes``/``str`` lines); line numbers are 1-based
    positions in the list."""
    return _run(_list_source(list(records)), mode=mode, tokenizer=tokenizer, masks_out=masks_out,
                masks_format=masks_format, path_label=None, **options)
