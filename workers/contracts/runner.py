"""run_contract / run_suite: one contract against one implementation, to a :class:`Verdict`
(docs/contract-language.md#verdicts).

Flow of one run: resolve the contract -> NOT_DECLARED / NOT_APPLICABLE checks -> seed plan -> the
protocol builds its cases (+ sensitivity partners) in this process -> one sandboxed child runs them all
-> generic harness findings -> the protocol measures against the fp64 oracle here -> per-measurement
bound and relation from the contract's expressions -> verdict, margin, signature, trace.
"""
from __future__ import annotations

import datetime as _dt
import math
import time

from . import SUITE_VERSION
from .coverage import coverage_statement
from .loader import Contract, load_suite
from .redact import clean
from .verdict import Verdict

DEFAULT_TIME_LIMIT_S = 120.0
DEFAULT_MEMORY_LIMIT_MB = 4096


# ------------------------------------------------------------------------------------------- contracts
def suite(directory=None) -> list[Contract]:
    return load_suite(directory)


def get_contract(contract_id, directory=None) -> Contract:
    """By full id (``C-PRC-01/aten.mm/f32.f32->f32``) or, when unambiguous, by class (``C-PRC-01``)."""
    if isinstance(contract_id, Contract):
        return contract_id
    contracts = load_suite(directory)
    for c in contracts:
        if c.id == contract_id:
            return c
    by_class = [c for c in contracts if c.cls == contract_id]
    if len(by_class) == 1:
        return by_class[0]
    if len(by_class) > 1:
        raise KeyError(f"contract class {contract_id!r} is ambiguous: {', '.join(c.id for c in by_class)}")
    raise KeyError(f"unknown contract id {contract_id!r}; known: {', '.join(c.id for c in contracts)}")


def default_function_name(contract: Contract) -> str:
    """The function name of the signature (docs/contract-language.md#the-twelve-classes), e.g. 'matmul' for
    'matmul(a[M,K], b[K,N]) -> [M,N]'."""
    return contract.signature.split("(", 1)[0].strip()


# ------------------------------------------------------------------------------------------------- run
def _base(contract: Contract, impl, device) -> dict:
    from .sandbox import describe_impl

    return dict(contract_id=contract.id, contract_version=contract.version, contract_class=contract.cls,
                family=contract.family, statistic_name=contract.statistic, impl_id=describe_impl(impl),
                device=device)


def _margin(stat, bound) -> float:
    if stat is None or bound is None:
        return math.nan
    if isinstance(stat, float) and math.isnan(stat):
        return math.inf
    if bound > 0:
        return stat / bound
    return 0.0 if stat <= bound else math.inf


