"""Three-state calibration (the ``calibration`` part, docs/contract-language.md#three-state-calibration;
the grader is itself graded).

For every contract and every fixture it lists:

* **baseline** — must *fail* the naive functional check (5 trials of allclose(atol=1e-2, rtol=1e-2) against
  the fp32 reference at one benchmark shape, docs/contract-language.md#why-contracts) and must not PASS the
  contract;
* **violating** — must *pass* the naive check and *FAIL* the contract (the contract catches what allclose
  misses). A fixture marked ``platform_dependent`` (stock torch.mm for C-ORD-03) is reported, not required;
* **conforming** — must PASS the contract (not QUALITY_WARNING: a reference using more than half its budget
  means the tolerance is mis-derived) and pass the naive check.

Contract runs use the public seeds only (explicit), so calibration is reproducible. The naive check runs the
trusted fixtures in this process. ``calibrate_all`` runs contracts on a small thread pool (each contract run
is a sandboxed child process, so threads here only wait and measure); each thread keeps its own sandboxes (one
per fixture module) for all the contracts it calibrates, so the suite pays a few torch imports, not one per run.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from . import protocols
from .runner import get_contract, run_contract
from .sandbox import SessionPool, load_impl

NAIVE_TRIALS = 5
NAIVE_ATOL = NAIVE_RTOL = 1e-2


def _ref(entry):
    return (
        (entry, False, "")
        if isinstance(entry, str)
        else (entry["impl"], bool(entry.get("platform_dependent")), entry.get("note", ""))
    )


def naive_check(contract, impl_ref, reference_ref=None, trials: int = NAIVE_TRIALS) -> bool:
    """T4 functional smoke check: what today's benchmarks run. True if all trials pass allclose."""
    proto = protocols.get(contract.protocol)
    impl = load_impl(impl_ref)
    ref = load_impl(reference_ref or _ref(contract.calibration["conforming"][0])[0])
    if hasattr(proto, "naive_check"):
        return all(proto.naive_check(impl, ref, t, contract) for t in range(trials))
    for t in range(trials):
        args = proto.naive_args(contract, t)
        try:
            out = impl(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        except Exception:  # noqa: BLE001 - a fixture that raises fails the functional check
            return False
        expected = ref(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        if not isinstance(out, torch.Tensor) or out.shape != expected.shape:
            return False
        if not torch.allclose(out.double(), expected.double(), atol=NAIVE_ATOL, rtol=NAIVE_RTOL):
            return False
    return True


def _summary(v):
    """One implementation's row, strict JSON (it is stored in PostgreSQL): the verdict's own JSON form, where a
    non-finite headline number is null and an infinite measured error in the failing clause is "inf"."""
    d = v.to_dict(include_trace=False)
    return {
        "verdict": v.verdict,
        "statistic": d["statistic"],
        "bound": d["bound"],
        "margin": d["margin"],
        "pattern": d["signature"].get("pattern"),
        "reason": v.reason,
        "measurements": v.measurements,
        "passed_measurements": v.passed_measurements,
        "failing_clause": d["failing_clause"],  # the clause and the point that failed: what a violator was caught by
        "duration_s": v.duration_s,
    }


def calibrate(contract_id, *, device: str = "cpu", pool: SessionPool | None = None) -> dict:
    """Prove the three states for one contract. ``ok`` is False with ``problems`` listing every failure.
    A harness failure (the sandbox cannot run) raises; it is not a calibration result."""
    if pool is None:
        with SessionPool() as own:
            return calibrate(contract_id, device=device, pool=own)
    t0 = time.monotonic()
    c = get_contract(contract_id)
    seeds = list(c.protocol_params["seeds"]["public"])
    problems, states = [], {"baseline": [], "violating": [], "conforming": []}
    for state in ("conforming", "violating", "baseline"):
        for entry in c.calibration.get(state) or []:
            ref, platform_dependent, note = _ref(entry)
            v = run_contract(c, ref, device=device, seeds=seeds, pool=pool)
            naive = naive_check(c, ref)
            row = {"impl": ref, "naive_pass": naive, **_summary(v)}
            if state == "conforming":
                ok = v.verdict == "PASS" and naive
                why = f"conforming {ref}: verdict {v.verdict} (naive {'pass' if naive else 'FAIL'}): {v.reason}"
            elif state == "violating":
                ok = v.verdict == "FAIL" and naive
                why = (
                    f"violating {ref}: "
                    + ("contract did not catch it" if v.verdict != "FAIL" else "")
                    + (f" verdict {v.verdict}" if v.verdict != "FAIL" else "")
                    + ("; naive check already fails (violator not subtle)" if not naive else "")
                )
                if platform_dependent:
                    row.update(platform_dependent=True, note=note, caught_here=v.verdict == "FAIL")
            else:
                ok = (not naive) and v.verdict not in ("PASS", "QUALITY_WARNING")
                why = f"baseline {ref}: naive {'passes' if naive else 'fails'}, verdict {v.verdict}"
            row["ok"] = ok
            states[state].append(row)
            if not ok and not platform_dependent:
                problems.append(why)
    return {
        "contract_id": c.id,
        "class": c.cls,
        "version": c.version,
        "ok": not problems,
        "problems": problems,
        "states": states,
        "seeds": seeds,
        "duration_s": round(time.monotonic() - t0, 3),
    }


def calibrate_all(contracts=None, *, device: str = "cpu", workers: int | None = None) -> dict:
    from .loader import load_suite

    ids = [get_contract(x).id for x in contracts] if contracts else [c.id for c in load_suite()]
    t0 = time.monotonic()
    workers = workers or min(len(ids), max(1, (os.cpu_count() or 2)))
    pools, local, lock = [], threading.local(), threading.Lock()

    def one(contract_id):
        if not hasattr(local, "pool"):
            local.pool = SessionPool()
            with lock:
                pools.append(local.pool)
        return calibrate(contract_id, device=device, pool=local.pool)

    try:
        with ThreadPoolExecutor(max_workers=workers) as ex:
            results = list(ex.map(one, ids))
    finally:
        for pool in pools:
            pool.close()
    return {
        "ok": all(r["ok"] for r in results),
        "contracts": results,
        "problems": [p for r in results for p in r["problems"]],
        "duration_s": round(time.monotonic() - t0, 2),
        "environment": {"torch": torch.__version__, "device": device, "threads": torch.get_num_threads()},
    }


def format_table(report: dict) -> str:
    lines = [
        f"{'class':9s} {'state':10s} {'implementation':44s} {'naive':6s} {'verdict':16s} {'statistic':>11s} "
        f"{'bound':>9s} {'margin':>9s}  ok"
    ]
    for r in report["contracts"]:
        for state in ("conforming", "violating", "baseline"):
            for row in r["states"][state]:

                def f(x):
                    return "-" if x is None else (f"{x:.3g}" if isinstance(x, (int, float)) else str(x))

                tag = " (platform-dependent)" if row.get("platform_dependent") else ""
                lines.append(
                    f"{r['class']:9s} {state:10s} {row['impl'].split(':')[-1][:44]:44s} "
                    f"{'pass' if row['naive_pass'] else 'FAIL':6s} {row['verdict']:16s} {f(row['statistic']):>11s} "
                    f"{f(row['bound']):>9s} {f(row['margin']):>9s}  {'yes' if row['ok'] else 'NO'}{tag}"
                )
    lines.append(
        f"calibration {'OK' if report['ok'] else 'FAILED'}: {len(report['contracts'])} contracts, "
        f"{len(report['problems'])} problem(s), {report['duration_s']} s"
    )
    lines += [f"  problem: {p}" for p in report["problems"]]
    return "\n".join(lines)
