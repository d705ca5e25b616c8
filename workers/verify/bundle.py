"""Certificate bundles and their verification — the one implementation the portal and the offline verifier share.

A bundle (``BUNDLE_MEDIA_TYPE``) is everything needed to check a certificate without the portal::

    {"mediaType": BUNDLE_MEDIA_TYPE,
     "envelope": <DSSE envelope of an in-toto Statement v1>,
     "log_entry": {"log_index": i, "leaf_hash": hex, "integrated_time": …},
     "inclusion_proof": {"log_index": i, "tree_size": n, "root_hash": hex, "hashes": [hex, …]},
     "checkpoint": <DSSE envelope of a checkpoint of size n>,
     "keys": <the key set>}

The log leaf is the RFC 8785 canonical JSON of the envelope, so its leaf hash is
``SHA-256(0x00 || JCS(envelope))`` (RFC 6962 §2.1). :func:`verify_bundle` runs these checks and reports each
one's state (``ok``, ``failed`` or ``skipped``) with a message:

* ``keys`` — the key set (the bundle's own, or one the caller trusts) parses and ids match their keys;
* ``signature`` — the envelope's Ed25519 signature over the DSSE PAE verifies with a key of the set;
* ``statement`` — the payload is an in-toto Statement v1 (payloadType ``application/vnd.in-toto+json``);
* ``subjects`` — each given file's SHA-256 is the digest of one of the statement's subjects (skipped when no
  file is given);
* ``checkpoint`` — the checkpoint is signed by a key of the set;
* ``inclusion`` — the envelope's leaf hash, at its index, verifies against the checkpoint's root through the
  inclusion proof (RFC 9162 §2.1.3.2);
* ``consistency`` — with an earlier checkpoint the caller pinned (``since``): the bundle's log is an append-only
  extension of it (RFC 6962 §2.1.2 consistency proof, from the bundle's ``consistency_proof`` or given), so a log
  rewritten after the pinned checkpoint fails here even when every signature verifies (skipped without one);
* ``trust`` — whose key set the signatures were checked with. ``ok`` with a key set the caller gave (see
  :mod:`workers.verify.trust`); ``unpinned`` when the bundle verifies only with the key set it carries itself,
  which proves nothing (anyone can make a key and put it in a bundle). :attr:`Report.verdict` is then
  ``UNPINNED``, not ``VERIFIED``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workers.verify import checkpoint as cp
from workers.verify import dsse, jcs, keylog, merkle
from workers.verify import note as vnote
from workers.verify import statement as st
from workers.verify.keys import parse_key_set

BUNDLE_MEDIA_TYPE = "application/vnd.audit-portal.bundle+json;version=1"
CHECK_NAMES = (
    "keys",
    "signature",
    "statement",
    "subjects",
    "checkpoint",
    "inclusion",
    "consistency",
    "witnesses",
    "trust",
)
OK, FAILED, SKIPPED, UNPINNED = "ok", "failed", "skipped", "unpinned"
VERIFIED, NOT_VERIFIED, UNPINNED_VERDICT = "VERIFIED", "NOT VERIFIED", "UNPINNED"


@dataclass
class Check:
    name: str
    state: str
    message: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    statement: dict | None = None

    @property
    def ok(self) -> bool:
        """Every check passed (or was skipped) with a key set the caller trusts."""
        return all(c.state not in (FAILED, UNPINNED) for c in self.checks)

    @property
    def verdict(self) -> str:
        if self.failed:
            return NOT_VERIFIED
        return UNPINNED_VERDICT if any(c.state == UNPINNED for c in self.checks) else VERIFIED

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.state == FAILED]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def add(self, name: str, state: str, message: str) -> None:
        self.checks.append(Check(name, state, message))

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "verdict": self.verdict,
            "checks": [asdict(c) for c in self.checks],
            "failed": [c.name for c in self.failed],
        }


def envelope_leaf(envelope: dict) -> bytes:
    """The log leaf of an envelope: its RFC 8785 canonical JSON bytes."""
    return jcs.canonical(envelope)


def sign_statement(statement: dict, private_key, keyid: str) -> dict:
    """The DSSE envelope (payloadType ``application/vnd.in-toto+json``) of a statement's canonical JSON."""
    return dsse.sign(jcs.canonical(st.check(statement)), dsse.INTOTO_PAYLOAD_TYPE, private_key, keyid)