def run_contract(contract_id, impl, *, device="cpu", seeds=None, flags=None, time_limit_s=None,
                 memory_limit_mb=None, trace_path=None, progress=None, directory=None, pool=None,
                 declared_unit_roundoff=None) -> Verdict:
    """Run one contract against ``impl`` (callable, 'package.module:function', or '/path/file.py:function').

    ``declared_unit_roundoff``: the open track. An implementation that declares a lower precision (e.g. 2**-8
    for bf16 arithmetic) is graded against its declaration: every positive bound is scaled by declared u /
    contract u, and the verdict is labelled ``track = "open"`` with the declaration. Bitwise (T0) clauses keep
    their bound of 0. ``None`` is the closed track: the contract as written.

    ``seeds``: None = public + hidden seeds; a list = exactly those (replay / calibration). ``flags``:
    numeric environment for the run; defaults to the contract's ``precondition.env``, pass the deployment
    flags to measure KC-A. ``progress(done, total)`` is called as cases finish in the child. ``pool``: a
    :class:`~workers.contracts.sandbox.SessionPool` whose sandbox is reused across the contracts of one job.

    Raises :class:`~workers.contracts.sandbox.HarnessFailure` (or ``SandboxUnavailable``) when the harness
    itself cannot run: that is never a verdict about the implementation."""
    import torch

    from . import protocols
    from .fingerprint import fingerprint
    from .harness import add_sensitivity_cases, channel_findings, decode_results, generic_findings, seed_plan
    from .sandbox import run_in_sandbox

    from .schema import ENV_FLAGS

    unknown = sorted(set(flags or {}) - set(ENV_FLAGS))
    if unknown:
        raise ValueError(f"unknown environment flag(s) {unknown}; known: {', '.join(ENV_FLAGS)}")
    t0 = time.monotonic()
    contract = get_contract(contract_id, directory)
    base = _base(contract, impl, device)
    scale, open_track = 1.0, {}
    if declared_unit_roundoff is not None:
        from .expr import parse as _parse

        u_decl = float(_parse(declared_unit_roundoff).evaluate({}))
        if not (math.isfinite(u_decl) and contract.unit_roundoff <= u_decl < 1):
            raise ValueError(f"declared unit roundoff {declared_unit_roundoff!r} must lie in "
                             f"[{contract.unit_roundoff:g}, 1): the open track is for lower precision")
        scale = u_decl / contract.unit_roundoff
        open_track = {"track": "open", "declaration": {"unit_roundoff": u_decl, "bound_scale": scale,
                                                       "contract_unit_roundoff": contract.unit_roundoff}}
        base.update(open_track)

    def done(verdict, **kw) -> Verdict:
        b = dict(base)
        if "statistic_name" in kw:
            b.pop("statistic_name")
        if "reason" in kw:  # the candidate's words (exception messages, file names): escaped, no host paths
            kw["reason"] = clean(kw["reason"])
        for f in kw.get("findings") or ():
            f["detail"] = clean(f.get("detail", ""), 500)
        v = Verdict(verdict=verdict, **b, **kw)
        v.duration_s = round(time.monotonic() - t0, 4)
        if trace_path and v.trace:
            v.write_trace(trace_path)
        return v

    missing = [p for p in protocols.REQUIRED_POLICIES.get(contract.cls, ()) if p not in contract.policies]
    if missing:
        return done("NOT_DECLARED", reason=f"policy field(s) {', '.join('policies.' + m for m in missing)} "
                                            "not declared by the contract")
    platforms = contract.data["scope"].get("platforms") or ["any"]
    dev_kind = device.split(":")[0]
    if "any" not in platforms and dev_kind not in [p if isinstance(p, str) else p.get("device") for p in platforms]:
        return done("NOT_APPLICABLE", reason=f"device {device!r} is outside the contract's platforms {platforms}")
    if dev_kind == "cuda" and not torch.cuda.is_available():
        return done("INCONCLUSIVE", reason="device 'cuda' requested but no CUDA device is available here")
    if impl is None:
        return done("NOT_APPLICABLE", reason="no implementation supplied for this contract's op")

    proto = protocols.get(contract.protocol)
    plan = seed_plan(contract, seeds)
    case_list = proto.cases(contract, plan)
    if "input_sensitivity" in contract.protocol_params["harness_invariants"]:
        case_list = add_sensitivity_cases(proto, case_list)
    cases = {c.key: c for c in case_list}
    env_flags = dict(contract.env)
    env_flags.update(flags or {})
    params = contract.protocol_params
    limit = float(time_limit_s if time_limit_s is not None else params.get("time_limit_s", DEFAULT_TIME_LIMIT_S))
    mem = memory_limit_mb if memory_limit_mb is not None else params.get("memory_limit_mb", DEFAULT_MEMORY_LIMIT_MB)
    reference = getattr(proto, "REVERSED_ORDER_REFERENCE", None)
    outcome = run_in_sandbox(impl, case_list, device=device, flags=env_flags, time_limit_s=limit,
                             memory_limit_mb=mem, reference=reference, progress=progress, pool=pool)
    seeds_info = [{"seed": s if (c != "hidden" or not _hidden_key_set()) else None, "seed_class": c}
                  for s, c in plan]
    environment = fingerprint(device, outcome, env_flags)
    common = dict(environment=environment, seeds=seeds_info, impl_hash=outcome.get("impl_hash"))
    kind = outcome.get("kind")
    if kind == "timeout":
        return done("TIMEOUT", reason=outcome["error"]["message"], **common)
    if kind in ("crash", "child_error"):
        return done("CRASH", reason=f"{outcome['error']['type']}: {outcome['error']['message']}", **common)
    if kind == "load_error":
        e = outcome["error"]
        return done("CRASH", reason=f"could not load implementation: {e['type']}: {e['message']}", **common)

    try:
        results = decode_results(outcome, cases)
        findings = channel_findings(outcome) + generic_findings(contract, cases, results)
    except Exception as exc:  # noqa: BLE001 - the channel is written by the candidate's process
        return done("CRASH", reason=f"malformed result from the sandbox: {type(exc).__name__}: {exc}", **common)
    crash = [f for f in findings if f["severity"] == "crash"]
    if crash:
        return done("CRASH", reason=f"implementation raised on case {crash[0]['case']}: {crash[0]['detail']}",
                    findings=findings, **common)
    try:
        measurements = proto.measure(contract, cases, results)
    except Exception as exc:  # noqa: BLE001 - an unmeasurable output is reported, never a traceback
        return done("INCONCLUSIVE", reason=f"measurement failed: {type(exc).__name__}: {exc}", findings=findings,
                    **common)

    fp = common["environment"]
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat()
    trace, evaluated = [], []
    for m in measurements:
        names = dict(m["names"])
        try:
            bound = float(contract.bound.evaluate(names)) * scale
            names["bound"] = bound
            if scale != 1.0:
                names["u"] = names.get("u", contract.unit_roundoff) * scale
            ok = contract.relation.holds(names)
        except Exception as exc:  # noqa: BLE001
            return done("INCONCLUSIVE", reason=f"bound/relation could not be evaluated: {exc}", findings=findings,
                        **common)
        stat = float(names[contract.statistic])
        margin = _margin(stat, bound)
        evaluated.append((m, stat, bound, margin, ok))
        trace.append({
            "contract_id": contract.id, "contract_version": contract.version, "impl_id": base["impl_id"],
            "impl_hash": outcome.get("impl_hash"),
            "platform": {"device": device, "torch": fp.get("torch"), "cpu": fp.get("cpu"), "cuda": fp.get("cuda"),
                         "flags": fp.get("flags")},
            "seed_class": m.get("seed_class"),
            "seed": m.get("seed") if (m.get("seed_class") != "hidden" or not _hidden_key_set()) else None,
            "input_hash": m.get("input_hash"), "sweep_point": m.get("point"), "statistic_name": contract.statistic,
            "statistic": stat, "bound": bound, "margin": margin, "names": names,
            "verdict": "PASS" if ok else "FAIL", "timestamp": stamp, "suite_version": SUITE_VERSION,
        })
    try:
        signature = proto.signature(contract, measurements)
    except Exception as exc:  # noqa: BLE001
        signature = {"pattern": None, "error": f"{type(exc).__name__}: {exc}"}
    signature["findings"] = sorted({f["kind"] for f in findings})
    hidden = any(c == "hidden" for _, c in plan)
    harness = {"invariants": list(contract.protocol_params["harness_invariants"]), "separate_process": True,
               "isolation": (outcome.get("isolation") or {}).get("mode"), "hidden_seeds": hidden, "cases": len(cases),
               "child_wall_s": round(outcome.get("wall_s", 0), 3), "children": outcome.get("children", 1)}
    assurance = 3 if hidden else 1
    kw = dict(findings=findings, measurements=len(evaluated), signature=signature, trace=trace,
              harness=harness, assurance_level=assurance, **common)

    fails = [f for f in findings if f["severity"] == "fail"]
    kw.update(passed_measurements=sum(1 for e in evaluated if e[4]),
              coverage=coverage_statement(contract, [e[0] for e in evaluated], device, plan))
    if not evaluated:
        if fails:  # a refused output (a subclass, an active mode) or a tampered channel: never merely undecided
            return done("FAIL", reason=_harness_note(fails), **kw)
        return done("INCONCLUSIVE", reason="no valid measurement", **kw)
    failing = [e for e in evaluated if not e[4]]
    if failing:
        # the failing clause's own statistic and bound (a secondary clause such as probe_mismatch == 0 may be the
        # one that failed while the headline statistic is within its bound)
        failing = [(m, *_clause_figures(contract, m, stat, bound), ok) for m, stat, bound, _, ok in failing]
    pool = failing or evaluated
    # worst = largest margin; among infinite margins (T0 bounds), the largest statistic
    worst = max(pool, key=lambda e: (e[3] if not math.isnan(e[3]) else math.inf,
                                     e[1] if not math.isnan(e[1]) else math.inf))
    m, stat, bound, margin, _ = worst
    if failing:
        kw.update(failing_clause=m.get("_clause") or {}, statistic_name=m.get("_clause", {}).get("statistic_name")
                  or contract.statistic)
    kw.update(statistic=stat, bound=bound, margin=margin)
    harness_note = _harness_note(fails) if fails else ""
    if failing:
        names = ", ".join(f"{k} = {v:.4g}" for k, v in m["names"].items()
                          if isinstance(v, (int, float)) and k not in ("bound",) and k in contract.relation.names)
        return done("FAIL", reason=f"relation '{contract.data['postcondition']['relation']}' violated at "
                                   f"{m.get('point')} (seed class {m.get('seed_class')}): {names}, bound = {bound:.4g}; "
                                   f"{len(failing)}/{len(evaluated)} measurements fail"
                                   + (f"; {harness_note}" if harness_note else ""), **kw)
    if fails:
        return done("FAIL", reason=harness_note, **kw)
    if bound > 0 and margin > contract.quality_warning_fraction:
        return done("QUALITY_WARNING", reason=f"passes but uses {margin:.0%} of the budget at {m.get('point')}", **kw)
    return done("PASS", reason=f"{len(evaluated)} measurements within bound; worst margin {margin:.3g}", **kw)


