"""run_contract / run_suite: one contract against one implementation, to a :class:`Verdict`
(docs/contract-language.md#verdicts).

One run is seven named stages (:data:`STAGES`), each a function of a :class:`RunState` that can be run and
tested alone: resolve the contract -> screen (NOT_DECLARED / NOT_APPLICABLE) -> plan (seeds, cases, sensitivity
partners) -> launch (the sandbox's children run them; only raw bytes come back) -> findings (decoded and judged
here) -> measure (the protocol against the fp64 oracle; bound and relation per measurement) -> decide (verdict,
margin; signature and trace come with it).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import time

from . import SUITE_VERSION
from .coverage import coverage_statement
from .loader import Contract, load_declared, load_suite
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
    if directory is None:  # a declared-property contract is named by its full id (never by class)
        for c in load_declared():
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

    return dict(
        contract_id=contract.id,
        contract_version=contract.version,
        contract_class=contract.cls,
        family=contract.family,
        statistic_name=contract.statistic,
        impl_id=describe_impl(impl),
        device=device,
    )


def _margin(stat, bound) -> float:
    if stat is None or bound is None:
        return math.nan
    if isinstance(stat, float) and math.isnan(stat):
        return math.inf
    if bound > 0:
        return stat / bound
    return 0.0 if stat <= bound else math.inf


class Stop(Exception):
    """A stage reached the verdict (carried in ``verdict``): the later stages do not run."""

    def __init__(self, verdict: Verdict):
        super().__init__(verdict.verdict)
        self.verdict = verdict


@dataclasses.dataclass
class RunState:
    """What the stages of one run hand each other (:data:`STAGES`)."""

    contract_id: object
    impl: object
    device: str = "cpu"
    seeds: list | None = None
    flags: dict | None = None
    time_limit_s: float | None = None
    memory_limit_mb: int | None = None
    trace_path: str | None = None
    progress: object = None
    directory: str | None = None
    pool: object = None
    declared_unit_roundoff: object = None
    t0: float = dataclasses.field(default_factory=time.monotonic)
    contract: Contract | None = None
    base: dict = dataclasses.field(default_factory=dict)
    scale: float = 1.0
    proto: object = None
    plan: list = dataclasses.field(default_factory=list)
    case_list: list = dataclasses.field(default_factory=list)
    cases: dict = dataclasses.field(default_factory=dict)
    env_flags: dict = dataclasses.field(default_factory=dict)
    outcome: dict = dataclasses.field(default_factory=dict)
    common: dict = dataclasses.field(default_factory=dict)
    results: dict = dataclasses.field(default_factory=dict)
    findings: list = dataclasses.field(default_factory=list)
    evaluated: list = dataclasses.field(default_factory=list)
    kw: dict = dataclasses.field(default_factory=dict)

    def done(self, verdict, **kw) -> Verdict:
        """The verdict, with the run's identity, duration and (when asked for) its trace written."""
        b = dict(self.base)
        if "statistic_name" in kw:
            b.pop("statistic_name", None)
        if "reason" in kw:  # the candidate's words (exception messages, file names): escaped, no host paths
            kw["reason"] = clean(kw["reason"])
        for f in kw.get("findings") or ():
            f["detail"] = clean(f.get("detail", ""), 500)
        v = Verdict(verdict=verdict, **b, **kw)
        v.duration_s = round(time.monotonic() - self.t0, 4)
        if self.trace_path and v.trace:
            v.write_trace(self.trace_path)
        return v

    def stop(self, verdict, **kw):
        raise Stop(self.done(verdict, **kw))


