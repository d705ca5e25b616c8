"""Harness invariants shared by every protocol (docs/contract-language.md#harness-invariants), on the parent side.

The child (sandbox.py) does what must happen around the call: poisoned outputs, candidate first, input
hashes, stream synchronisation, replay. This module does the rest: the seed plan (public and hidden seeds,
invariant 5 of docs/contract-language.md#harness-invariants), the input-sensitivity partners (invariant 4), decoding
child results, and the generic findings every contract inherits — unexpected exceptions, wrong shape / dtype / type, mutated inputs, insensitivity,
replay disagreement. Protocol-specific statistics live in protocols/*.py.
"""

from __future__ import annotations

import hashlib
import hmac
import os

import torch

from .protocols.base import Case, bits, bitwise_equal
from .sandbox import decode_tensor, tensor_hash
from .sandbox_child import fill_tensor

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


def decode_results(outcome: dict, cases: dict) -> dict:
    """Per case key, what the protocols measure — computed here, in the parent, from the raw bytes the child
    shipped: every launch's output (decoded), their hashes (replay and determinism), whether an input's bytes
    changed (input immutability), and which destination positions still hold the fill pattern of every launch
    (an output never written). Nothing of this is taken from the child's word."""
    encoded = {c["key"]: c for c in outcome.get("encoded_cases") or []}
    out = {}
    for raw in outcome.get("results") or []:
        key = raw.get("key")
        case = cases.get(key)
        if case is None or key in out:
            continue  # a result for a case we never asked for, or a second one: ignored
        fills = encoded[key]["fills"] if key in encoded else []
        series, launch = [], 0
        for s in raw.get("series") or []:
            outputs = [decode_tensor(o) for o in s.get("outputs") or []]
            series.append(
                {
                    "config": s.get("config") or "auto",
                    "outputs": outputs,
                    "hashes": [tensor_hash(o) for o in outputs],
                    "first_launch": launch,
                }
            )
            launch += len(outputs)
        before = [a for a in case.args if isinstance(a, torch.Tensor)]
        mutated = any(_mutated(before, after) for after in raw.get("inputs_after_rounds") or [raw.get("inputs_after")])
        first = series[0] if series else {"outputs": [], "hashes": []}
        r = {
            "key": key,
            "outputs": first["outputs"],
            "hashes": first["hashes"],
            "configs": series if case.all_configs else None,
            "exception": raw.get("exception"),
            "bad_output": raw.get("bad_output"),
            "times": raw.get("times") or [],
            "input_mutated": mutated,
            "input_hash": hashlib.sha256("".join(tensor_hash(a) for a in before).encode()).hexdigest()[:16],
            "unwritten_mask": _unwritten(case, series, fills),
            "aliased_inputs": aliased_inputs(raw.get("spans") or [(raw.get("input_spans"), raw.get("output_spans"))]),
            "fresh_launches": raw.get("fresh_launches") if isinstance(raw.get("fresh_launches"), int) else 0,
            "reused_outputs": reused_outputs(
                raw.get("launch_spans") or [(raw.get("input_spans"), raw.get("output_spans"))]
            ),
        }
        r["unwritten"] = int(r["unwritten_mask"].sum()) if r["unwritten_mask"] is not None else 0
        out[key] = r
    return out


def aliased_inputs(spans) -> list[int]:
    """Positions (among the tensor arguments) of the inputs whose storage overlaps the memory of some launch's
    output, from the addresses each child shipped: ``[(input_spans, output_spans)]`` with ``input_spans`` =
    ``[(address, bytes)]`` of every input's storage and ``output_spans`` = ``[(start, end)]`` of every launch's
    output. Malformed records are skipped (a kernel that corrupts them also fails the run elsewhere)."""
    hit = set()
    for entry in spans:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            continue
        inputs, outputs = entry
        for i, rec in enumerate(inputs or []):
            try:
                lo, hi = int(rec[0]), int(rec[0]) + int(rec[1])
                if any(int(o[0]) < hi and lo < int(o[1]) for o in outputs or []):
                    hit.add(i)
            except (TypeError, ValueError, IndexError):
                continue
    return sorted(hit)


def reused_outputs(launch_spans) -> int:
    """How many launches returned memory that an earlier launch of the same child had already returned. The child
    keeps every output of a case alive until the case ends, so an allocator cannot hand the same bytes out twice:
    an overlap means the kernel gave a caller a buffer it kept and later overwrote (a static workspace, a cache
    of results). An output that lies inside an input's storage is not counted: that is the input's own memory, an
    alias that the aliasing policy judges (and writing there is an input mutation). ``launch_spans``: per child,
    ``(input spans, output spans)`` — ``[(address, bytes)]`` of every input storage it was given and the
    ``(start, end)`` of each launch's output, in launch order."""
    reused = 0
    for entry in launch_spans if isinstance(launch_spans, (list, tuple)) else []:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            reused += 1  # a malformed record is not evidence of fresh memory
            continue
        inputs, seen = _storages(entry[0]), []
        for o in entry[1] if isinstance(entry[1], (list, tuple)) else []:
            try:
                lo, hi = int(o[0]), int(o[1])
            except (TypeError, ValueError, IndexError):
                reused += 1
                continue
            if hi <= lo or any(a <= lo and hi <= b for a, b in inputs):
                continue  # an empty output occupies no memory; an input's own memory is the aliasing check's
            reused += any(a < hi and lo < b for a, b in seen)
            seen.append((lo, hi))
    return reused