def build_bundle(
    envelope: dict, *, log_index: int, integrated_time, leaf_hashes: list[bytes], checkpoint: dict, keys: dict
) -> dict:
    """A bundle for the entry at ``log_index`` with its inclusion proof in the tree of ``leaf_hashes`` (whose size
    must be the checkpoint's). The bundle records the leaf hash *the log holds*; :func:`verify_bundle` recomputes
    it from the envelope, so a log whose stored envelope no longer matches its leaf is caught there."""
    return {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "envelope": envelope,
        "log_entry": {
            "log_index": log_index,
            "leaf_hash": leaf_hashes[log_index].hex(),
            "integrated_time": integrated_time,
        },
        "inclusion_proof": {
            "log_index": log_index,
            "tree_size": len(leaf_hashes),
            "root_hash": merkle.root(leaf_hashes).hex(),
            "hashes": [h.hex() for h in merkle.inclusion_proof(log_index, leaf_hashes)],
        },
        "checkpoint": checkpoint,
        "keys": keys,
    }


def file_sha256(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _hex_list(values) -> list[bytes]:
    if not isinstance(values, list):
        raise ValueError("hashes is not a list")
    out = [bytes.fromhex(v) for v in values]
    if any(len(h) != merkle.HASH_SIZE for h in out):
        raise ValueError("a proof hash is not 32 bytes")
    return out


def verify_bundle(
    bundle,
    *,
    files=(),
    checkpoint=None,
    keys=None,
    file_digests: dict | None = None,
    keys_source: str = "the key set given",
    since=None,
    consistency=None,
    witnesses=(),
    min_witnesses: int = 0,
) -> Report:
    """Run every check on ``bundle`` (a dict). ``files``: local paths whose SHA-256 must each be a subject digest;
    ``file_digests``: name → precomputed hex digest, checked the same way (the portal passes its stored files'
    digests here). ``checkpoint``: a checkpoint envelope to use instead of the bundle's. ``keys``: the key set the
    caller trusts (``keys_source`` says where it came from); without one the bundle's own key set is used and the
    verdict is at best ``UNPINNED``. ``since``: an earlier checkpoint envelope the log must extend;
    ``consistency``: the consistency proof ``{"first", "second", "hashes"}`` to use instead of the bundle's.
    ``witnesses``: verifier keys (C2SP ``name+hash+base64``, cosignature/v1) of witnesses the caller pinned;
    ``min_witnesses``: how many of them must have cosigned the bundle's checkpoint note (k of n)."""
    w = (list(witnesses), min_witnesses)
    wanted = {str(Path(p).name): file_sha256(p) for p in files}
    wanted.update(file_digests or {})
    if not isinstance(bundle, dict):
        bundle = {}
    if keys is None:
        report = _checks(bundle, wanted, checkpoint, None, since, consistency, w=w)
        if not report.failed:
            report.add(
                "trust",
                UNPINNED,
                "verified only with the key set inside the bundle, which anyone can make: "
                "pin the portal's key set (--keys KEYS.json, AUDIT_VERIFY_KEYS or "
                "--pin-keys KEYS.json; see docs/verify.md)",
            )
        return report
    report = _checks(bundle, wanted, checkpoint, keys, since, consistency, keys_source, w=w)
    if not report.failed:
        report.add("trust", OK, f"signatures checked with the pinned key set {keys_source}")
        return report
    if {c.name for c in report.failed} & {"keys", "signature", "checkpoint"}:
        enclosed = _checks(bundle, wanted, checkpoint, None, since, consistency, w=w)
        if not enclosed.failed:
            signer = ", ".join(
                sorted(
                    {
                        s.get("keyid", "?")[:16] + "…"
                        for s in (bundle.get("envelope") or {}).get("signatures") or []
                        if isinstance(s, dict)
                    }
                )
            )
            enclosed.add(
                "trust",
                UNPINNED,
                f"signed by key {signer}, which the pinned key set {keys_source} does not "
                "hold: it verifies only with the key set inside the bundle, which anyone "
                "can make. If the portal rotated its key, pin its current key set "
                "(--pin-keys) and verify again",
            )
            return enclosed
    return report


def _checks(
    bundle: dict,
    wanted: dict,
    checkpoint,
    keys,
    since,
    consistency,
    key_source: str = "the bundle's key set",
    w=((), 0),
) -> Report:
    report = Report()
    envelope = bundle.get("envelope") if "envelope" in bundle else (bundle if "payloadType" in bundle else None)
    public_keys, entries = _check_keys(report, keys if keys is not None else bundle.get("keys"), key_source)
    signer = _check_signature_and_statement(report, envelope, public_keys, entries)
    _check_subjects(report, wanted)
    head = _check_checkpoint(report, checkpoint if checkpoint is not None else bundle.get("checkpoint"), public_keys)
    _check_inclusion(report, bundle, envelope, head)
    _consistency(
        report, head, since, consistency if consistency is not None else bundle.get("consistency_proof"), public_keys
    )
    _witnesses(report, head, bundle.get("checkpoint_note"), public_keys, *w)
    _key_log(report, bundle, head, signer)
    return report


def _check_keys(report: Report, key_set, key_source: str) -> tuple[dict, dict]:
    """The ``keys`` check: (public keys by key id, key-set entries by key id); both empty when the set is unusable."""
    try:
        entries = parse_key_set(key_set)
        public_keys = {kid: key for kid, (key, _) in entries.items()}
        if not public_keys:
            raise dsse.EnvelopeError("it holds no Ed25519 key")
        report.add("keys", OK, f"{len(public_keys)} key(s) from {key_source}")
    except (dsse.EnvelopeError, ValueError) as exc:
        public_keys, entries = {}, {}
        report.add("keys", FAILED, f"{key_source} is unusable: {exc}")
    return public_keys, entries


def _check_signature_and_statement(report: Report, envelope, public_keys: dict, entries: dict):
    """The ``signature`` and ``statement`` checks; sets ``report.statement`` when the payload is a readable
    statement (even under a bad signature, so the subjects can still be named). Returns the signer's key id."""
    payload_type = payload = signer = None
    try:
        payload_type, payload, keyid = dsse.verify(envelope, public_keys)
        signer = keyid
        status = entries[keyid][1].get("status") or "active"
        report.add("signature", OK, f"Ed25519 signature by key {keyid} ({status}) verifies over the DSSE PAE")
    except dsse.EnvelopeError as exc:
        report.add("signature", FAILED, f"the certificate's signature does not verify: {exc}")
        try:
            payload_type, payload, _ = dsse.parse(envelope)
        except dsse.EnvelopeError:
            pass
    try:
        if payload_type != dsse.INTOTO_PAYLOAD_TYPE:
            raise st.StatementError(f"payloadType is {payload_type!r}, not {dsse.INTOTO_PAYLOAD_TYPE}")
        report.statement = st.check(json.loads(payload))
        report.add(
            "statement",
            OK,
            f"in-toto Statement v1, predicateType {report.statement['predicateType']}, "
            f"{len(report.statement['subject'])} subject(s)",
        )
    except (st.StatementError, ValueError, TypeError) as exc:
        report.add("statement", FAILED, f"the payload is not an in-toto Statement v1: {exc}")
    return signer


def _check_subjects(report: Report, wanted: dict) -> None:
    """The ``subjects`` check: every file given (name -> sha256) is a subject of the statement."""
    if not wanted:
        report.add("subjects", SKIPPED, "no file given: pass --file PATH for each audited file to check its digest")
        return
    if report.statement is None:
        report.add("subjects", FAILED, "there is no readable statement to compare the files with")
        return
    digests = {s["digest"]["sha256"]: s.get("name", "") for s in report.statement["subject"]}
    bad = [
        f"{name} (sha256 {digest}) is not a subject of this certificate"
        for name, digest in wanted.items()
        if digest not in digests
    ]
    if bad:
        listed = ", ".join(f"{n or '?'} = {d}" for d, n in digests.items())
        report.add("subjects", FAILED, "; ".join(bad) + f" — the subjects are: {listed}")
    else:
        report.add("subjects", OK, f"{len(wanted)} file(s) match subject digests: {', '.join(sorted(wanted))}")


def _check_checkpoint(report: Report, cp_env, public_keys: dict):
    """The ``checkpoint`` check: the opened checkpoint (its head), or None when it does not verify."""
    try:
        if cp_env is None:
            raise dsse.EnvelopeError("there is no checkpoint")
        head = cp.open_checkpoint(cp_env, public_keys)
    except dsse.EnvelopeError as exc:
        report.add("checkpoint", FAILED, f"the log checkpoint does not verify: {exc}")
        return None
    report.add(
        "checkpoint",
        OK,
        f"log {head.get('origin')!r} at tree size {head['tree_size']}, root "
        f"{head['root_hash'].hex()}, signed by key {head['keyid']}",
    )
    return head


def _check_inclusion(report: Report, bundle: dict, envelope, head) -> None:
    """The ``inclusion`` check: the envelope's leaf is in the checkpoint's tree (RFC 6962 proof)."""
    proof = bundle.get("inclusion_proof")
    try:
        if envelope is None:
            raise ValueError("there is no envelope")
        if not isinstance(proof, dict):
            raise ValueError("the file has no inclusion proof (download the certificate bundle, not the envelope)")
        leaf = merkle.leaf_hash(envelope_leaf(envelope))
        logged = (bundle.get("log_entry") or {}).get("leaf_hash")
        if logged is not None and logged != leaf.hex():
            raise ValueError(f"the envelope hashes to leaf {leaf.hex()}, the log entry records {logged}")
        if head is None:
            raise ValueError("there is no verified checkpoint to prove inclusion against")
        index, size = proof.get("log_index"), proof.get("tree_size")
        if size != head["tree_size"]:
            raise ValueError(
                f"the proof is for tree size {size}, the checkpoint is for tree size "
                f"{head['tree_size']} (download the bundle with ?tree_size={head['tree_size']})"
            )
        if not isinstance(index, int) or not merkle.verify_inclusion(
            leaf, index, size, _hex_list(proof.get("hashes")), head["root_hash"]
        ):
            raise ValueError(
                f"leaf {leaf.hex()} at index {index} does not verify against root "
                f"{head['root_hash'].hex()} of tree size {size}"
            )
        report.add(
            "inclusion",
            OK,
            f"entry {index} is in the log of size {size} (RFC 6962 inclusion proof, {len(proof['hashes'])} hashes)",
        )
    except (ValueError, TypeError) as exc:
        report.add("inclusion", FAILED, f"the transparency-log inclusion proof does not verify: {exc}")


def _key_log(report: Report, bundle: dict, head, signer) -> None:
    """With the bundle's ``key_events`` (the log's key introductions, rotations and retirements, each with its
    inclusion proof in the checkpoint's tree): the signer of the certificate and of the checkpoint must be keys the
    log introduced, active at the certificate's index — else the ``keys`` check fails naming the key. Bundles from
    before key events carry none and are checked as before."""
    events = bundle.get("key_events")
    if events is None or head is None:
        return
    check = report.check("keys")
    try:
        if not isinstance(events, list):
            raise ValueError("key_events is not a list")
        entries = []
        for e in events:
            leaf = merkle.leaf_hash(envelope_leaf(e["envelope"]))
            if not merkle.verify_inclusion(
                leaf, e["log_index"], head["tree_size"], _hex_list(e["hashes"]), head["root_hash"]
            ):
                raise ValueError(
                    f"key event {e['log_index']} is not in the log of the checkpoint (its inclusion proof fails)"
                )
            entries.append((e["log_index"], e["envelope"]))
        history = keylog.derive(entries)
        if history.problems:
            raise ValueError("the log's key events do not verify: " + "; ".join(history.problems))
        index = (bundle.get("inclusion_proof") or {}).get("log_index")
        for who, kid in (("certificate", signer), ("checkpoint", head.get("keyid"))):
            if kid is None:
                continue
            entry = history.keys.get(kid)
            if entry is None:
                raise ValueError(f"key {kid} signed the {who} but the log never introduced it")
            retired = entry.get("retired_at_index")
            if (
                who == "certificate"
                and isinstance(index, int)
                and (index < entry["introduced_at_index"] or (retired is not None and index > retired))
            ):
                raise ValueError(
                    f"key {kid} signed entry {index} but was active in the log only from entry "
                    f"{entry['introduced_at_index']}" + (f" to {retired}" if retired is not None else "")
                )
        check.message += f"; every signer introduced in the log ({len(entries)} key event(s), inclusion-proved)"
    except (ValueError, TypeError, KeyError) as exc:
        check.state, check.message = FAILED, f"key history: {exc}"


def _witnesses(report: Report, head, cosigned, public_keys, witnesses, k: int) -> None:
    """The ``witnesses`` check: at least ``k`` of the pinned witnesses cosigned (C2SP tlog-cosignature) the C2SP
    checkpoint note of the very tree head the inclusion was proved against, itself signed by a trusted log key."""
    if not witnesses and not k:
        report.add(
            "witnesses",
            SKIPPED,
            "no witness pinned (--witness KEY --min-witnesses k): nobody outside the "
            "portal vouches that it showed this checkpoint to everyone",
        )
        return
    try:
        pinned = [vnote.parse_verifier(text) for text in witnesses]
        if k > len(pinned):
            raise ValueError(f"--min-witnesses {k} is more than the {len(pinned)} witness key(s) given")
        if head is None:
            raise ValueError("there is no verified checkpoint for witnesses to have cosigned")
        if not isinstance(cosigned, str):
            raise ValueError(
                "the bundle has no checkpoint note (bundles from before C2SP checkpoints carry none: download it again)"
            )
        origin = cosigned.split("\n", 1)[0]
        body = None
        for key in public_keys.values():
            try:
                body = vnote.open_checkpoint(cosigned, vnote.verifier(origin, key))
                break
            except vnote.NoteError:
                continue
        if body is None:
            raise ValueError("the checkpoint note is not signed by a key of the trusted key set")
        if (body["tree_size"], body["root_hash"]) != (head["tree_size"], head["root_hash"]):
            raise ValueError(
                f"the checkpoint note is of tree size {body['tree_size']}, not the checkpoint's "
                f"{head['tree_size']} (or its root differs)"
            )
        got = vnote.verify_cosignatures(cosigned, pinned)
        if len(got) < k:
            raise ValueError(
                f"{len(got)} of the {len(pinned)} pinned witnesses cosigned tree size {body['tree_size']}, {k} required"
            )
        names = ", ".join(sorted(t.split("+")[0] for t in got)) or "none"
        report.add(
            "witnesses",
            OK,
            f"{len(got)} of {len(pinned)} pinned witnesses cosigned tree size "
            f"{body['tree_size']} ({names}; {k} required)",
        )
    except (ValueError, vnote.NoteError) as exc:
        report.add("witnesses", FAILED, f"the witness cosignatures do not suffice: {exc}")


def _consistency(report: Report, head, since, proof, public_keys) -> None:
    """The ``consistency`` check: is the bundle's log (checkpoint ``head``) an append-only extension of the pinned
    checkpoint ``since`` (or the other way round when the pinned one is the later)?"""
    if since is None:
        report.add(
            "consistency",
            SKIPPED,
            "no earlier checkpoint pinned (--since CHECKPOINT.json or "
            "--save-checkpoint): a log rewritten wholesale is not detectable",
        )
        return
    try:
        old = cp.open_checkpoint(since, public_keys)
    except dsse.EnvelopeError as exc:
        report.add("consistency", FAILED, f"the pinned checkpoint does not verify: {exc}")
        return
    if head is None:
        report.add("consistency", FAILED, "there is no verified checkpoint to compare the pinned one with")
        return
    m, n = old["tree_size"], head["tree_size"]
    try:
        if old.get("origin") != head.get("origin"):
            raise ValueError(
                f"the pinned checkpoint is of log {old.get('origin')!r}, the bundle's of {head.get('origin')!r}"
            )
        if m == n:
            if old["root_hash"] != head["root_hash"]:
                raise ValueError(
                    f"both are of tree size {n} but their roots differ ({old['root_hash'].hex()} pinned, "
                    f"{head['root_hash'].hex()} now): the log was rewritten"
                )
        elif m and n:
            first, second = (old, head) if m < n else (head, old)
            if not isinstance(proof, dict) or (proof.get("first"), proof.get("second")) != (
                first["tree_size"],
                second["tree_size"],
            ):
                raise ValueError(
                    f"no consistency proof from tree size {first['tree_size']} to "
                    f"{second['tree_size']} (download the bundle with ?consistency_from={m}, or pass "
                    f"--consistency with /api/v1/log/consistency/?first={first['tree_size']}&second="
                    f"{second['tree_size']})"
                )
            if not merkle.verify_consistency(
                first["tree_size"],
                second["tree_size"],
                _hex_list(proof.get("hashes")),
                first["root_hash"],
                second["root_hash"],
            ):
                raise ValueError(
                    f"the log of tree size {second['tree_size']} does not extend the one of size "
                    f"{first['tree_size']} (root {first['root_hash'].hex()}): entries below "
                    f"{first['tree_size']} were rewritten"
                )
        report.add(
            "consistency",
            OK,
            f"the log extends the pinned checkpoint of tree size {m}"
            if m <= n
            else f"the pinned checkpoint of tree size {m} extends the bundle's log (RFC 6962 consistency proof)",
        )
    except (ValueError, TypeError) as exc:
        report.add("consistency", FAILED, f"the log is not consistent with the pinned checkpoint: {exc}")
