"""The log's witness: signed checkpoints published *outside* the database, append-only.

Whoever holds the database owner role can disable the append-only triggers, rewrite an entry and, with the signing
key, re-sign every checkpoint — :func:`~audit_portal.attestations.selectors.verify_log` then checks a log that agrees
with itself. What it cannot rewrite is a copy kept elsewhere. After each append commits, its signed checkpoint is
written to ``AUDIT_LOG_WITNESS_DIR`` (default ``var/witness``; point it at storage the database's operators cannot
rewrite: another machine's mount, a WORM / object-lock bucket mounted as a directory, a backup target):

* ``checkpoints/<tree size, 12 digits>.json`` — the checkpoint envelope (RFC 8785 bytes), created exclusively: a file
  is never replaced; a second, different checkpoint for the same size (a fork) is kept beside it as
  ``<size>.conflict-<sha256>.json`` and reported;
* ``keys.json`` — every public key that signed a witnessed checkpoint (merged, never shrunk), so a key removed from
  the database still verifies what it signed.

:func:`check` proves the database's log consistent with every witnessed checkpoint: the Merkle root of the first
``m`` stored entries must equal the witnessed root of size ``m``. With one checkpoint per append, the first mismatch
names the rewritten entry exactly. Publishing failures are logged and do not fail the certificate (it is committed
by then); :func:`check` reports a witness that lags the log.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path

from django.conf import settings

from workers.verify import checkpoint as vcheckpoint
from workers.verify import dsse
from workers.verify.keys import parse_key_set

log = logging.getLogger(__name__)
NAME_RE = re.compile(r"^(\d{12})\.json$")


def witness_dir() -> Path | None:
    value = getattr(settings, "AUDIT_LOG_WITNESS_DIR", "")
    return Path(value) if value else None


def _write_exclusive(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data`` unless it exists; True when written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)  # atomic and exclusive: never replaces an existing file
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def publish(envelope_bytes: bytes, tree_size: int, key_entry: dict) -> None:
    """Witness one checkpoint (called after its transaction commits)."""
    root = witness_dir()
    if root is None:
        return
    try:
        folder = root / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{tree_size:012d}.json"
        if not _write_exclusive(path, envelope_bytes) and path.read_bytes() != envelope_bytes:
            digest = hashlib.sha256(envelope_bytes).hexdigest()
            _write_exclusive(folder / f"{tree_size:012d}.conflict-{digest}.json", envelope_bytes)
            log.error(
                "transparency-log witness: a different checkpoint for tree size %s was signed (fork); kept both in %s",
                tree_size,
                folder,
            )
        _merge_key(root / "keys.json", key_entry)
    except OSError as exc:
        log.error(
            "transparency-log witness: cannot publish the checkpoint of tree size %s to %s: %s", tree_size, root, exc
        )


def _merge_key(path: Path, entry: dict) -> None:
    try:
        current = json.loads(path.read_bytes())
    except FileNotFoundError:
        current = {"keys": []}
    if any(k.get("key_id") == entry["key_id"] for k in current.get("keys", [])):
        return
    current["keys"].append(entry)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(current, indent=2) + "\n")
    os.replace(tmp, path)


def witnessed(root: Path | None = None) -> list[tuple[int, Path]]:
    """(tree size, file) of every witnessed checkpoint, by size."""
    root = root or witness_dir()
    folder = root / "checkpoints" if root else None
    if folder is None or not folder.is_dir():
        return []
    out = [(int(m.group(1)), p) for p in folder.iterdir() if (m := NAME_RE.match(p.name))]
    return sorted(out)


def latest(root: Path | None = None) -> dict | None:
    """The envelope of the largest witnessed checkpoint, or None."""
    items = witnessed(root)
    return json.loads(items[-1][1].read_bytes()) if items else None


def check(roots: list[bytes], db_key_set: dict, problem, warn, root: Path | None = None) -> int:
    """Compare the database's log (``roots[i]`` = Merkle root of its first i+1 entries) with every witnessed
    checkpoint; ``problem(text)`` is called for each contradiction, ``warn(text)`` for a witness that lags (nothing
    contradicts, but what is not witnessed is not protected). Returns the number of checkpoints checked."""
    root = root or witness_dir()
    if root is None:
        return 0
    public = {}
    for source in (db_key_set, _read_json(root / "keys.json") or {"keys": []}):
        try:
            public.update({kid: key for kid, (key, _) in parse_key_set(source).items()})
        except (dsse.EnvelopeError, ValueError) as exc:
            problem(f"witness: a key set is unusable: {exc}")
    items = witnessed(root)
    good = 0  # largest witnessed size that matches
    first_bad = None
    for size, path in items:
        try:
            head = vcheckpoint.open_checkpoint(json.loads(path.read_bytes()), public)
        except (ValueError, OSError, dsse.EnvelopeError) as exc:
            problem(f"witness: checkpoint {path.name} does not verify: {exc}")
            continue
        if head["tree_size"] != size:
            problem(f"witness: {path.name} holds a checkpoint of tree size {head['tree_size']}")
            continue
        if size > len(roots):
            problem(
                f"witness: the witnessed checkpoint of tree size {size} is larger than the log in the database "
                f"({len(roots)} entries): entries were removed"
            )
            continue
        if size and roots[size - 1] != head["root_hash"]:
            if first_bad is None:
                first_bad = size
                suspect = f"entry {size - 1}" if good == size - 1 else f"an entry between {good} and {size - 1}"
                problem(
                    f"witness: the log in the database does not extend the witnessed checkpoint of tree size "
                    f"{size} (root {head['root_hash'].hex()}; the database's first {size} entries hash to "
                    f"{roots[size - 1].hex()}): {suspect} was rewritten after it was witnessed"
                )
            continue
        if first_bad is None:
            good = size
    conflicts = sorted(p.name for p in (root / "checkpoints").glob("*.conflict-*.json")) if items else []
    if conflicts:
        problem(
            f"witness: {len(conflicts)} conflicting checkpoint(s) were signed for a size already witnessed "
            f"(a fork): {', '.join(conflicts[:5])}"
        )
    if roots and (not items or items[-1][0] < len(roots)):
        warn(
            f"witness: the latest witnessed checkpoint is of tree size {items[-1][0] if items else 0}, the log "
            f"has {len(roots)} entries (publishing to {root} failed or lags: see the log)"
        )
    return len(items)


def _read_json(path: Path):
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