def _storages(input_spans) -> list[tuple[int, int]]:
    """``[(start, end)]`` of the well-formed ``(address, bytes)`` input records (others are ignored here)."""
    out = []
    for rec in input_spans if isinstance(input_spans, (list, tuple)) else []:
        try:
            out.append((int(rec[0]), int(rec[0]) + int(rec[1])))
        except (TypeError, ValueError, IndexError):
            continue
    return out


def aliasing_findings(contract, cases: dict, results: dict) -> list[dict]:
    """``policies.aliasing`` (docs/contracts.md#aliasing-and-in-place-calls): declared FORBIDDEN or ALLOWED_INPLACE,
    an ordinary (out-of-place) call's output must not share memory with any input; the in-place calls of an
    ALLOWED_INPLACE contract are the protocol's own cases (their destination is a copy the harness made)."""
    if contract.policies.get("aliasing") is None:
        return []
    out = []
    for key, case in cases.items():
        r = results.get(key) or {}
        idx = case.out_index
        if idx is not None and case.args[idx].alias_of is not None:
            continue
        if r.get("aliased_inputs"):
            out.append(
                {
                    "kind": "output_aliases_input",
                    "severity": "fail",
                    "case": key,
                    "detail": f"the output shares memory with input(s) {r['aliased_inputs']} "
                    f"(policies.aliasing {contract.policies['aliasing']}: an out-of-place call must not alias)",
                }
            )
    return out


def _mutated(before: list, after) -> bool:
    """Whether one child's record of the inputs after its calls differs from the inputs the parent built: a
    missing record, a storage that was moved or resized (shipped without bytes), or other values."""
    if not isinstance(after, (list, tuple)) or len(after) != len(before):
        return True
    for b, enc in zip(before, after):
        if not isinstance(enc, tuple) or len(enc) != 6 or enc[5] is None:
            return True
        a = decode_tensor(enc)
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype or not bitwise_equal(a.contiguous(), b.contiguous()):
            return True
    return False


def channel_findings(outcome: dict) -> list[dict]:
    """The children's result channel said more, less or other than the cases they were given (a kernel writing
    results of its own into the harness's channel): a failure of the run, whatever the results say."""
    detail = outcome.get("channel_tampered")
    if not detail:
        return []
    return [
        {
            "kind": "channel_tampered",
            "severity": "fail",
            "case": "*",
            "detail": f"the implementation's process wrote into the result channel: {detail}",
        }
    ]


def _unwritten(case: Case, series: list, fills: list):
    """Mask of the destination-passing output's positions that equal the fill pattern bit for bit in every launch
    that had a non-NaN pattern (patterns differ per launch, so a written position cannot match them all); None
    when the case has no destination or no such launch."""
    idx = case.out_index
    if idx is None or not fills:
        return None
    shape, dtype = tuple(case.args[idx].shape), case.args[idx].dtype
    if not dtype.is_floating_point:
        return None
    stuck, checked = None, 0
    for s in series:
        for j, o in enumerate(s["outputs"]):
            n = s["first_launch"] + j
            spec = fills[n % len(fills)]
            if (
                spec["pattern"] == "nan"
                or (case.order == "reference_first" and n == 0)
                or tuple(o.shape) != shape
                or o.dtype != dtype
            ):
                continue
            same = bits(o) == bits(fill_tensor(shape, dtype, spec))
            stuck = same if stuck is None else stuck & same
            checked += 1
    return stuck if checked else None


def generic_findings(contract, cases: dict, results: dict) -> list[dict]:
    """Findings every contract inherits. ``severity``: crash | fail | note."""
    bitwise = contract.policies.get("determinism") == "BITWISE"
    findings = []
    for key, case in cases.items():
        findings += _case_findings(key, case, results.get(key), bitwise)
    findings += aliasing_findings(contract, cases, results)
    findings += _sensitivity_findings(cases, results)
    return findings


def _finding(kind: str, severity: str, key, detail: str) -> dict:
    return {"kind": kind, "severity": severity, "case": key, "detail": detail}


