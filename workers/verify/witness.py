"""An independent witness of the portal's transparency log: ``python -m workers.verify witness --url URL --state DIR``.

Its own process, its own Ed25519 key and storage (``DIR``: ``witness-key.pem``, ``state.json``, ``checkpoints/``),
no database and no Django. Each round it

1. fetches the log's latest C2SP checkpoint note (``/api/v1/log/checkpoint.note``);
2. fetches the log's key events with inclusion proofs at that tree size (``/api/v1/log/key-events/``), checks every
   proof against the checkpoint's root and derives the key set from them (workers/verify/keylog.py); every key it
   recorded before must still be there, unchanged;
3. refuses the checkpoint unless it is signed by a key introduced that way;
4. checks that the log only grew since the last checkpoint it cosigned (RFC 6962 consistency proof from
   ``/api/v1/log/consistency/``; the same size must have the same root);
5. records the checkpoint and the key set, then cosigns (C2SP tlog-cosignature, cosignature/v1) and posts the
   cosignature to ``/api/v1/log/add-checkpoint`` in the tlog-witness add-checkpoint shape.

A refusal is printed with its reason and the exit status is 1 (``--once``) — the witness never cosigns a checkpoint
that contradicts what it saw. ``--print-key`` prints its verifier key (what the portal's AUDIT_LOG_WITNESS_KEYS and a
verifier's ``--witness`` take).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from workers.verify import keylog, keys as vkeys, merkle, note
from workers.verify.bundle import envelope_leaf


class Refused(Exception):
    """The witness will not cosign this checkpoint; the message says why."""


@dataclass
class Transport:
    """HTTP to the portal: ``get(path) -> (status, bytes)``, ``post(path, body) -> (status, bytes)``."""

    base_url: str
    timeout: float = 20.0

    def _call(self, req) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # the operator's URL
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def get(self, path: str) -> tuple[int, bytes]:
        return self._call(urllib.request.Request(self.base_url.rstrip("/") + path))

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        return self._call(
            urllib.request.Request(
                self.base_url.rstrip("/") + path,
                data=body,
                method="POST",
                headers={"Content-Type": "text/plain; charset=utf-8"},
            )
        )


class Witness:
    def __init__(self, state_dir, name: str = "audit-portal-witness", transport=None):
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.name = name
        self.transport = transport
        self.key = self._load_key()

    # --- storage ----------------------------------------------------------------------------------------------
    def _load_key(self):
        path = self.dir / "witness-key.pem"
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(vkeys.private_pem(vkeys.generate()))
        return vkeys.load_private_pem(path.read_bytes())

    @property
    def verifier_key(self) -> str:
        return note.verifier_key(self.name, self.key.public_key(), note.ALG_COSIGNATURE_V1)

    def state(self) -> dict:
        try:
            return json.loads((self.dir / "state.json").read_text())
        except FileNotFoundError:
            return {}

    def _save(self, state: dict, signed: str, size: int) -> None:
        folder = self.dir / "checkpoints"
        folder.mkdir(exist_ok=True)
        (folder / f"{size:012d}.note").write_text(signed)
        tmp = self.dir / f".state.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, self.dir / "state.json")

    # --- one round --------------------------------------------------------------------------------------------
    def _get(self, path: str) -> bytes:
        status, body = self.transport.get(path)
        if status != 200:
            raise Refused(f"GET {path}: HTTP {status}: {body[:200].decode(errors='replace').strip()}")
        return body

    def check(self, signed: str) -> tuple[dict, dict, list[bytes], str]:
        """Verify ``signed`` (a checkpoint note) against the log's key events and this witness's state. Returns
        (checkpoint body, new state, consistency proof from the old size, old size); raises :class:`Refused`."""
        try:
            text, _ = note.split(signed)
            body = note.parse_checkpoint(text)
        except note.NoteError as exc:
            raise Refused(f"malformed checkpoint: {exc}") from None
        size, root = body["tree_size"], body["root_hash"]
        history = self._key_history(size, root)
        state = self.state()
        _refuse_rewritten_keys(state, history)
        signer = _signer(signed, body, history)
        old = int(state.get("tree_size", 0))
        proof = self._extension_proof(state, body, old)
        new_state = {
            "origin": body["origin"],
            "tree_size": size,
            "root_hash": base64.b64encode(root).decode(),
            "signed_by": signer,
            "keys": {kid: {k: v for k, v in entry.items()} for kid, entry in history.keys.items()},
            "history": [
                *state.get("history", [])[-999:],
                {"tree_size": size, "key_set": sorted(history.keys), "time": int(time.time())},
            ],
        }
        return body, new_state, proof, str(old)

    def _key_history(self, size: int, root: bytes):
        """The log's key history at ``size``, from key events each proven to be in the checkpoint's tree."""
        events = json.loads(self._get(f"/api/v1/log/key-events/?tree_size={size}"))
        if events.get("tree_size") != size:
            raise Refused(f"the key events are for tree size {events.get('tree_size')}, not {size}")
        entries = []
        for e in events.get("events", []):
            leaf = merkle.leaf_hash(envelope_leaf(e["envelope"]))
            proof = [bytes.fromhex(h) for h in e["hashes"]]
            if not merkle.verify_inclusion(leaf, e["log_index"], size, proof, root):
                raise Refused(f"key event {e['log_index']} is not in the checkpoint's tree (inclusion proof fails)")
            entries.append((e["log_index"], e["envelope"]))
        history = keylog.derive(entries)
        if history.problems:
            raise Refused("the log's key events do not verify: " + "; ".join(history.problems))
        return history

    def _extension_proof(self, state: dict, body: dict, old: int) -> list[bytes]:
        """The consistency proof that the checkpoint extends the one last cosigned (none for the first or the same
        size); refuses another origin, a rollback and a fork."""
        size, root = body["tree_size"], body["root_hash"]
        proof: list[bytes] = []
        if state and state.get("origin") != body["origin"]:
            raise Refused(f"origin {body['origin']!r} is not the witnessed log {state.get('origin')!r}")
        if size < old:
            raise Refused(f"the checkpoint of tree size {size} is older than the one cosigned ({old}): a rollback")
        if old and size == old and base64.b64decode(state["root_hash"]) != root:
            raise Refused(f"a different root for tree size {size} than the one cosigned: the log forked")
        if old and size > old:
            data = json.loads(self._get(f"/api/v1/log/consistency/?first={old}&second={size}"))
            proof = [bytes.fromhex(h) for h in data.get("hashes", [])]
            if not merkle.verify_consistency(old, size, proof, base64.b64decode(state["root_hash"]), root):
                raise Refused(
                    f"the log of tree size {size} does not extend the one of size {old} that this witness "
                    "cosigned: entries were rewritten"
                )
        return proof

    def round(self) -> str:
        """Fetch, check, record, cosign, post. Returns what happened; raises :class:`Refused`."""
        signed = self._get("/api/v1/log/checkpoint.note").decode()
        body, new_state, proof, old = self.check(signed)
        text, sigs = note.split(signed)
        # post the log's own signature and this witness's cosignature (not other witnesses' lines it was shown)
        signed = (
            text + "\n" + "".join(note.signature_line(n, raw[:4], raw[4:]) for n, raw in sigs if n == body["origin"])
        )
        line = note.cosign(text, self.name, self.key, int(time.time()))
        self._save(new_state, note.add_signatures(signed, [line]), body["tree_size"])
        status, reply = self.transport.post(
            "/api/v1/log/add-checkpoint",
            note.add_checkpoint_body(int(old), proof, note.add_signatures(signed, [line])).encode(),
        )
        if status != 200:
            return (
                f"cosigned tree size {body['tree_size']}, but the log refused the cosignature: HTTP {status}: "
                f"{reply[:200].decode(errors='replace').strip()}"
            )
        return f"cosigned tree size {body['tree_size']}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workers.verify witness", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="the portal's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--state", required=True, metavar="DIR", help="the witness's own key and storage")
    p.add_argument("--name", default="audit-portal-witness", help="the witness's key name (no spaces, no '+')")
    p.add_argument("--interval", type=float, default=30.0, help="seconds between polls")
    p.add_argument("--once", action="store_true", help="one round, then exit (0 cosigned, 1 refused)")
    p.add_argument("--print-key", action="store_true", help="print the witness's verifier key and exit")
    args = p.parse_args(argv)
    witness = Witness(args.state, args.name, Transport(args.url) if args.url else None)
    if args.print_key:
        print(witness.verifier_key)
        return 0
    if not args.url:
        p.error("--url is required")
    while True:
        try:
            print(witness.round(), flush=True)
            if args.once:
                return 0
        except Refused as exc:
            print(f"REFUSED: {exc}", file=sys.stderr, flush=True)
            if args.once:
                return 1
        except (OSError, ValueError, KeyError) as exc:
            print(f"cannot reach or read the log: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            if args.once:
                return 2
        time.sleep(args.interval)


def _refuse_rewritten_keys(state: dict, history) -> None:
    """Every key recorded with an earlier checkpoint must still be in the log's key history, unchanged."""
    for kid, entry in (state.get("keys") or {}).items():
        if history.keys.get(kid, {}).get("public_key") != entry["public_key"]:
            raise Refused(
                f"key {kid}, recorded with an earlier checkpoint, is no longer in the log's key "
                "history: the key history was rewritten"
            )


def _signer(signed: str, body: dict, history) -> str:
    """The id of the log-introduced key whose signature on the checkpoint note verifies."""
    for kid, public in history.public.items():
        try:
            note.open_checkpoint(signed, note.verifier(body["origin"], public))
            return kid
        except note.NoteError:
            continue
    raise Refused(
        "the checkpoint is not signed by a key the log introduced (claims: "
        + ", ".join(n for n, _ in note.split(signed)[1])
        + ")"
    )