def _harness_note(fails: list) -> str:
    f = fails[0]
    extra = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
    return f"harness invariant violated ({f['kind']}) on case {f['case']}: {f['detail']}{extra}"


def _clause_figures(contract, m, stat, bound):
    """(statistic, bound, margin) of the first failing top-level clause of the relation at measurement ``m``;
    the clause is recorded on ``m['_clause']``."""
    from .expr import clause_report

    names = dict(m["names"], bound=bound)
    try:
        report = clause_report(contract.relation, names)
    except Exception:  # noqa: BLE001 - evaluated once already; keep the headline figures
        return stat, bound, _margin(stat, bound)
    bad = next((c for c in report if not c["holds"]), None)
    if bad is None or "lhs_value" not in bad:
        m["_clause"] = {"clause": bad["clause"] if bad else contract.data["postcondition"]["relation"]}
        return stat, bound, _margin(stat, bound)
    lhs, rhs = float(bad["lhs_value"]), float(bad["rhs_value"])
    m["_clause"] = {"clause": bad["clause"], "statistic_name": bad["lhs"], "statistic": lhs, "op": bad["op"],
                    "bound_expr": bad["rhs"], "bound": rhs, "point": m.get("point")}
    return lhs, rhs, _margin(lhs, rhs) if bad["op"] in ("<=", "<", "==") else math.inf


