"""Small builders shared by the fidelity tests."""

from __future__ import annotations

import copy

import orjson

from workers.fidelity import audit_records

from .conftest import EXAMPLE_A, ids_sha


def variant(base=EXAMPLE_A, **changes):
    """Deep copy of ``base`` with dotted-path changes: ``variant(**{"rollout.logprobs": [...]})``."""
    r = copy.deepcopy(base)
    for path, value in changes.items():
        *head, last = path.split(".")
        d = r
        for k in head:
            d = d.setdefault(k, {})
        if value is KeyError:
            d.pop(last, None)
        else:
            d[last] = value
    for part in ("prompt", "response"):
        if isinstance(r.get(part), dict) and isinstance(r[part].get("token_ids"), list) and "ids_sha256" in r[part]:
            r[part]["ids_sha256"] = ids_sha(r[part]["token_ids"])
    return r


def audit_one(rec, **kw):
    rep = audit_records([rec], **kw)
    assert len(rep["calls"]) == 1
    return rep["calls"][0]


def by_id(report):
    return {c["call_id"]: c for c in report["calls"]}


def dumps(records):
    return b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in records)