def stage_resolve(st: RunState) -> None:
    """1. The contract, the run's identity and, on the open track, the bound scale of the declared precision."""
    from .schema import ENV_FLAGS

    unknown = sorted(set(st.flags or {}) - set(ENV_FLAGS))
    if unknown:
        raise ValueError(f"unknown environment flag(s) {unknown}; known: {', '.join(ENV_FLAGS)}")
    st.contract = contract = get_contract(st.contract_id, st.directory)
    st.base = _base(contract, st.impl, st.device)
    if st.declared_unit_roundoff is not None:
        from .expr import parse as _parse

        u_decl = float(_parse(st.declared_unit_roundoff).evaluate({}))
        if not (math.isfinite(u_decl) and contract.unit_roundoff <= u_decl < 1):
            raise ValueError(
                f"declared unit roundoff {st.declared_unit_roundoff!r} must lie in "
                f"[{contract.unit_roundoff:g}, 1): the open track is for lower precision"
            )
        st.scale = u_decl / contract.unit_roundoff
        st.base.update(
            {
                "track": "open",
                "declaration": {
                    "unit_roundoff": u_decl,
                    "bound_scale": st.scale,
                    "contract_unit_roundoff": contract.unit_roundoff,
                },
            }
        )


def stage_screen(st: RunState) -> None:
    """2. NOT_DECLARED (a policy the class needs is missing), NOT_APPLICABLE (device outside the platforms, no
    implementation), INCONCLUSIVE (no CUDA device here)."""
    import torch

    from . import protocols

    contract = st.contract
    missing = [p for p in protocols.REQUIRED_POLICIES.get(contract.cls, ()) if p not in contract.policies]
    if missing:
        st.stop(
            "NOT_DECLARED",
            reason=f"policy field(s) {', '.join('policies.' + m for m in missing)} not declared by the contract",
        )
    platforms = contract.data["scope"].get("platforms") or ["any"]
    dev_kind = st.device.split(":")[0]
    if "any" not in platforms and dev_kind not in [p if isinstance(p, str) else p.get("device") for p in platforms]:
        st.stop("NOT_APPLICABLE", reason=f"device {st.device!r} is outside the contract's platforms {platforms}")
    if dev_kind == "cuda" and not torch.cuda.is_available():
        st.stop("INCONCLUSIVE", reason="device 'cuda' requested but no CUDA device is available here")
    if st.impl is None:
        st.stop("NOT_APPLICABLE", reason="no implementation supplied for this contract's op")


def stage_plan(st: RunState) -> None:
    """3. Seed plan (public + hidden), the protocol's cases and their input-sensitivity partners, the flags."""
    from . import protocols
    from .harness import add_sensitivity_cases, seed_plan

    contract = st.contract
    st.proto = protocols.get(contract.protocol)
    st.plan = seed_plan(contract, st.seeds)
    st.case_list = st.proto.cases(contract, st.plan)
    if "input_sensitivity" in contract.protocol_params["harness_invariants"]:
        st.case_list = add_sensitivity_cases(st.proto, st.case_list)
    st.cases = {c.key: c for c in st.case_list}
    st.env_flags = dict(contract.env)
    st.env_flags.update(st.flags or {})


def stage_launch(st: RunState) -> None:
    """4. The sandbox runs the cases (fresh children for repeat launches) and hands back raw bytes; TIMEOUT and
    CRASH end the run here."""
    from .fingerprint import fingerprint
    from .sandbox import run_in_sandbox

    params = st.contract.protocol_params
    limit = float(st.time_limit_s if st.time_limit_s is not None else params.get("time_limit_s", DEFAULT_TIME_LIMIT_S))
    mem = (
        st.memory_limit_mb if st.memory_limit_mb is not None else params.get("memory_limit_mb", DEFAULT_MEMORY_LIMIT_MB)
    )
    reference = getattr(st.proto, "REVERSED_ORDER_REFERENCE", None)
    st.outcome = outcome = run_in_sandbox(
        st.impl,
        st.case_list,
        device=st.device,
        flags=st.env_flags,
        time_limit_s=limit,
        memory_limit_mb=mem,
        reference=reference,
        progress=st.progress,
        pool=st.pool,
    )
    seeds_info = [
        {"seed": s if (c != "hidden" or not _hidden_key_set()) else None, "seed_class": c} for s, c in st.plan
    ]
    st.common = dict(
        environment=fingerprint(st.device, outcome, st.env_flags), seeds=seeds_info, impl_hash=outcome.get("impl_hash")
    )
    kind = outcome.get("kind")
    if kind == "timeout":
        st.stop("TIMEOUT", reason=outcome["error"]["message"], **st.common)
    if kind in ("crash", "child_error"):
        st.stop("CRASH", reason=f"{outcome['error']['type']}: {outcome['error']['message']}", **st.common)
    if kind == "load_error":
        e = outcome["error"]
        st.stop("CRASH", reason=f"could not load implementation: {e['type']}: {e['message']}", **st.common)


