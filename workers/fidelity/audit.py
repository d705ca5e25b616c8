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
import hashlib
from array import array
import json
import os
import pickle
import struct
import tempfile
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import numpy as np
import orjson

from workers.fcr.columnar import is_parquet, iter_records_or_errors
from workers.fcr.reader import FcrParseError, LineReader
from workers.fcr.validate import array_bools_possible, validate_record
from workers.fidelity.coverage import Coverage, coverage_meta
from workers.fidelity.masks_export import MaskWriter
from workers.fidelity.rules import (BIT, AuditOptions, CallResult, Lineage, apply_lineage, evaluate_call, finalize,
                                    is_critical, topk_checked)
from workers.fidelity.tokenizer import TokenizerRegistry
from workers.fidelity.verdict import coverage_gate_reason, headline, verdict_label

REPORT_SCHEMA = "fcr-audit/1"
READ_SHARE = 0.9  # progress: the evaluation pass (bytes read) is 0 → 0.9, the verdict pass 0.9 → 1.0
GC_EVERY = 4096  # lines between young-generation collections while the collector is paused
_LEN = struct.Struct("<Q")  # spill framing: length of each call's pickle


# ------------------------------------------------------------------------------------------- input
class _Broken:
    def __init__(self, reason):
        self.reason = reason


def _file_source(path):
    """``() → iterator of (line number, raw line, byte offset | None, fraction of the file read)`` over every
    non-blank line, plain or gzip (by magic; offsets only for plain files), through the one bounded reader
    (workers/fcr/reader.py). A truncated or corrupt gzip stream or a line/decompression limit yields every complete
    line, then a :class:`_Broken` on the line where reading stopped."""
    size = max(os.path.getsize(path), 1)
    if is_parquet(path):
        return _parquet_source(path)

    def lines() -> Iterator[tuple]:
        reader = LineReader(path)
        offsets = not reader.compressed
        try:
            for number, raw in reader:
                if not raw.isspace():
                    yield number, raw, reader.offset - len(raw) if offsets else None, reader.position / size
        except FcrParseError as exc:
            yield exc.line, _Broken(exc.reason), None, 1.0
    return lines


def _parquet_source(path):
    """:func:`_file_source` for ``fcr-parquet/1`` (workers/fcr/columnar.py): ``(row number, record, None, fraction)``,
    one row group in memory at a time; a row that is not a record (or an unreadable file) is a :class:`_Broken`."""
    def lines() -> Iterator[tuple]:
        done = [0.0]
        for number, rec in iter_records_or_errors(path, lambda pos, total: done.__setitem__(0, pos / max(total, 1))):
            if isinstance(rec, FcrParseError):
                yield number, _Broken(f"{rec.field + ': ' if rec.field else ''}{rec.reason}"), None, done[0]
            else:
                yield number, rec, None, done[0]
    return lines


def _list_source(records: list):
    def lines():
        total = max(len(records), 1)
        for i, r in enumerate(records, start=1):
            yield i, r, None, i / total
    return lines


@contextmanager
def _gc_paused():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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


def _ids_bytes(ids) -> bytes:
    """A flat integer id list as int64 bytes (the digest input); ValueError for anything else."""
    if ids and type(ids[0]) is int:
        try:  # one C pass; anything array('q') refuses (floats, ids ≥ 2**63) takes the numpy path below
            return array("q", ids).tobytes()
        except (TypeError, OverflowError):
            pass
    a = np.asarray(ids) if len(ids) else np.zeros(0, dtype=np.int64)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError("token ids are not a flat list of integers")
    return a.astype(np.int64, copy=False).tobytes()


