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
  inclusion proof (RFC 9162 §2.1.3.2).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workers.verify import checkpoint as cp
from workers.verify import dsse, jcs, merkle
from workers.verify import statement as st
from workers.verify.keys import parse_key_set

BUNDLE_MEDIA_TYPE = "application/vnd.audit-portal.bundle+json;version=1"
CHECK_NAMES = ("keys", "signature", "statement", "subjects", "checkpoint", "inclusion")
OK, FAILED, SKIPPED = "ok", "failed", "skipped"


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
        return all(c.state != FAILED for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.state == FAILED]

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def add(self, name: str, state: str, message: str) -> None:
        self.checks.append(Check(name, state, message))

    def as_dict(self) -> dict:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks],
                "failed": [c.name for c in self.failed]}


def envelope_leaf(envelope: dict) -> bytes:
    """The log leaf of an envelope: its RFC 8785 canonical JSON bytes."""
    return jcs.canonical(envelope)


def sign_statement(statement: dict, private_key, keyid: str) -> dict:
    """The DSSE envelope (payloadType ``application/vnd.in-toto+json``) of a statement's canonical JSON."""
    return dsse.sign(jcs.canonical(st.check(statement)), dsse.INTOTO_PAYLOAD_TYPE, private_key, keyid)


def build_bundle(envelope: dict, *, log_index: int, integrated_time, leaf_hashes: list[bytes], checkpoint: dict,
                 keys: dict) -> dict:
    """A bundle for the entry at ``log_index`` with its inclusion proof in the tree of ``leaf_hashes`` (whose size
    must be the checkpoint's). The bundle records the leaf hash *the log holds*; :func:`verify_bundle` recomputes
    it from the envelope, so a log whose stored envelope no longer matches its leaf is caught there."""
    return {"mediaType": BUNDLE_MEDIA_TYPE, "envelope": envelope,
            "log_entry": {"log_index": log_index, "leaf_hash": leaf_hashes[log_index].hex(),
                          "integrated_time": integrated_time},
            "inclusion_proof": {"log_index": log_index, "tree_size": len(leaf_hashes),
                                "root_hash": merkle.root(leaf_hashes).hex(),
                                "hashes": [h.hex() for h in merkle.inclusion_proof(log_index, leaf_hashes)]},
            "checkpoint": checkpoint, "keys": keys}


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


def verify_bundle(bundle, *, files=(), checkpoint=None, keys=None, file_digests: dict | None = None) -> Report:
    """Run every check on ``bundle`` (a dict). ``files``: local paths whose SHA-256 must each be a subject digest;
    ``file_digests``: name → precomputed hex digest, checked the same way (the portal passes its stored files'
    digests here). ``checkpoint``: a checkpoint envelope to use instead of the bundle's; ``keys``: a key set to
    trust instead of the bundle's."""
    report = Report()
    if not isinstance(bundle, dict):
        bundle = {}
    envelope = bundle.get("envelope") if "envelope" in bundle else (bundle if "payloadType" in bundle else None)

    # keys
    key_source = "the key set given" if keys is not None else "the bundle's key set"
    try:
        entries = parse_key_set(keys if keys is not None else bundle.get("keys"))
        public_keys = {kid: key for kid, (key, _) in entries.items()}
        if not public_keys:
            raise dsse.EnvelopeError("it holds no Ed25519 key")
        report.add("keys", OK, f"{len(public_keys)} key(s) from {key_source}")
    except (dsse.EnvelopeError, ValueError) as exc:
        public_keys, entries = {}, {}
        report.add("keys", FAILED, f"{key_source} is unusable: {exc}")

    # signature + statement
    payload_type = payload = None
    try:
        payload_type, payload, keyid = dsse.verify(envelope, public_keys)
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
        report.add("statement", OK, f"in-toto Statement v1, predicateType {report.statement['predicateType']}, "
                                    f"{len(report.statement['subject'])} subject(s)")
    except (st.StatementError, ValueError, TypeError) as exc:
        report.add("statement", FAILED, f"the payload is not an in-toto Statement v1: {exc}")

    # subjects
    wanted = {str(Path(p).name): file_sha256(p) for p in files}
    wanted.update(file_digests or {})
    if not wanted:
        report.add("subjects", SKIPPED, "no file given: pass --file PATH for each audited file to check its digest")
    elif report.statement is None:
        report.add("subjects", FAILED, "there is no readable statement to compare the files with")
    else:
        digests = {s["digest"]["sha256"]: s.get("name", "") for s in report.statement["subject"]}
        bad = [f"{name} (sha256 {digest}) is not a subject of this certificate"
               for name, digest in wanted.items() if digest not in digests]
        if bad:
            listed = ", ".join(f"{n or '?'} = {d}" for d, n in digests.items())
            report.add("subjects", FAILED, "; ".join(bad) + f" — the subjects are: {listed}")
        else:
            report.add("subjects", OK, f"{len(wanted)} file(s) match subject digests: {', '.join(sorted(wanted))}")

    # checkpoint
    cp_env = checkpoint if checkpoint is not None else bundle.get("checkpoint")
    head = None
    try:
        if cp_env is None:
            raise dsse.EnvelopeError("there is no checkpoint")
        head = cp.open_checkpoint(cp_env, public_keys)
        report.add("checkpoint", OK, f"log {head.get('origin')!r} at tree size {head['tree_size']}, root "
                                     f"{head['root_hash'].hex()}, signed by key {head['keyid']}")
    except dsse.EnvelopeError as exc:
        report.add("checkpoint", FAILED, f"the log checkpoint does not verify: {exc}")

    # inclusion
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
            raise ValueError(f"the proof is for tree size {size}, the checkpoint is for tree size "
                             f"{head['tree_size']} (download the bundle with ?tree_size={head['tree_size']})")
        if not isinstance(index, int) or not merkle.verify_inclusion(leaf, index, size, _hex_list(proof.get("hashes")),
                                                                     head["root_hash"]):
            raise ValueError(f"leaf {leaf.hex()} at index {index} does not verify against root "
                             f"{head['root_hash'].hex()} of tree size {size}")
        report.add("inclusion", OK, f"entry {index} is in the log of size {size} (RFC 6962 inclusion proof, "
                                    f"{len(proof['hashes'])} hashes)")
    except (ValueError, TypeError) as exc:
        report.add("inclusion", FAILED, f"the transparency-log inclusion proof does not verify: {exc}")
    return report