def stage_findings(st: RunState) -> None:
    """5. Decode the bytes here, in the judge's process; the generic harness findings (channel, exceptions, shape,
    mutated inputs, unwritten destinations, replay, sensitivity). An exception in the candidate is a CRASH."""
    from .harness import channel_findings, decode_results, generic_findings

    try:
        st.results = decode_results(st.outcome, st.cases)
        st.findings = channel_findings(st.outcome) + generic_findings(st.contract, st.cases, st.results)
    except Exception as exc:  # noqa: BLE001 - the channel is written by the candidate's process
        st.stop("CRASH", reason=f"malformed result from the sandbox: {type(exc).__name__}: {exc}", **st.common)
    crash = [f for f in st.findings if f["severity"] == "crash"]
    if crash:
        st.stop(
            "CRASH",
            reason=f"implementation raised on case {crash[0]['case']}: {crash[0]['detail']}",
            findings=st.findings,
            **st.common,
        )


def _later_launches(st: RunState) -> list:
    """The measurements of the launches after the first that gave other bits (harness.other_launches), each marked
    with its launch index. A BITWISE contract already fails on the differing bits (replay_mismatch), so only the
    contracts that allow run-to-run variation measure them: a variation is allowed, a violation is not."""
    from .harness import other_launches

    if st.contract.policies.get("determinism") == "BITWISE":
        return []
    extra = []
    for k, variant, changed in other_launches(st.results):
        for m in st.proto.measure(st.contract, st.cases, variant):
            if changed.intersection(m.get("cases") or ()):
                extra.append(dict(m, launch=k))
    return extra


def stage_measure(st: RunState) -> None:
    """6. The protocol's measurements against the fp64 oracle, each with its bound and relation evaluated, and
    the trace record of each."""
    contract, base = st.contract, st.base
    try:
        measurements = st.proto.measure(contract, st.cases, st.results) + _later_launches(st)
    except Exception as exc:  # noqa: BLE001 - an unmeasurable output is reported, never a traceback
        st.stop(
            "INCONCLUSIVE", reason=f"measurement failed: {type(exc).__name__}: {exc}", findings=st.findings, **st.common
        )
    fp = st.common["environment"]
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat()
    trace, evaluated = [], []
    for m in measurements:
        names = dict(m["names"])
        try:
            bound = float(contract.bound.evaluate(names)) * st.scale
            names["bound"] = bound
            if st.scale != 1.0:
                names["u"] = names.get("u", contract.unit_roundoff) * st.scale
            ok = contract.relation.holds(names)
        except Exception as exc:  # noqa: BLE001 - a relation or signature that cannot be evaluated is a stated result, not a crash
            st.stop(
                "INCONCLUSIVE",
                reason=f"bound/relation could not be evaluated: {exc}",
                findings=st.findings,
                **st.common,
            )
        stat = float(names[contract.statistic])
        margin = _margin(stat, bound)
        evaluated.append((m, stat, bound, margin, ok))
        trace.append(
            {
                "contract_id": contract.id,
                "contract_version": contract.version,
                "impl_id": base["impl_id"],
                "impl_hash": st.outcome.get("impl_hash"),
                "platform": {
                    "device": st.device,
                    "torch": fp.get("torch"),
                    "cpu": fp.get("cpu"),
                    "cuda": fp.get("cuda"),
                    "flags": fp.get("flags"),
                },
                "seed_class": m.get("seed_class"),
                "seed": m.get("seed") if (m.get("seed_class") != "hidden" or not _hidden_key_set()) else None,
                "input_hash": m.get("input_hash"),
                "sweep_point": m.get("point"),
                "statistic_name": contract.statistic,
                "statistic": stat,
                "bound": bound,
                "margin": margin,
                "names": names,
                "verdict": "PASS" if ok else "FAIL",
                "timestamp": stamp,
                "suite_version": SUITE_VERSION,
            }
        )
    try:
        signature = st.proto.signature(contract, measurements)
    except Exception as exc:  # noqa: BLE001 - a relation or signature that cannot be evaluated is a stated result, not a crash
        signature = {"pattern": None, "error": f"{type(exc).__name__}: {exc}"}
    signature["findings"] = sorted({f["kind"] for f in st.findings})
    hidden = any(c == "hidden" for _, c in st.plan)
    harness = {
        "invariants": list(contract.protocol_params["harness_invariants"]),
        "separate_process": True,
        "isolation": (st.outcome.get("isolation") or {}).get("mode"),
        "hidden_seeds": hidden,
        "cases": len(st.cases),
        "child_wall_s": round(st.outcome.get("wall_s", 0), 3),
        "children": st.outcome.get("children", 1),
        "grad_modes": st.outcome.get("grad_modes", []),
    }
    st.evaluated = evaluated
    st.kw = dict(
        findings=st.findings,
        measurements=len(evaluated),
        signature=signature,
        trace=trace,
        harness=harness,
        assurance_level=3 if hidden else 1,
        **st.common,
    )
    st.kw.update(
        passed_measurements=sum(1 for e in evaluated if e[4]),
        coverage=coverage_statement(contract, [e[0] for e in evaluated], st.device, st.plan, st.results),
    )