def replay(verdict, impl=None, **kwargs) -> Verdict:
    """Re-run a recorded verdict (a Verdict or its to_dict()) with the same contract, device, flags and seeds.

    Hidden seeds that were not disclosed (``seed: null``) are regenerated from ``$KC_HIDDEN_SEED_KEY``, which
    must then be the key of the original run; a changed contract version is refused."""
    d = verdict.to_dict(include_trace=False) if hasattr(verdict, "to_dict") else dict(verdict)
    contract = get_contract(d["contract_id"])
    if contract.version != d.get("contract_version", contract.version):
        raise ValueError(f"contract {contract.id} is at version {contract.version}, the verdict was measured "
                         f"against {d['contract_version']}")
    seeds = d.get("seeds") or []
    if seeds and all(s.get("seed") is not None for s in seeds):
        kwargs.setdefault("seeds", [s["seed"] for s in seeds])
    elif not _hidden_key_set():
        raise ValueError("the verdict's hidden seeds were not disclosed; set KC_HIDDEN_SEED_KEY to replay it")
    flags = (d.get("environment") or {}).get("requested_flags")
    kwargs.setdefault("flags", flags)
    return run_contract(contract, impl or d["impl_id"], device=d.get("device", "cpu"), **kwargs)


def _hidden_key_set() -> bool:
    import os

    from .harness import HIDDEN_KEY_ENV

    return bool(os.environ.get(HIDDEN_KEY_ENV))


def resolve_impl_map(impl_map_or_impl, contracts) -> dict:
    """{contract id: impl ref or None}. A dict maps ids or classes; a bare module ('pkg.mod') or file
    ('/path/k.py') maps each contract to the function named by its signature
    (docs/contract-language.md#the-twelve-classes)."""
    out = {}
    for c in contracts:
        if isinstance(impl_map_or_impl, dict):
            out[c.id] = impl_map_or_impl.get(c.id, impl_map_or_impl.get(c.cls))
        elif isinstance(impl_map_or_impl, str) and ":" not in impl_map_or_impl:
            out[c.id] = f"{impl_map_or_impl}:{default_function_name(c)}"
        else:
            out[c.id] = impl_map_or_impl
    return out


def run_suite(impl_map_or_impl, *, device="cpu", seeds=None, progress=None, contracts=None, flags=None,
              time_limit_s=None, trace_path=None) -> list[Verdict]:
    """Every contract of the suite (or ``contracts``, ids/classes). ``progress(fraction, message)`` is
    called before each contract and as its cases finish, so a portal can show live per-contract progress."""
    all_contracts = load_suite()
    if contracts:
        all_contracts = [get_contract(c) for c in contracts]
    impls = resolve_impl_map(impl_map_or_impl, all_contracts)
    from .sandbox import SessionPool

    with SessionPool() as pool:
        return _run_all(all_contracts, impls, pool, device=device, seeds=seeds, progress=progress, flags=flags,
                        time_limit_s=time_limit_s, trace_path=trace_path)


def _run_all(all_contracts, impls, pool, *, device, seeds, progress, flags, time_limit_s, trace_path):
    verdicts = []
    n = len(all_contracts)
    for i, c in enumerate(all_contracts):
        if progress:
            progress(i / n, f"{c.cls}: starting")

        def sub(done, total, i=i, c=c):
            if progress:
                progress((i + done / max(total, 1)) / n, f"{c.cls}: case {done}/{total}")

        v = run_contract(c, impls[c.id], device=device, seeds=seeds, flags=flags, time_limit_s=time_limit_s,
                         trace_path=trace_path, progress=sub, pool=pool)
        verdicts.append(v)
        if progress:
            progress((i + 1) / n, f"{c.cls}: {v.verdict}")
    return verdicts
