"""Harness invariants shared by every protocol (spec §2), on the parent side.

The child (sandbox.py) does what must happen around the call: poisoned outputs, candidate first, input
hashes, stream synchronisation, replay. This module does the rest: the seed plan (public and hidden seeds,
§2 item 5), the input-sensitivity partners (§2 item 4), decoding child results, and the generic findings
every contract inherits — unexpected exceptions, wrong shape / dtype / type, mutated inputs, insensitivity,
replay disagreement. Protocol-specific statistics live in protocols/*.py.
"""
from __future__ import annotations

import hashlib
import hmac
import os

import torch

from .protocols.base import Case, bitwise_equal
from .sandbox import decode_tensor

HIDDEN_KEY_ENV = "KC_HIDDEN_SEED_KEY"


def seed_plan(contract, seeds=None) -> list[tuple[int, str]]:
    """[(seed, seed_class)]. ``seeds=None``: the contract's public seeds plus ``hidden_count`` hidden seeds.

    Hidden seeds are HMAC(key, contract id, index) with the key from ``$KC_HIDDEN_SEED_KEY`` (the portal's
    secret: reproducible by the grader, unknown to submitters); without a key they are drawn from
    ``os.urandom`` for this run only and recorded in the trace so the run can still be replayed.
    An explicit ``seeds`` list is used as given (class "explicit") — what calibration and replay use."""
    if seeds is not None:
        return [(int(s), "explicit") for s in seeds]
    proto = contract.protocol_params["seeds"]
    plan = [(int(s), "public") for s in proto["public"]]
    key = os.environ.get(HIDDEN_KEY_ENV)
    for i in range(int(proto["hidden_count"])):
        if key:
            d = hmac.new(key.encode(), f"{contract.id}|{contract.version}|{i}".encode(), hashlib.sha256).digest()
        else:
            d = os.urandom(8)
        plan.append((int.from_bytes(d[:4], "little") & 0x7FFFFFFF, "hidden"))
    return plan


def add_sensitivity_cases(protocol, cases: list[Case]) -> list[Case]:
    """For the first computing case of every seed, add a perturbed partner (``meta.sensitivity_of``)."""
    seen, extra = set(), []
    for c in cases:
        seed = c.meta.get("seed")
        if seed in seen or c.expect_raise or c.meta.get("no_sensitivity"):
            continue
        partner = protocol.perturb(c)
        if partner is None:
            continue
        seen.add(seed)
        partner.key = c.key + "/perturbed"
        partner.meta = dict(c.meta, sensitivity_of=c.key)
        extra.append(partner)
    return cases + extra


def decode_results(raw_results: list[dict]) -> dict:
    out = {}
    for r in raw_results:
        r = dict(r)
        r["outputs"] = [decode_tensor(o) for o in r.get("outputs") or []]
        if r.get("configs"):
            r["configs"] = [dict(c, outputs=[decode_tensor(o) for o in c["outputs"]]) for c in r["configs"]]
        out[r["key"]] = r
    return out


def generic_findings(contract, cases: dict, results: dict) -> list[dict]:
    """Findings every contract inherits. ``severity``: crash | fail | note."""
    findings = []
    bitwise = contract.policies.get("determinism") == "BITWISE"
    for key, case in cases.items():
        r = results.get(key)
        if r is None:
            findings.append({"kind": "missing_result", "severity": "crash", "case": key, "detail": "no result"})
            continue
        if r.get("input_mutated"):
            findings.append({"kind": "input_mutated", "severity": "fail", "case": key,
                             "detail": "an input tensor changed during the call (input-immutability hash)"})
        exc = r.get("exception")
        if exc and not case.expect_raise:
            findings.append({"kind": "exception", "severity": "crash", "case": key,
                             "detail": f"{exc['type']}: {exc['message']}" + (f" ({exc['where']})" if exc.get("where") else "")})
            continue
        if r.get("bad_output"):
            findings.append({"kind": "bad_output", "severity": "fail", "case": key, "detail": r["bad_output"]})
            continue
        series = r["configs"] if r.get("configs") else [{"config": None, "outputs": r["outputs"], "hashes": r["hashes"]}]
        for s in series:
            for out in s["outputs"][:1]:
                if case.expect_shape is not None and tuple(out.shape) != tuple(case.expect_shape):
                    findings.append({"kind": "wrong_shape", "severity": "fail", "case": key,
                                     "detail": f"shape {tuple(out.shape)}, expected {tuple(case.expect_shape)}"})
                elif case.expect_dtype is not None and out.dtype != case.expect_dtype:
                    findings.append({"kind": "wrong_dtype", "severity": "fail", "case": key,
                                     "detail": f"dtype {str(out.dtype).replace('torch.', '')}, expected "
                                               f"{str(case.expect_dtype).replace('torch.', '')}"})
            if len(set(s["hashes"][:2])) > 1:
                findings.append({"kind": "replay_mismatch", "severity": "fail" if bitwise else "note", "case": key,
                                 "detail": "two launches on identical inputs gave different bits"
                                           + (f" (config {s['config']})" if s.get("config") else "")})
    # input sensitivity: the perturbed partner must not reproduce the original output bit for bit
    for key, case in cases.items():
        base_key = case.meta.get("sensitivity_of")
        if not base_key:
            continue
        a, b = results.get(base_key), results.get(key)
        if not a or not b or not a.get("outputs") or not b.get("outputs"):
            continue
        if bitwise_equal(a["outputs"][0], b["outputs"][0]):
            findings.append({"kind": "input_insensitive", "severity": "fail", "case": key,
                             "detail": "output unchanged after perturbing the input (cached or constant result)"})
    return findings


def shape_ok(case: Case, out: torch.Tensor | None) -> bool:
    return out is not None and (case.expect_shape is None or tuple(out.shape) == tuple(case.expect_shape)) and \
        (case.expect_dtype is None or out.dtype == case.expect_dtype)