def stage_decide(st: RunState) -> Verdict:
    """7. The verdict from the evaluated measurements and the harness findings: FAIL (a relation or an invariant
    violated), QUALITY_WARNING, PASS, or INCONCLUSIVE (nothing measured and nothing failed); its margin."""
    contract, evaluated, kw = st.contract, st.evaluated, dict(st.kw)
    fails = [f for f in st.findings if f["severity"] == "fail"]
    if not evaluated:
        if fails:  # a refused output (a subclass, an active mode) or a tampered channel: never merely undecided
            return st.done("FAIL", reason=_harness_note(fails), **kw)
        return st.done("INCONCLUSIVE", reason="no valid measurement", **kw)
    failing = [e for e in evaluated if not e[4]]
    if failing:
        # the failing clause's own statistic and bound (a secondary clause such as probe_mismatch == 0 may be the
        # one that failed while the headline statistic is within its bound)
        failing = [(m, *_clause_figures(contract, m, stat, bound), ok) for m, stat, bound, _, ok in failing]
    pool = failing or evaluated
    # worst = largest margin; among infinite margins (T0 bounds), the largest statistic
    worst = max(
        pool, key=lambda e: (e[3] if not math.isnan(e[3]) else math.inf, e[1] if not math.isnan(e[1]) else math.inf)
    )
    m, stat, bound, margin, _ = worst
    if failing:
        kw.update(
            failing_clause=m.get("_clause") or {},
            statistic_name=m.get("_clause", {}).get("statistic_name") or contract.statistic,
        )
    kw.update(statistic=stat, bound=bound, margin=margin)
    harness_note = _harness_note(fails) if fails else ""
    if failing:
        names = ", ".join(
            f"{k} = {v:.4g}"
            for k, v in m["names"].items()
            if isinstance(v, (int, float)) and k not in ("bound",) and k in contract.relation.names
        )
        return st.done(
            "FAIL",
            reason=f"relation '{contract.data['postcondition']['relation']}' violated at "
            f"{m.get('point')} (seed class {m.get('seed_class')}): {names}, bound = "
            f"{bound:.4g}; {len(failing)}/{len(evaluated)} measurements fail"
            + (f"; {harness_note}" if harness_note else ""),
            **kw,
        )
    if fails:
        return st.done("FAIL", reason=harness_note, **kw)
    if bound > 0 and margin > contract.quality_warning_fraction:
        return st.done(
            "QUALITY_WARNING", reason=f"passes but uses {margin:.0%} of the budget at {m.get('point')}", **kw
        )
    return st.done("PASS", reason=f"{len(evaluated)} measurements within bound; worst margin {margin:.3g}", **kw)


