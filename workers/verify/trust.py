"""Trust roots of the offline verifier: the key set (and, optionally, an earlier checkpoint) the *user* chose.

A bundle carries the portal's key set, but a key set shipped inside the thing it vouches for proves nothing: anyone
can make a fresh key, sign a statement with it and put the key in the bundle. So the verifier only says
``VERIFIED`` against a key set the user pinned, looked up in this order:

1. ``--keys KEYS.json`` on the command line;
2. the ``AUDIT_VERIFY_KEYS`` environment variable (the path of a key-set file);
3. the pinned key set ``$XDG_CONFIG_HOME/audit-portal/trusted-keys.json`` (``~/.config/…`` by default), written by
   ``python -m workers.verify --pin-keys KEYS.json``.

Pinning *merges*: keys already pinned stay (a rotated-out key still verifies what it signed), new ones are added.

The same goes for a checkpoint (a signed tree head of the log): ``--since CHECKPOINT.json``, else
``AUDIT_VERIFY_CHECKPOINT``, else ``$XDG_CONFIG_HOME/audit-portal/checkpoint.json`` (written by
``--save-checkpoint``). When one is pinned, the verifier also checks that the bundle's log is an append-only
extension of it (RFC 6962 consistency), so a log rewritten after the pinned checkpoint is caught even when every
signature in the bundle is valid.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from workers.verify.dsse import EnvelopeError
from workers.verify.keys import parse_key_set

ENV_KEYS = "AUDIT_VERIFY_KEYS"
ENV_CHECKPOINT = "AUDIT_VERIFY_CHECKPOINT"
KEYS_FILE = "trusted-keys.json"
CHECKPOINT_FILE = "checkpoint.json"


class TrustError(ValueError):
    """A pinned trust root that cannot be read or written; the message names the file."""


def config_dir(env=None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "audit-portal"


@dataclass(frozen=True)
class Pinned:
    """A trust root: its content and where it came from (``source`` is shown in every report)."""

    data: dict
    source: str


def _read(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TrustError(f"cannot read the {what} {path}: {exc}") from None
    if not isinstance(data, dict):
        raise TrustError(f"the {what} {path} is not a JSON object")
    return data


def _find(explicit, env_name: str, file_name: str, what: str, env) -> Pinned | None:
    env = os.environ if env is None else env
    if explicit:
        return Pinned(_read(Path(explicit), what), f"{explicit} (given)")
    if env.get(env_name):
        return Pinned(_read(Path(env[env_name]), what), f"{env[env_name]} ({env_name})")
    path = config_dir(env) / file_name
    if path.is_file():
        return Pinned(_read(path, what), f"{path} (pinned)")
    return None


def trusted_keys(explicit=None, env=None) -> Pinned | None:
    """The key set the user trusts, or None when none is pinned anywhere."""
    return _find(explicit, ENV_KEYS, KEYS_FILE, "key set", env)


def pinned_checkpoint(explicit=None, env=None) -> Pinned | None:
    """The earlier checkpoint the log must extend, or None."""
    return _find(explicit, ENV_CHECKPOINT, CHECKPOINT_FILE, "checkpoint", env)


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def pin_keys(key_set: dict, env=None) -> tuple[list[str], int, Path]:
    """Merge ``key_set`` into the pinned key set (``AUDIT_VERIFY_KEYS`` if set, else the config file). Returns
    (ids added, keys now pinned, the file). Every entry is checked (id = SHA-256 of the key) before anything is
    written; pinned keys are never dropped."""
    env = os.environ if env is None else env
    try:
        new = parse_key_set(key_set)
    except (EnvelopeError, ValueError) as exc:
        raise TrustError(f"the key set to pin is unusable: {exc}") from None
    if not new:
        raise TrustError("the key set to pin holds no Ed25519 key")
    path = Path(env[ENV_KEYS]) if env.get(ENV_KEYS) else config_dir(env) / KEYS_FILE
    current = _read(path, "pinned key set") if path.is_file() else {"keys": []}
    try:
        have = parse_key_set(current)
    except (EnvelopeError, ValueError) as exc:
        raise TrustError(f"the pinned key set {path} is unusable: {exc}") from None
    added = [kid for kid in new if kid not in have]
    merged = [entry for _, entry in have.values()]
    for kid in added:
        merged.append(new[kid][1])
    # an already pinned key keeps its entry, but takes the newer status (a key retired since the last pin)
    for i, entry in enumerate(merged):
        if entry["key_id"] in new and entry["key_id"] not in added:
            merged[i] = {**entry, **{k: new[entry["key_id"]][1].get(k) for k in ("status", "retired_at")}}
    _write(path, {"keys": merged})
    return added, len(merged), path


def save_checkpoint(envelope: dict, env=None) -> Path:
    env = os.environ if env is None else env
    path = Path(env[ENV_CHECKPOINT]) if env.get(ENV_CHECKPOINT) else config_dir(env) / CHECKPOINT_FILE
    _write(path, envelope)
    return path