def _hash(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _digest(ids) -> bytes:
    """16-byte digest of a flat integer id list (as int64); a prefix of ids ↔ a prefix of :func:`_ids_bytes`."""
    return _hash(_ids_bytes(ids))


def _issues(rec, raw) -> tuple[list, dict]:
    """The record's validator errors, and its top-K lists as arrays when they could be converted on the way.

    The two top-K lists are most of a record's bytes; when the raw line proves that no JSON boolean is an array
    element, :func:`~workers.fidelity.rules.topk_checked` checks and converts each in one set of C-level passes and
    the validator sees the record without them (same verdict: the checks are the validator's own fast-path checks).
    Anything unusual goes to the validator whole, which names the problem."""
    fast = isinstance(raw, (bytes, bytearray)) and not array_bools_possible(raw)
    topk: dict = {}
    view = rec
    if fast:
        resp = rec.get("response")
        ids = resp.get("token_ids") if type(resp) is dict else None
        if type(ids) is list:
            parts = {}
            for part in ("rollout", "trainer"):
                block = rec.get(part)
                if type(block) is dict and block.get("top_k") is not None:
                    arrays = topk_checked(block["top_k"], len(ids))
                    if arrays is None:
                        parts = None
                        break
                    topk[part] = arrays
                    parts[part] = {k: v for k, v in block.items() if k != "top_k"}
            if parts:
                view = {**rec, **parts}
            elif parts is None:
                topk = {}
    return [i for i in validate_record(view, lint=False, no_array_bools=fast) if i.severity == "error"], topk


def _critical(issues):
    return [i for i in issues if is_critical(i.field)]


def _str(v):
    return v if isinstance(v, str) else None


# ------------------------------------------------------------------------------------------- index
def _prefix_ok(prompt, length, digest) -> bool:
    return len(prompt) >= length and _digest(prompt[:length]) == digest


def _bytes_prefix_ok(ids_bytes: bytes, length, digest) -> bool:
    return len(ids_bytes) >= 8 * length and _hash(ids_bytes[:8 * length]) == digest


class _Index:
    """What R5, R9 and the TITO diagnostic need to know about the other calls of a run (see the module docstring)."""

    def __init__(self, merged: bool):
        self.merged = merged
        self.first_line: dict = {}
        self.roots: dict = {}  # (run, traj) -> [call_index, line, prompt_len, digest]
        self.policy: dict = {}  # (run, traj) -> sorted [(call_index, line, seq_len, seq_digest)] of policy calls
        self.samples: dict = {}  # (run, sid) -> sorted [(call_index, line, call_id, prompt_len, seq_len, seq_digest)]
        self.spec: dict = {}  # line -> (root line, prefix ok, predecessor line, prefix ok) as known when read
        self.chain_spec: dict = {}  # line -> (predecessor line in its sample, prefix ok) as known when read
        self.final: dict = {}  # line -> [is_root, root_prefix_ok, tito_prefix_ok]
        self.malformed: set[int] = set()  # records the index could not digest (e.g. ids beyond int64)
        self.broken_lines: set[int] = set()
        self.chain_breaks: list = []
        self.merged_samples = 0

    def add(self, line, rec):
        """Index one parsed record (no validation here: the evaluation validates every record once; a record whose
        index fields are unusable is simply left out of the index)."""
        if type(rec.get("call_id")) is not str or not isinstance(rec.get("prompt"), dict) \
                or not isinstance(rec.get("response"), dict) or rec.get("schema") != "fcr/1":
            return
        try:
            self._add(line, rec)
        except _UNAUDITABLE:
            self.malformed.add(line)

    def duplicate_of(self, line, rec) -> int | None:
        first = self.first_line.get((_str(rec.get("run_id")), rec.get("call_id")))
        return first if first is not None and first != line else None

    def _add(self, line, rec):
        run, cid = _str(rec.get("run_id")), rec["call_id"]
        self.first_line.setdefault((run, cid), line)
        prompt, resp = rec["prompt"]["token_ids"], rec["response"].get("token_ids")
        if type(prompt) is not list or type(resp) is not list:
            return
        traj, ci = _str(rec.get("trajectory_id")), rec.get("call_index")
        if type(ci) is not int or traj is None:
            return
        policy = rec.get("role") == "policy"
        trainer = rec.get("trainer")
        sid = _str(trainer.get("sample_id")) if self.merged and isinstance(trainer, dict) else None
        if not policy and sid is None:
            return
        # the prompt is converted once; every digest below is of a prefix of these bytes (or of prompt+response)
        p_bytes = _ids_bytes(prompt)
        seq_len = len(prompt) + len(resp)
        seq_d = hashlib.blake2b(p_bytes, digest_size=16)
        seq_d.update(_ids_bytes(resp))
        seq_d = seq_d.digest()
        if policy:
            key = (run, traj)
            root = self.roots.get(key)
            if root is None or ci < root[0]:
                root = self.roots[key] = [ci, line, len(prompt), _hash(p_bytes)]
            members = self.policy.setdefault(key, [])
            item = (ci, line, seq_len, seq_d)
            k = bisect_left(members, item)
            members.insert(k, item)
            prev = members[k - 1] if k else None
            self.spec[line] = (root[1], None if root[1] == line else _bytes_prefix_ok(p_bytes, root[2], root[3]),
                               prev and prev[1], prev and _bytes_prefix_ok(p_bytes, prev[2], prev[3]))
        if sid is not None:
            members = self.samples.setdefault((run, sid), [])
            item = (ci, line, rec["call_id"], len(prompt), seq_len, seq_d)
            k = bisect_left(members, item)
            members.insert(k, item)
            if k:
                prev = members[k - 1]
                self.chain_spec[line] = (prev[1], _bytes_prefix_ok(p_bytes, prev[4], prev[5]))

    def resolve(self) -> dict:
        """After the evaluation pass: the final root and predecessors. Returns ``line → {check: (prefix length,
        digest)}`` for the calls whose root or predecessor changed after they were read (out-of-order files)."""
        fix: dict = {}
        for key, members in self.policy.items():
            root = self.roots[key]
            for k, m in enumerate(members):
                line = m[1]
                s_root, s_ok, s_prev, s_tito = self.spec[line]
                is_root = root[1] == line
                root_ok = None if is_root else (s_ok if s_root == root[1] else None)
                if not is_root and s_root != root[1]:
                    fix.setdefault(line, {})["root"] = (root[2], root[3])
                prev = members[k - 1] if k else None
                tito = None if prev is None else (s_tito if prev[1] == s_prev else None)
                if prev is not None and prev[1] != s_prev:
                    fix.setdefault(line, {})["tito"] = (prev[2], prev[3])
                self.final[line] = [is_root, root_ok, tito]
        self.spec, self.policy = {}, {}
        self.chain_ok = {}
        for members in self.samples.values():
            for prev, cur in zip(members, members[1:]):
                spec = self.chain_spec.get(cur[1])
                if spec is not None and spec[0] == prev[1]:
                    self.chain_ok[cur[1]] = spec[1]
                else:
                    fix.setdefault(cur[1], {})["chain"] = (prev[4], prev[5])
        self.chain_spec = {}
        return fix

    def apply_fixes(self, line, rec, checks: dict):
        """Recompute the prefix checks of one re-read record against its final root / predecessors."""
        prompt = rec["prompt"]["token_ids"] if rec is not None and line not in self.malformed else None
        for check, (length, digest) in checks.items():
            ok = prompt is not None and _prefix_ok(prompt, length, digest)
            if check == "chain":
                self.chain_ok[line] = ok
            else:
                self.final[line][1 if check == "root" else 2] = ok

    def finish(self):
        """Mark the first break of every merged sample and every later call of that sample (R9,
        docs/fidelity-rules.md#rules-r0r9)."""
        for key, members in self.samples.items():
            broken = False
            for m in members[1:]:
                if not broken and not self.chain_ok.get(m[1], False):
                    broken = True
                    self.chain_breaks.append({"run_id": key[0], "sample_id": key[1], "call_id": m[2],
                                              "call_index": m[0], "line": m[1]})
                if broken:
                    self.broken_lines.add(m[1])
        self.merged_samples = len(self.samples)
        self.samples, self.chain_ok = {}, {}

    def lineage(self, line, run, li: dict) -> Lineage:
        lin = Lineage()
        final = self.final.get(line)
        if final is not None:
            lin.is_root, lin.root_prefix_ok, lin.tito_prefix_ok = final
        src = li["context_source"]
        lin.context_source_present = src is not None and (run, src) in self.first_line
        lin.chain_broken = line in self.broken_lines
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
    return CallResult(entry=entry, n=0, words=np.zeros(0, dtype=np.uint32), role="unknown",
                      call_codes=int(BIT["MALFORMED"]))


def _run(source, *, mode, tokenizer, masks_out, masks_format, path_label, progress=None, progress_every=2000,
         call_sink=None, sink_batch=1000, **options) -> dict:
    opts = AuditOptions(mode=mode, **options)
    keep = opts.max_calls_in_report if opts.max_calls_in_report is not None else (0 if call_sink else None)
    registry = TokenizerRegistry.coerce(tokenizer)
    index = _Index(merged=(mode == "merged"))
    cov = Coverage(opts)
    certs = None
    if opts.certificates:
        from workers.fidelity.certificates import CertificateSection

        certs = CertificateSection(opts)
    unparsed = 0
    unregistered: set[str] = set()

    def report(fraction, message):
        if progress is not None:
            progress(min(1.0, max(0.0, fraction)), message)

    with _gc_paused(), tempfile.TemporaryFile(prefix="fidelity-audit-") as spill:
        # ---- pass 1: evaluate every record once (R0–R4, R6–R8, certificate intervals) and index it
        def dump(item):  # one self-contained pickle per call (a shared Pickler's memo would keep every call alive)
            data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
            spill.write(_LEN.pack(len(data)))
            spill.write(data)

        waiting: list = []  # calls whose certificate intervals are not computed yet, in file order
        count = 0
        next_report = 0.01

        def spill_waiting():
            certs.flush()
            for item in waiting:
                dump(item)
            waiting.clear()

        for line, raw, offset, frac in source():
            if progress is not None and (frac >= next_report or line % progress_every == 0):
                next_report = frac + 0.01
                report(READ_SHARE * frac, f"auditing: {frac:.0%} of the file read (line {line})")
            if line % GC_EVERY == 0:
                gc.collect(1)
            rec, err = _parse(raw)
            if rec is None and err is None:
                continue  # blank line
            if rec is None:
                unparsed += 1
                res, meta = _malformed_line(line, err), {}
            else:
                index.add(line, rec)
                res = _evaluate(rec, raw, line, index, registry, unregistered, opts)
                meta = coverage_meta(rec)
            rec = raw = None  # release the record before the next parse
            res.entry["byte_offset"] = offset
            cov.add_alignment(res)
            count += 1
            if certs is None:
                dump((res, meta))
            else:
                waiting.append((res, meta))
                if (res.cert_arrays and certs.add(res)) or len(waiting) >= certs.FLUSH_CALLS:
                    spill_waiting()
            res = meta = None
        if certs is not None:
            spill_waiting()

        # ---- pass 2 (out-of-order files only): prefix checks against the final roots / predecessors
        fix = index.resolve()
        if fix:
            report(READ_SHARE, f"re-reading {len(fix)} out-of-order call(s)")
            for line, raw, _, _ in source():
                checks = fix.get(line)
                if checks is not None:
                    rec, _ = _parse(raw)
                    index.apply_fixes(line, rec, checks)
        index.finish()

        # ---- pass 3: verdicts in file order → coverage, mask export, call_sink, calls[]
        report(READ_SHARE, f"read {count} call(s); final verdicts")
        spill.seek(0)
        def load():
            (size,) = _LEN.unpack(spill.read(_LEN.size))
            return pickle.loads(spill.read(size))

        writer = MaskWriter(masks_out, masks_format) if masks_out else None
        calls: list[dict] = []
        batch: list[dict] = []
        truncated = False
        try:
            for i in range(count):
                res, meta = load()
                if res.lineage_input is not None:
                    apply_lineage(res, index.lineage(res.entry["line"], res.entry["run_id"], res.lineage_input), opts)
                if certs is not None:
                    certs.record(res)
                    if opts.require_certificate:
                        finalize(res)
                cov.add(res, meta)
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
                        report(READ_SHARE + (1 - READ_SHARE) * (i + 1) / count, f"stored {i + 1} of {count} calls")
                if i % GC_EVERY == 0:
                    gc.collect(1)
            if call_sink is not None and batch:
                call_sink(batch)
            batch = res = meta = None
        finally:
            masks = writer.close() if writer is not None else None

    report(1.0, "done")
    if certs is not None:
        cov.cert = certs.summary()
    coverage = cov.report(chain_breaks=index.chain_breaks, merged_samples=index.merged_samples,
                          unparsed_lines=unparsed)
    violations = cov.cf_tokens
    reasons = []
    if violations:
        reasons.append(f"closed-failure violations: {violations} trainer-used token(s) are not verifiable")
    if unparsed:
        reasons.append(f"{unparsed} line(s) could not be read as records (fail closed: they may be training data)")
    if opts.require_loss_mask and cov.policy_calls_without_mask:
        reasons.append(f"{cov.policy_calls_without_mask} policy call(s) lack trainer.loss_mask_used")
    n_ver, n_pol = coverage["verifiable_policy_tokens"], coverage["policy_tokens"]
    gate = coverage_gate_reason(n_ver, n_pol, opts.min_coverage)
    if gate:
        reasons.append(gate)
    warnings = []
    if not n_ver:
        warnings.append("no policy token is verifiable: the closed-failure check passes trivially and says nothing "
                        "about this log's data; see the exclusions by reason (e.g. TRAINER_LOGPROB_MISSING: attach "
                        "the trainer side with `python -m workers.fidelity join`)")
    if coverage["calls"]["spurious_call_rate"]:
        warnings.append("calls with undeclared role (role 'unknown') reached the log: use the negotiated protocol "
                        "(docs/fcr.md#negotiated-protocol) so background calls are declared or rejected")
    if coverage["template_change"]:
        warnings.append("policy calls use more than one chat-template hash (mid-run template change)")
    unc = (coverage.get("certificates") or {}).get("trainer_list_uncovered_positions")
    if unc:
        warnings.append(f"trainer.top_k misses ids of rollout.top_k at {unc} position(s) sent for certificates: fcr/1 requires "
                        "the trainer list to cover them; the certificates there are looser")
    if unregistered:
        warnings.append("records reference tokenizer hashes that are not registered; tokenizer-dependent checks "
                        "fail closed for them")
    return {
        "schema": REPORT_SCHEMA,
        "file": path_label,
        "mode": mode,
        "headline": headline(n_ver, n_pol),
        "verdict": "FAIL" if reasons else "PASS",
        "verdict_label": verdict_label("FAIL" if reasons else "PASS", n_ver, n_pol),
        "verdict_reasons": reasons,
        "min_coverage": opts.min_coverage,
        "closed_failure_violations": violations,
        "coverage": coverage,
        "calls": calls,
        "calls_truncated": truncated,
        "loss_mask": {
            "definition": "verifiable ∧ policy response token; per call = the verifiable spans of calls[]",
            "export": masks,
        },
        "tokenizers": {"registered": registry.shas(), "unregistered_seen": sorted(unregistered)},
        "protocol_warnings": warnings,
        "options": {k: v for k, v in vars(opts).items()},
    }


def _evaluate(rec, raw, line, index, registry, unregistered, opts) -> CallResult:
    """Every rule of docs/fidelity-rules.md#rules-r0r9 that depends on this record alone; R5/R9 wait for the whole
    index (``lineage_input``)."""
    issues, topk = _issues(rec, raw)
    if line in index.malformed and not _critical(issues):
        issues.append(_Unauditable(ValueError("index pass rejected it")))
    tok = None
    tsha = (rec.get("tokenizer") or {}).get("sha256") if isinstance(rec.get("tokenizer"), dict) else None
    if tsha is not None:
        tok = registry.get(tsha)
        if tok is None and len(unregistered) < 100:
            unregistered.add(str(tsha))
    try:
        dup = index.duplicate_of(line, rec) if not _critical(issues) else None
        return evaluate_call(rec, line=line, issues=issues, tokenizer=tok, lineage=Lineage(duplicate_of_line=dup),
                             opts=opts, defer_lineage=True, topk=topk)
    except _UNAUDITABLE as exc:  # e.g. ids beyond int64: fail closed on this record, not the run
        return evaluate_call(rec, line=line, issues=[_Unauditable(exc)], tokenizer=None, lineage=Lineage(),
                             opts=opts)


def audit_file(path, *, mode: str = "transition", tokenizer=None, masks_out=None, masks_format: str = "jsonl",
               progress: Callable[[float, str], None] | None = None,
               call_sink: Callable[[list[dict]], None] | None = None, sink_batch: int = 1000, **options) -> dict:
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
    return _run(_file_source(path), mode=mode, tokenizer=tokenizer, masks_out=masks_out, masks_format=masks_format,
                progress=progress, call_sink=call_sink, sink_batch=sink_batch, path_label=str(path), **options)


def audit_records(records: Iterable, *, mode: str = "transition", tokenizer=None, masks_out=None,
                  masks_format: str = "jsonl", progress: Callable[[float, str], None] | None = None,
                  call_sink: Callable[[list[dict]], None] | None = None, sink_batch: int = 1000, **options) -> dict:
    """:func:`audit_file` over in-memory records (dicts, or JSON ``bytes``/``str`` lines); line numbers are 1-based
    positions in the list (progress: fraction of the records read; ``byte_offset`` is None)."""
    return _run(_list_source(list(records)), mode=mode, tokenizer=tokenizer, masks_out=masks_out,
                masks_format=masks_format, progress=progress, call_sink=call_sink, sink_batch=sink_batch,
                path_label=None, **options)