# the seven stages of run_contract, in order; each takes the RunState, and may end the run with Stop
STAGES = (stage_resolve, stage_screen, stage_plan, stage_launch, stage_findings, stage_measure, stage_decide)


def run_contract(
    contract_id,
    impl,
    *,
    device="cpu",
    seeds=None,
    flags=None,
    time_limit_s=None,
    memory_limit_mb=None,
    trace_path=None,
    progress=None,
    directory=None,
    pool=None,
    declared_unit_roundoff=None,
) -> Verdict:
    """Run one contract against ``impl`` (callable, 'package.module:function', or '/path/file.py:function'),
    through the seven stages of :data:`STAGES`: resolve, screen, plan, launch, findings, measure, decide.

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
    st = RunState(
        contract_id,
        impl,
        device=device,
        seeds=seeds,
        flags=flags,
        time_limit_s=time_limit_s,
        memory_limit_mb=memory_limit_mb,
        trace_path=trace_path,
        progress=progress,
        directory=directory,
        pool=pool,
        declared_unit_roundoff=declared_unit_roundoff,
    )
    try:
        for stage in STAGES[:-1]:
            stage(st)
        return STAGES[-1](st)
    except Stop as stop:
        return stop.verdict


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
    m["_clause"] = {
        "clause": bad["clause"],
        "statistic_name": bad["lhs"],
        "statistic": lhs,
        "op": bad["op"],
        "bound_expr": bad["rhs"],
        "bound": rhs,
        "point": m.get("point"),
    }
    return lhs, rhs, _margin(lhs, rhs) if bad["op"] in ("<=", "<", "==") else math.inf


def replay(verdict, impl=None, **kwargs) -> Verdict:
    """Re-run a recorded verdict (a Verdict or its to_dict()) with the same contract, device, flags and seeds.

    Hidden seeds that were not disclosed (``seed: null``) are regenerated from ``$KC_HIDDEN_SEED_KEY``, which
    must then be the key of the original run; a changed contract version is refused."""
    d = verdict.to_dict(include_trace=False) if hasattr(verdict, "to_dict") else dict(verdict)
    contract = get_contract(d["contract_id"])
    if contract.version != d.get("contract_version", contract.version):
        raise ValueError(
            f"contract {contract.id} is at version {contract.version}, the verdict was measured "
            f"against {d['contract_version']}"
        )
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


def run_suite(
    impl_map_or_impl,
    *,
    device="cpu",
    seeds=None,
    progress=None,
    contracts=None,
    flags=None,
    time_limit_s=None,
    trace_path=None,
) -> list[Verdict]:
    """Every contract of the suite (or ``contracts``, ids/classes). ``progress(fraction, message)`` is
    called before each contract and as its cases finish, so a portal can show live per-contract progress."""
    all_contracts = load_suite()
    if contracts:
        all_contracts = [get_contract(c) for c in contracts]
    impls = resolve_impl_map(impl_map_or_impl, all_contracts)
    from .sandbox import SessionPool

    with SessionPool() as pool:
        return _run_all(
            all_contracts,
            impls,
            pool,
            device=device,
            seeds=seeds,
            progress=progress,
            flags=flags,
            time_limit_s=time_limit_s,
            trace_path=trace_path,
        )


def _run_all(all_contracts, impls, pool, *, device, seeds, progress, flags, time_limit_s, trace_path):
    verdicts = []
    n = len(all_contracts)
    for i, c in enumerate(all_contracts):
        if progress:
            progress(i / n, f"{c.cls}: starting")

        def sub(done, total, i=i, c=c):
            if progress:
                progress((i + done / max(total, 1)) / n, f"{c.cls}: case {done}/{total}")

        v = run_contract(
            c,
            impls[c.id],
            device=device,
            seeds=seeds,
            flags=flags,
            time_limit_s=time_limit_s,
            trace_path=trace_path,
            progress=sub,
            pool=pool,
        )
        verdicts.append(v)
        if progress:
            progress((i + 1) / n, f"{c.cls}: {v.verdict}")
    return verdicts