def _case_findings(key, case, r: dict | None, bitwise: bool) -> list[dict]:
    """One case's result: missing, inputs written, an exception, an output that was not shipped, destination
    positions never written, then each launch series' shape, dtype and agreement between launches."""
    if r is None:
        return [_finding("missing_result", "crash", key, "no result")]
    findings = []
    if r.get("input_mutated"):
        findings.append(
            _finding("input_mutated", "fail", key, "an input tensor changed during the call (input-immutability hash)")
        )
    exc = r.get("exception")
    if exc and not case.expect_raise:
        where = f" ({exc['where']})" if exc.get("where") else ""
        return findings + [_finding("exception", "crash", key, f"{exc['type']}: {exc['message']}{where}")]
    if r.get("bad_output"):
        return findings + [_finding("bad_output", "fail", key, r["bad_output"])]
    if r.get("reused_outputs"):
        findings.append(
            _finding(
                "output_reused",
                "fail",
                key,
                f"{r['reused_outputs']} launch(es) returned memory an earlier launch had returned and the caller "
                "still held (a later call overwrites an earlier result)",
            )
        )
    if r.get("unwritten"):
        findings.append(
            _finding(
                "destination_unwritten",
                "fail",
                key,
                f"{r['unwritten']} position(s) of the destination buffer still hold the "
                "harness's fill pattern after every launch (never written)",
            )
        )
    series = r["configs"] if r.get("configs") else [{"config": None, "outputs": r["outputs"], "hashes": r["hashes"]}]
    for s in series:
        findings += _series_findings(key, case, s, bitwise)
    return findings


def _series_findings(key, case, s: dict, bitwise: bool) -> list[dict]:
    findings = []
    for out in s["outputs"][:1]:
        if case.expect_shape is not None and tuple(out.shape) != tuple(case.expect_shape):
            findings.append(
                _finding("wrong_shape", "fail", key, f"shape {tuple(out.shape)}, expected {tuple(case.expect_shape)}")
            )
        elif case.expect_dtype is not None and out.dtype != case.expect_dtype:
            findings.append(
                _finding(
                    "wrong_dtype",
                    "fail",
                    key,
                    f"dtype {str(out.dtype).replace('torch.', '')}, expected "
                    f"{str(case.expect_dtype).replace('torch.', '')}",
                )
            )
    if len(set(s["hashes"])) > 1:  # every launch: back to back, and in fresh processes at other addresses
        findings.append(
            _finding(
                "replay_mismatch",
                "fail" if bitwise else "note",
                key,
                f"{len(s['hashes'])} launches on identical inputs gave {len(set(s['hashes']))} different bit patterns"
                + (f" (config {s['config']})" if s.get("config") else ""),
            )
        )
    return findings


def _sensitivity_findings(cases: dict, results: dict) -> list[dict]:
    """Input sensitivity: the perturbed partner must not reproduce the original output bit for bit."""
    findings = []
    for key, case in cases.items():
        base_key = case.meta.get("sensitivity_of")
        if not base_key:
            continue
        a, b = results.get(base_key), results.get(key)
        if not a or not b or not a.get("outputs") or not b.get("outputs"):
            continue
        if bitwise_equal(a["outputs"][0], b["outputs"][0]):
            findings.append(
                _finding(
                    "input_insensitive",
                    "fail",
                    key,
                    "output unchanged after perturbing the input (cached or constant result)",
                )
            )
    return findings


def _other_launch(r: dict, k: int) -> dict | None:
    """``r`` with launch ``k`` of each series in front, or None where no series has a launch ``k`` whose bits
    differ from its first (a repeat with the same bits measures the same)."""
    series = r.get("configs") or [{"outputs": r.get("outputs") or [], "hashes": r.get("hashes") or []}]
    if not any(len(s["hashes"]) > k and s["hashes"][k] != s["hashes"][0] for s in series):
        return None

    def front(s):
        if len(s["outputs"]) <= k:
            return dict(s)
        return dict(s, outputs=[s["outputs"][k]] + s["outputs"][1:], hashes=[s["hashes"][k]] + s["hashes"][1:])

    v = dict(r)
    first = front({"outputs": r.get("outputs") or [], "hashes": r.get("hashes") or []})
    v["outputs"], v["hashes"] = first["outputs"], first["hashes"]
    if r.get("configs"):
        v["configs"] = [front(s) for s in r["configs"]]
    return v


def other_launches(results: dict):
    """Every launch is judged, not only the first: for each launch index ``k`` >= 1 at which some case gave other
    bits than its first launch, ``(k, results with launch k in front, the keys that changed)``. A kernel honest on
    the first call (the one a naive grader measures), on a storage at offset 0, or on a destination that looks like
    a fill pattern, and wrong on a later call, a fresh allocation or another fill, is measured where it is wrong."""
    most = max([len(s.get("hashes") or []) for r in results.values() for s in (r.get("configs") or [r])] or [0])
    for k in range(1, most):
        variant, changed = dict(results), []
        for key, r in results.items():
            v = _other_launch(r, k)
            if v is not None:
                variant[key] = v
                changed.append(key)
        if changed:
            yield k, variant, set(changed)


def shape_ok(case: Case, out: torch.Tensor | None) -> bool:
    return (
        out is not None
        and (case.expect_shape is None or tuple(out.shape) == tuple(case.expect_shape))
        and (case.expect_dtype is None or out.dtype == case.expect_dtype)
    )
