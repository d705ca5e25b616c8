"""Reads for signed certificates and the transparency log: entries scoped to what the caller may see, bundles
with inclusion proofs, the published key set and checkpoints, and verification — of one certificate
(:func:`verify_entry`) and of the whole log (:func:`verify_log`, for consistency checks and monitoring).

All cryptography is :mod:`workers.verify`'s, the same code the offline verifier runs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from audit_portal.attestations import keys, statements, witness
from audit_portal.attestations.keys import key_set
from audit_portal.attestations.models import Checkpoint, Cosignature, LogEntry, SubjectKind
from audit_portal.attestations.subjects import audited_files, subject_object  # read here by pages
from workers.verify import build_bundle, dsse, jcs, merkle, verify_bundle
from workers.verify import checkpoint as vcheckpoint
from workers.verify import keylog
from workers.verify import note as vnote
from workers.verify import statement as st
from workers.verify.bundle import FAILED, OK, SKIPPED, Report, file_sha256


def leaf_hashes(tree_size: int | None = None) -> list[bytes]:
    qs = LogEntry.objects.order_by("index")
    if tree_size is not None:
        qs = qs.filter(index__lt=tree_size)
    return [bytes.fromhex(h) for h in qs.values_list("leaf_hash", flat=True)]


def latest_checkpoint(tree_size: int | None = None) -> Checkpoint | None:
    qs = Checkpoint.objects.all()
    if tree_size is not None:
        return qs.filter(tree_size=tree_size).first()
    return qs.order_by("-tree_size").first()


def checkpoint_note(tree_size: int | None = None) -> str | None:
    """The C2SP checkpoint note of the latest checkpoint (or of ``tree_size``) with the witness cosignatures the log
    accepted for it; None when there is none (checkpoints older than migration 0004 have no note)."""
    qs = Checkpoint.objects.exclude(note__isnull=True).exclude(note="")
    ck = (qs.filter(tree_size=tree_size) if tree_size is not None else qs.order_by("-tree_size")).first()
    if ck is None:
        return None
    lines = list(Cosignature.objects.filter(tree_size=ck.tree_size).order_by("witness").values_list("line", flat=True))
    return vnote.add_signatures(ck.note, lines) if lines else ck.note


def note_verifiers(history=None) -> list:
    """The C2SP note verifiers of every key the log introduced (name = the log's origin)."""
    history = history or keys.key_history()
    return [vnote.verifier(keys.log_name(), public) for public in history.public.values()]


def witness_verifiers(warn=None) -> list:
    """The configured witnesses' verifier keys (AUDIT_LOG_WITNESS_KEYS); a malformed one is skipped (``warn`` is
    told which)."""
    from django.conf import settings

    out = []
    for text in settings.AUDIT_LOG_WITNESS_KEYS:
        try:
            out.append(vnote.parse_verifier(text))
        except vnote.NoteError as exc:
            if warn is not None:
                warn(f"AUDIT_LOG_WITNESS_KEYS: {exc}")
    return out


def key_events(tree_size: int | None = None) -> dict | None:
    """The key-event entries within the checkpoint of ``tree_size`` (default: the latest), each with its inclusion
    proof: what a witness derives the key set from."""
    ck = latest_checkpoint(tree_size)
    if ck is None:
        return None
    hashes = leaf_hashes(ck.tree_size)
    events = LogEntry.objects.filter(subject_kind=SubjectKind.SIGNING_KEY, index__lt=ck.tree_size).order_by("index")
    return {
        "tree_size": ck.tree_size,
        "root_hash": ck.root_hash,
        "events": [
            {
                "log_index": e.index,
                "envelope": json.loads(e.envelope),
                "hashes": [h.hex() for h in merkle.inclusion_proof(e.index, hashes)],
            }
            for e in events
        ],
    }


def entries_for(principal, kind: str | None = None, subject_id: int | None = None):
    qs = LogEntry.objects.filter(project_id__in=principal.readable_projects().values("pk"))
    if kind is not None:
        qs = qs.filter(subject_kind=kind)
    if subject_id is not None:
        qs = qs.filter(subject_id=subject_id)
    return qs.order_by("-index")


def latest_entry(kind: str, subject_id: int) -> LogEntry | None:
    """The newest log entry of a subject (unscoped: callers pass an object they already scoped)."""
    return LogEntry.objects.filter(subject_kind=kind, subject_id=subject_id).order_by("-index").first()


def bundle(entry: LogEntry, tree_size: int | None = None, consistency_from: int | None = None) -> dict:
    """The downloadable bundle of ``entry``: envelope, inclusion proof and checkpoint (the latest, or the one of
    ``tree_size``), and the key set; with ``consistency_from`` = m also the RFC 6962 consistency proof from tree size
    m to the checkpoint's (for a verifier that pinned a checkpoint of size m). Raises ``ValueError`` when no
    checkpoint of that size covers the entry or m is not in 1..tree size."""
    ck = latest_checkpoint(tree_size)
    if ck is None or ck.tree_size <= entry.index:
        raise ValueError(
            f"no checkpoint of tree size {tree_size} covers log entry {entry.index}"
            if tree_size
            else "the log has no checkpoint covering this entry yet"
        )
    hashes = leaf_hashes(ck.tree_size)
    out = build_bundle(
        json.loads(entry.envelope),
        log_index=entry.index,
        integrated_time=entry.created_at.isoformat(),
        leaf_hashes=hashes,
        checkpoint=json.loads(ck.envelope),
        keys=key_set(),
    )
    # the key events with inclusion proofs: the verifier checks the signers were introduced through the log
    out["key_events"] = key_events(ck.tree_size)["events"]
    cosigned = checkpoint_note(ck.tree_size)
    if cosigned:  # the same tree head as a C2SP note, with its witnesses' cosignatures (verify --witness)
        out["checkpoint_note"] = cosigned
    if consistency_from is not None:
        if not 0 < consistency_from <= ck.tree_size:
            raise ValueError(f"consistency_from must be between 1 and the checkpoint's tree size {ck.tree_size}")
        out["consistency_proof"] = {
            "first": consistency_from,
            "second": ck.tree_size,
            "hashes": [h.hex() for h in merkle.consistency_proof(consistency_from, hashes)],
        }
    return out


def vcheckpoint_size(envelope: dict) -> int | None:
    """The tree size a checkpoint envelope states (unverified; the verifier checks its signature)."""
    try:
        return int(json.loads(dsse.parse(envelope)[1])["tree_size"])
    except (dsse.EnvelopeError, ValueError, KeyError, TypeError):
        return None


def verify_entry(entry: LogEntry, *, rehash_files: bool = False) -> Report:
    """Every check of :func:`workers.verify.verify_bundle` on the entry's bundle (with the server's key set), plus
    ``record``: the certificate as stored now still yields exactly the signed statement. ``rehash_files`` also
    hashes the audited files in the artifact store against the subject digests (slow for large uploads)."""
    try:
        b = bundle(entry)
    except ValueError as exc:
        report = Report()
        report.add("inclusion", FAILED, str(exc))
        return report
    obj = subject_object(entry.subject_kind, entry.subject_id)
    digests = {}
    if rehash_files:
        for name, path in audited_files(entry.subject_kind, obj).items():
            digests[name] = file_sha256(path) if path.is_file() else "missing from the artifact store"
    # the server trusts the key set it publishes, and checks the log against the latest witnessed checkpoint
    since, wsize = witness.latest(), None
    if since is not None:
        wsize = vcheckpoint_size(since)
        if wsize and wsize <= b["inclusion_proof"]["tree_size"]:
            hashes = leaf_hashes(b["inclusion_proof"]["tree_size"])
            b["consistency_proof"] = {
                "first": wsize,
                "second": len(hashes),
                "hashes": [h.hex() for h in merkle.consistency_proof(wsize, hashes)],
            }
    report = verify_bundle(
        b, file_digests=digests, keys=b["keys"], keys_source="the portal's published key set", since=since
    )
    stray = keylog.compare_table(keys.key_history(), keys.table_keys())
    if stray:  # a key the database holds that the log did not introduce: someone wrote the key table
        check = report.check("keys")
        check.state, check.message = FAILED, "; ".join(stray)
    if since is None:  # the verifier's hint names its command-line options; on the server the witness is the pin
        report.check("consistency").message = (
            "no witnessed checkpoint to compare the log with (AUDIT_LOG_WITNESS_DIR "
            "is unset or nothing was published there yet)"
        )
    if obj is None:
        report.add(
            "record",
            SKIPPED,
            f"{entry.subject_kind} {entry.subject_id} is no longer stored "
            "(regenerated or deleted); the signed statement is all there is",
        )
    elif report.statement is None:
        report.add("record", FAILED, "there is no readable signed statement to compare the stored record with")
    else:
        now = jcs.canonical(statements.BUILDERS[entry.subject_kind](obj))
        if now == jcs.canonical(report.statement):
            report.add("record", OK, "the stored certificate is exactly what was signed")
        else:
            report.add(
                "record",
                FAILED,
                "the stored certificate no longer matches the signed statement: it was changed after signing",
            )
    return report


@dataclass
class LogVerification:
    ok: bool = True
    tree_size: int = 0
    entries_checked: int = 0
    checkpoints_checked: int = 0
    witnessed_checked: int = 0
    root_hash: str = ""
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.ok = False
        self.problems.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def as_dict(self) -> dict:
        return asdict(self)


def verify_log(max_problems: int = 100) -> LogVerification:
    """Check the whole transparency log from the database, then against its witness (:mod:`.witness`): indices
    0..n-1 without gaps; every stored envelope hashes
    to its recorded leaf hash (RFC 6962 ``SHA-256(0x00 || envelope)``), is canonical, carries a valid signature of a
    published key and an in-toto statement; every checkpoint is validly signed, says the tree size and root of its
    row, and that root is the Merkle root of the first ``tree_size`` stored leaves (so each checkpoint is a prefix
    of the log: append-only); the latest checkpoint covers the whole log; and the first ``m`` entries hash to the root of
    every checkpoint of size ``m`` witnessed outside the database (the first mismatch names the rewritten entry)."""
    result = LogVerification()
    # the keys are what the log introduced (every entry replayed: each signer checked against the key active there)
    history = keys.key_history(events_only=False)
    for text in history.problems:
        result.problem(f"keys: {text}")
    for text in keylog.compare_table(history, keys.table_keys()):
        result.problem(f"keys: {text}")
    public = dict(history.public)
    hashes = []
    for i, (index, leaf_hash, envelope) in enumerate(
        LogEntry.objects.order_by("index").values_list("index", "leaf_hash", "envelope").iterator(chunk_size=500)
    ):
        if len(result.problems) >= max_problems:
            break
        result.entries_checked += 1
        if index != i:
            result.problem(f"entry at position {i} has index {index}: the log has a gap or a duplicate")
        hashes.append(bytes.fromhex(leaf_hash))
        raw = envelope.encode()
        if merkle.leaf_hash(raw).hex() != leaf_hash:
            result.problem(f"entry {index}: the stored envelope does not hash to its leaf hash {leaf_hash}")
        try:
            env = json.loads(raw)
            if jcs.canonical(env) != raw:
                result.problem(f"entry {index}: the stored envelope is not in canonical (RFC 8785) form")
            payload_type, payload, _ = dsse.verify(env, public)
            st.check(json.loads(payload))
        except (ValueError, dsse.EnvelopeError, st.StatementError) as exc:
            result.problem(f"entry {index}: {exc}")
    result.tree_size = len(hashes)
    roots = merkle.prefix_roots(hashes)
    result.root_hash = (roots[-1] if roots else merkle.EMPTY_ROOT).hex()
    last_size = 0
    for ck in Checkpoint.objects.order_by("tree_size").iterator(chunk_size=500):
        if len(result.problems) >= max_problems:
            break
        result.checkpoints_checked += 1
        last_size = ck.tree_size
        try:
            head = vcheckpoint.open_checkpoint(json.loads(ck.envelope), public)
        except (ValueError, dsse.EnvelopeError) as exc:
            result.problem(f"checkpoint {ck.tree_size}: {exc}")
            continue
        if head["tree_size"] != ck.tree_size or head["root_hash"].hex() != ck.root_hash:
            result.problem(f"checkpoint {ck.tree_size}: the signed tree head differs from the row")
        if not 0 < head["tree_size"] <= len(roots) or roots[head["tree_size"] - 1] != head["root_hash"]:
            result.problem(
                f"checkpoint {ck.tree_size}: its root is not the Merkle root of the first "
                f"{head['tree_size']} log entries"
            )
    if hashes and last_size != len(hashes):
        result.problem(f"the latest checkpoint covers {last_size} of {len(hashes)} entries")
    # the checks above trust the database; the witness outside it catches a rewrite with re-signed checkpoints
    result.witnessed_checked = witness.check(roots, history.key_set(), result.problem, result.warn)
    _check_cosignatures(roots, result)
    return result


def _check_cosignatures(roots: list[bytes], result: LogVerification) -> None:
    """Every cosignature kept from a configured witness must still verify over the checkpoint the log's *current*
    first ``n`` entries make: a witness signed the root it saw, so a rewrite below ``n`` — even with every checkpoint
    re-signed and the witness directory lost — leaves that cosignature unverifiable."""
    pinned = {w.text: w for w in witness_verifiers(result.warn)}
    for c in Cosignature.objects.order_by("tree_size", "witness").iterator(chunk_size=500):
        w = pinned.get(c.witness)
        if w is None:
            continue
        if c.tree_size > len(roots) or c.tree_size < 1:
            result.problem(
                f"witness {w.name} cosigned tree size {c.tree_size}, but the log has {len(roots)} "
                "entries: entries were removed"
            )
            continue
        text = vnote.checkpoint_text(keys.log_name(), c.tree_size, roots[c.tree_size - 1])
        try:
            if not vnote.verify_cosignatures(text + "\n" + c.line, [w]):
                raise vnote.NoteError("the cosignature names another key")
        except vnote.NoteError:
            result.problem(
                f"witness {w.name} cosigned tree size {c.tree_size} with a root the log's first "
                f"{c.tree_size} entries no longer hash to: an entry below {c.tree_size} was rewritten "
                "after it was cosigned"
            )
