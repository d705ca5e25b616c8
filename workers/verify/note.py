"""C2SP signed notes, transparency-log checkpoints and witness cosignatures — the formats of the transparency-log
ecosystem (https://c2sp.org/signed-note, https://c2sp.org/tlog-checkpoint, https://c2sp.org/tlog-cosignature), the
semantics of Go's ``golang.org/x/mod/sumdb/note`` (tested against its published vectors: tests/verify/test_note.py).

A **signed note** is UTF-8 text ending in a newline, a blank line, then one signature line per signer::

    <text>\\n
    \\n
    — <key name> base64(<4-byte key id> || <signature>)\\n

(``—`` is U+2014 EM DASH then a space.) The key id of an Ed25519 key is the first 4 bytes of
``SHA-256(name || 0x0A || 0x01 || public key)``; its *verifier key* string is
``<name>+<key id, 8 hex digits>+base64(0x01 || public key)`` and the signer key
``PRIVATE+KEY+<name>+<key id>+base64(0x01 || seed)``. The signature is Ed25519 over the text (without the blank line).

A **checkpoint** is the note text ``<origin>\\n<tree size>\\n<base64 root hash>\\n[extension lines]``, signed by the
log with key name = origin.

A **cosignature** (``cosignature/v1``) is a witness's signature line on the same note: key type byte 0x04 (key id
over ``name || 0x0A || 0x04 || key``) and signature bytes ``key id || timestamp (8-byte big-endian seconds) ||
Ed25519("cosignature/v1\\ntime <timestamp>\\n" || checkpoint text)``: the witness says *at that time it had verified
the checkpoint and that the log was consistent with every earlier checkpoint it had seen*.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALG_ED25519 = 0x01
ALG_COSIGNATURE_V1 = 0x04
SIG_PREFIX = "\u2014 "
MAX_SIGNATURES = 100
NAME_RE = re.compile(r"^[^\s+]+$")


class NoteError(ValueError):
    """A malformed or unverifiable note, key or checkpoint; the message says what."""


def _raw(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _check_name(name: str) -> str:
    if not name or not NAME_RE.match(name) or not name.isprintable():
        raise NoteError(f"key name {name!r}: non-empty, no spaces and no '+'")
    return name


def key_id(name: str, alg: int, public_raw: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([alg]) + public_raw).digest()[:4]


def valid_name(text: str) -> str:
    """A key name made from ``text`` (whitespace and '+' become '-'), e.g. for an origin with spaces."""
    return re.sub(r"[\s+]+", "-", text.strip()) or "log"


@dataclass(frozen=True)
class Verifier:
    name: str
    key_hash: bytes
    alg: int
    public_key: Ed25519PublicKey

    @property
    def text(self) -> str:
        return (
            f"{self.name}+{self.key_hash.hex()}+{base64.b64encode(bytes([self.alg]) + _raw(self.public_key)).decode()}"
        )

    def verify(self, message: bytes, sig: bytes) -> bool:
        try:
            self.public_key.verify(sig, message)
            return True
        except InvalidSignature:
            return False


def verifier(name: str, public_key: Ed25519PublicKey, alg: int = ALG_ED25519) -> Verifier:
    return Verifier(_check_name(name), key_id(name, alg, _raw(public_key)), alg, public_key)


def verifier_key(name: str, public_key: Ed25519PublicKey, alg: int = ALG_ED25519) -> str:
    """The verifier key string (what a user pins)."""
    return verifier(name, public_key, alg).text


def parse_verifier(text: str) -> Verifier:
    """A verifier key string ``name+hash+base64(alg || key)``; Ed25519 (0x01) or cosignature/v1 (0x04)."""
    parts = text.strip().split("+", 2)  # the base64 key may itself hold '+'
    if len(parts) != 3:
        raise NoteError(f"malformed verifier key {text!r}")
    name, hash_hex, key_b64 = parts
    _check_name(name)
    if not re.fullmatch(r"[0-9a-f]{8}", hash_hex):
        raise NoteError(f"verifier key {text!r}: the key id is not 8 lowercase hex digits")
    try:
        raw = base64.b64decode(key_b64, validate=True)
    except binascii.Error:
        raise NoteError(f"verifier key {text!r}: the key is not base64") from None
    if len(raw) != 33 or raw[0] not in (ALG_ED25519, ALG_COSIGNATURE_V1):
        raise NoteError(f"verifier key {text!r}: not an Ed25519 (0x01) or cosignature/v1 (0x04) key")
    if key_id(name, raw[0], raw[1:]) != bytes.fromhex(hash_hex):
        raise NoteError(f"verifier key {text!r}: the key id does not match the key")
    return Verifier(name, bytes.fromhex(hash_hex), raw[0], Ed25519PublicKey.from_public_bytes(raw[1:]))


def signer_key(name: str, private_key: Ed25519PrivateKey, alg: int = ALG_ED25519) -> str:
    seed = private_key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    kh = key_id(_check_name(name), alg, _raw(private_key.public_key()))
    return f"PRIVATE+KEY+{name}+{kh.hex()}+{base64.b64encode(bytes([alg]) + seed).decode()}"


def parse_signer(text: str) -> tuple[str, Ed25519PrivateKey, int]:
    parts = text.strip().split("+", 4)
    if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
        raise NoteError("malformed signer key")
    name, hash_hex, key_b64 = parts[2:]
    raw = base64.b64decode(key_b64)
    if len(raw) != 33 or raw[0] not in (ALG_ED25519, ALG_COSIGNATURE_V1):
        raise NoteError("signer key: not an Ed25519 key")
    private = Ed25519PrivateKey.from_private_bytes(raw[1:])
    if key_id(_check_name(name), raw[0], _raw(private.public_key())).hex() != hash_hex:
        raise NoteError("signer key: the key id does not match the key")
    return name, private, raw[0]


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteError("the note text must end in a newline")


def signature_line(name: str, key_hash: bytes, sig: bytes) -> str:
    return f"{SIG_PREFIX}{name} {base64.b64encode(key_hash + sig).decode()}\n"


def sign(text: str, name: str, private_key: Ed25519PrivateKey) -> str:
    """The signed note of ``text`` with one Ed25519 signature."""
    _check_text(text)
    kh = key_id(_check_name(name), ALG_ED25519, _raw(private_key.public_key()))
    return text + "\n" + signature_line(name, kh, private_key.sign(text.encode()))


def split(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    """(text, [(key name, signature bytes incl. the 4-byte key id)]) of a signed note; :class:`NoteError` if it is
    malformed (as Go's ``note.Open``: the signature block follows the last blank line, every line of it is a
    signature line, at most 100)."""
    if not isinstance(note, str) or not note.endswith("\n"):
        raise NoteError("malformed note: it must end in a newline")
    cut = note.rfind("\n\n")
    if cut < 0:
        raise NoteError("malformed note: no blank line before the signatures")
    text, block = note[: cut + 1], note[cut + 2 :]
    lines = block.split("\n")[:-1]
    if not lines:
        raise NoteError("malformed note: no signatures")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"malformed note: more than {MAX_SIGNATURES} signatures")
    sigs = []
    for line in lines:
        if not line.startswith(SIG_PREFIX):
            raise NoteError(f"malformed note: {line!r} is not a signature line")
        name, _, b64 = line[len(SIG_PREFIX) :].partition(" ")
        try:
            raw = base64.b64decode(b64, validate=True)
        except binascii.Error:
            raise NoteError(f"malformed note: the signature of {name} is not base64") from None
        if not name or " " in b64 or len(raw) < 5:
            raise NoteError(f"malformed note: signature line {line!r}")
        sigs.append((name, raw))
    return text, sigs


def open_note(note: str, verifiers: list[Verifier]) -> tuple[str, list[Verifier]]:
    """Verify ``note`` with the known ``verifiers`` (Ed25519 note signatures). Returns (text, the verifiers whose
    signatures verified). Signatures by unknown keys are ignored; a known key whose signature does not verify is an
    error; at least one known signature must verify (Go's ``note.Open`` semantics)."""
    text, sigs = split(note)
    known = {(v.name, v.key_hash): v for v in verifiers if v.alg == ALG_ED25519}
    good, seen = [], set()
    for name, raw in sigs:
        v = known.get((name, raw[:4]))
        if v is None:
            continue
        if (name, raw[:4]) in seen:
            continue
        if not v.verify(text.encode(), raw[4:]):
            raise NoteError(f"the signature of {name}+{raw[:4].hex()} does not verify")
        seen.add((name, raw[:4]))
        good.append(v)
    if not good:
        raise NoteError("no signature by a known key (the note is unverified)")
    return text, good


# --- checkpoints -----------------------------------------------------------------------------------------------------


def checkpoint_text(origin: str, tree_size: int, root_hash: bytes, extensions: tuple[str, ...] = ()) -> str:
    if not origin or "\n" in origin:
        raise NoteError("the origin must be one non-empty line")
    if len(root_hash) != 32 or tree_size < 0:
        raise NoteError("a checkpoint needs a 32-byte root hash and a size >= 0")
    return "".join(f"{line}\n" for line in (origin, str(tree_size), base64.b64encode(root_hash).decode(), *extensions))


def parse_checkpoint(text: str) -> dict:
    """``{"origin", "tree_size", "root_hash" (bytes), "extensions"}`` of a checkpoint's note text."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise NoteError("malformed checkpoint: origin, size and root hash lines are needed")
    origin, size, root = lines[0], lines[1], lines[2]
    if not origin or not re.fullmatch(r"0|[1-9][0-9]*", size):
        raise NoteError("malformed checkpoint: bad origin or tree size")
    try:
        root_hash = base64.b64decode(root, validate=True)
    except binascii.Error:
        raise NoteError("malformed checkpoint: the root hash is not base64") from None
    if len(root_hash) != 32:
        raise NoteError("malformed checkpoint: the root hash is not 32 bytes")
    return {"origin": origin, "tree_size": int(size), "root_hash": root_hash, "extensions": lines[3:-1]}


def open_checkpoint(note: str, log_verifier: Verifier) -> dict:
    """Verify a checkpoint note against the log's key (whose name must be the origin) and parse it."""
    text, _ = open_note(note, [log_verifier])
    body = parse_checkpoint(text)
    if body["origin"] != log_verifier.name:
        raise NoteError(f"the checkpoint's origin {body['origin']!r} is not the log key's name {log_verifier.name!r}")
    return {**body, "text": text}


# --- cosignatures ----------------------------------------------------------------------------------------------------


def cosignature_message(text: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n".encode() + text.encode()


def cosign(text: str, name: str, private_key: Ed25519PrivateKey, timestamp: int) -> str:
    """A witness's cosignature line (tlog-cosignature, cosignature/v1) on the checkpoint ``text``."""
    kh = key_id(_check_name(name), ALG_COSIGNATURE_V1, _raw(private_key.public_key()))
    sig = private_key.sign(cosignature_message(text, timestamp))
    return signature_line(name, kh, struct.pack(">Q", timestamp) + sig)


def verify_cosignatures(note: str, witnesses: list[Verifier]) -> dict[str, int]:
    """The pinned witnesses (cosignature/v1 keys) whose cosignature on ``note`` verifies: verifier text →
    timestamp. A cosignature that names a pinned key but does not verify is an error."""
    text, sigs = split(note)
    known = {(w.name, w.key_hash): w for w in witnesses if w.alg == ALG_COSIGNATURE_V1}
    out = {}
    for name, raw in sigs:
        w = known.get((name, raw[:4]))
        if w is None:
            continue
        if len(raw) != 4 + 8 + 64:
            raise NoteError(f"the cosignature of {name} is not {4 + 8 + 64} bytes")
        (timestamp,) = struct.unpack(">Q", raw[4:12])
        if not w.verify(cosignature_message(text, timestamp), raw[12:]):
            raise NoteError(f"the cosignature of witness {name}+{raw[:4].hex()} does not verify")
        out[w.text] = timestamp
    return out


def add_signatures(note: str, lines: list[str]) -> str:
    """``note`` with the signature ``lines`` added (those it already holds are not repeated)."""
    text, _ = split(note)
    have = note[len(text) + 1 :].splitlines(keepends=True)
    for line in lines:
        line = line if line.endswith("\n") else line + "\n"
        if line not in have:
            have.append(line)
    return text + "\n" + "".join(have)


# --- the tlog-witness add-checkpoint request -------------------------------------------------------------------------


def add_checkpoint_body(old_size: int, proof: list[bytes], signed_note: str) -> str:
    """``old <size>``, one base64 consistency-proof hash a line, a blank line, then the checkpoint note
    (https://c2sp.org/tlog-witness, add-checkpoint)."""
    return f"old {old_size}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + signed_note


def parse_add_checkpoint(body: str) -> tuple[int, list[bytes], str]:
    head, sep, signed_note = body.partition("\n\n")
    lines = head.split("\n")
    if not sep or not lines or not re.fullmatch(r"old (0|[1-9][0-9]*)", lines[0]):
        raise NoteError(
            "malformed add-checkpoint request: it starts with 'old <size>', then proof lines, a blank line"
            " and the checkpoint"
        )
    proof = []
    for line in lines[1:]:
        try:
            h = base64.b64decode(line, validate=True)
        except binascii.Error:
            raise NoteError("malformed add-checkpoint request: a proof line is not base64") from None
        if len(h) != 32:
            raise NoteError("malformed add-checkpoint request: a proof hash is not 32 bytes")
        proof.append(h)
    if len(proof) > 63:
        raise NoteError("malformed add-checkpoint request: more than 63 proof hashes")
    return int(lines[0][4:]), proof, signed_note
