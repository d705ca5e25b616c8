"""The signing keys as events in the transparency log itself: the key set is *derived from the log*, never read
from a table the application can write.

Every key change is a log entry, an in-toto Statement v1 of predicate type :data:`KEY_PREDICATE` whose one subject is
the key (``name`` = ``ed25519:<key id>``, ``digest.sha256`` = the key id, which *is* the SHA-256 of the raw public
key) and whose predicate says what happened::

    {"event": "introduce" | "rotate" | "retire", "key_id": hex, "algorithm": "ed25519",
     "public_key": base64(raw 32 bytes), "previous_key_id": hex | null, "time": ISO 8601}

The rules :func:`derive` enforces, entry by entry, in log order:

* ``introduce`` — only as the log's first key event (nothing known yet), signed by the introduced key itself
  (proof that whoever wrote it holds the private key);
* ``rotate`` — ``previous_key_id`` is the active key and the entry is signed by it (the outgoing key vouches for
  its successor); the outgoing key becomes ``retired`` (it still verifies what it signed before), the new one
  ``active``; a key id can be introduced once;
* ``retire`` — of the active key, signed by it; nothing signs after it;
* every other entry (a certificate) is signed by the key active at its index.

A break of any rule is a problem naming the entry and the key. Whoever holds only the database (or the application
role, which may INSERT into the log) cannot add a key without the active private key; whoever holds that key can
rotate — but only in the open, in an entry every witness and verifier sees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from workers.verify import dsse, jcs, keys as vkeys, statement as st

KEY_PREDICATE = "https://audit-portal.dev/attestation/signing-key/v1"
INTRODUCE, ROTATE, RETIRE = "introduce", "rotate", "retire"
EVENTS = (INTRODUCE, ROTATE, RETIRE)


def key_statement(event: str, public_key, *, previous_key_id: str | None, time: str) -> dict:
    """The statement of a key event about ``public_key`` (an Ed25519 public key)."""
    if event not in EVENTS:
        raise ValueError(f"unknown key event {event!r}")
    entry = vkeys.key_entry(public_key)
    return st.statement(
        [st.subject(f"ed25519:{entry['key_id']}", entry["key_id"])],
        KEY_PREDICATE,
        {
            "event": event,
            "key_id": entry["key_id"],
            "algorithm": vkeys.ALGORITHM,
            "public_key": entry["public_key"],
            "previous_key_id": previous_key_id,
            "time": time,
        },
    )


def sign_event(event: str, public_key, signer_private, *, previous_key_id: str | None, time: str) -> dict:
    """The DSSE envelope of a key event, signed by ``signer_private`` (the new key for an introduction, the outgoing
    key for a rotation, the retired key for a retirement)."""
    stmt = key_statement(event, public_key, previous_key_id=previous_key_id, time=time)
    return dsse.sign(
        jcs.canonical(stmt), dsse.INTOTO_PAYLOAD_TYPE, signer_private, vkeys.key_id(signer_private.public_key())
    )


def is_key_event(envelope) -> bool:
    try:
        payload_type, payload, _ = dsse.parse(envelope)
        return payload_type == dsse.INTOTO_PAYLOAD_TYPE and json.loads(payload).get("predicateType") == KEY_PREDICATE
    except (dsse.EnvelopeError, ValueError, AttributeError):
        return False


@dataclass
class KeyHistory:
    """What the log says about its keys: ``keys`` (key id → key-set entry, in order of introduction), the
    ``active`` key id, the ``events`` (index, event, key id) and ``problems`` (each names the entry and the key)."""

    keys: dict = field(default_factory=dict)
    public: dict = field(default_factory=dict)
    active: str | None = None
    events: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    signer_at: dict = field(default_factory=dict)  # log index → key id that signed it (verified)

    def key_set(self) -> dict:
        """The key set in the published format (workers/verify/keys.py), with where each key entered the log."""
        return {"keys": [dict(v) for v in self.keys.values()]}

    def fingerprints(self) -> list[str]:
        return [
            f"{k['key_id']} {k['status']} (introduced at log index {k['introduced_at_index']})"
            for k in self.keys.values()
        ]


def derive(entries) -> KeyHistory:
    """Replay ``entries`` — ``(index, envelope dict)`` in log order — and return the key history."""
    h = KeyHistory()
    for index, envelope in entries:
        try:
            payload_type, payload, sigs = dsse.parse(envelope)
            stmt = json.loads(payload)
        except (dsse.EnvelopeError, ValueError) as exc:
            h.problems.append(f"entry {index}: unreadable envelope: {exc}")
            continue
        claimed = ", ".join(sorted({kid for kid, _ in sigs})) or "(none)"
        if not (isinstance(stmt, dict) and stmt.get("predicateType") == KEY_PREDICATE):
            if h.active is None:
                h.problems.append(
                    f"entry {index}: signed by key {claimed}, but no key is active there (the log "
                    "introduced none, or retired it)"
                )
                continue
            try:
                dsse.verify(envelope, {h.active: h.public[h.active]})
                h.signer_at[index] = h.active
            except dsse.EnvelopeError:
                h.problems.append(
                    f"entry {index}: not signed by the active key {h.active} (claims key {claimed}, "
                    "which the log did not introduce as active there)"
                )
            continue
        _key_event(h, index, envelope, stmt, claimed)
    return h


def _key_event(h: KeyHistory, index: int, envelope, stmt: dict, claimed: str) -> None:
    pred = stmt.get("predicate") or {}
    event, kid = pred.get("event"), pred.get("key_id")
    try:
        entry = {"key_id": kid, "algorithm": pred.get("algorithm"), "public_key": pred.get("public_key")}
        parsed = vkeys.parse_key_set({"keys": [entry]})
        if kid not in parsed:
            raise ValueError(f"algorithm {pred.get('algorithm')!r} is not ed25519")
        new_key = parsed[kid][0]
    except (dsse.EnvelopeError, ValueError, TypeError) as exc:
        h.problems.append(f"entry {index}: key event for key {kid}: the key is unusable: {exc}")
        return
    if event == INTRODUCE:
        if h.keys:
            h.problems.append(
                f"entry {index}: introduces key {kid} without the active key's signature (only the "
                "log's first key may be introduced; later keys come by rotation)"
            )
            return
        signer, signer_key = kid, new_key
    elif event in (ROTATE, RETIRE):
        signer = h.active
        if signer is None:
            h.problems.append(f"entry {index}: {event} of key {kid} while no key is active")
            return
        if event == ROTATE and pred.get("previous_key_id") != signer:
            h.problems.append(
                f"entry {index}: rotation to key {kid} names previous key {pred.get('previous_key_id')},"
                f" but the active key is {signer}"
            )
            return
        if event == RETIRE and kid != signer:
            h.problems.append(f"entry {index}: retires key {kid}, which is not the active key {signer}")
            return
        if event == ROTATE and kid in h.keys:
            h.problems.append(f"entry {index}: rotation to key {kid}, which the log introduced before")
            return
        signer_key = h.public[signer]
    else:
        h.problems.append(f"entry {index}: unknown key event {event!r} for key {kid}")
        return
    try:
        dsse.verify(envelope, {signer: signer_key})
    except dsse.EnvelopeError:
        h.problems.append(
            f"entry {index}: the {event} of key {kid} is not signed by key {signer} (claims key {claimed})"
        )
        return
    h.signer_at[index] = signer
    h.events.append((index, event, kid))
    when = pred.get("time")
    if event == RETIRE:
        h.keys[kid].update(status="retired", retired_at=when, retired_at_index=index)
        h.active = None
        return
    if event == ROTATE:
        h.keys[signer].update(status="retired", retired_at=when, retired_at_index=index)
    h.keys[kid] = {
        "key_id": kid,
        "algorithm": vkeys.ALGORITHM,
        "public_key": pred["public_key"],
        "status": "active",
        "created_at": when,
        "retired_at": None,
        "introduced_at_index": index,
        "retired_at_index": None,
    }
    h.public[kid] = new_key
    h.active = kid


def compare_table(history: KeyHistory, table_keys: list[dict]) -> list[str]:
    """Problems of a key table (rows with key_id, public_key, status) against the history derived from the log:
    every key there must have been introduced through the log, with the same public key and status."""
    out = []
    for row in table_keys:
        kid = row.get("key_id")
        known = history.keys.get(kid)
        if known is None:
            out.append(f"signing key {kid} is in the key table but was never introduced through the log")
        elif known["public_key"] != row.get("public_key"):
            out.append(f"signing key {kid}: the key table's public key differs from the one the log introduced")
        elif known["status"] != row.get("status"):
            out.append(f"signing key {kid}: the key table says {row.get('status')}, the log says {known['status']}")
    return out
