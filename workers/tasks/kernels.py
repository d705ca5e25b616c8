"""Kernel conformance and contract calibration tasks (docs/contracts.md), and the signing of their results.

``run_kernel_submission`` and ``calibrate_contracts`` run on the kernels worker role (queues ``kernels`` /
``kernels-gpu``): the submitted kernel is loaded only inside the engine's sandbox (bubblewrap: no network, no
view of this worker's files or processes), never in this process, and this role holds no signing key.
``sign_kernel_submission`` runs on the ``cpu`` queue, whose workers hold the key and never run submitted code.
The contract that runs is the version stored in the database (parsed from its stored source text).

A failure of the harness itself (the sandbox cannot be created, the sandbox program does not start) fails the
job with the reason: it is never stored as a verdict about the kernel, and nothing is signed.
"""
from __future__ import annotations

import math

from celery import shared_task

from audit_portal.jobs.execution import JobInputError, run_job
from audit_portal.kernels import services
from audit_portal.kernels.models import Contract, ContractCalibration, Submission


def _engine_contract(row: Contract):
    from workers.contracts.loader import load_text

    return load_text(row.source_text, source=row.source_name or row.contract_id)


@shared_task(name="workers.tasks.run_kernel_submission", acks_late=True)
def run_kernel_submission(job_id: int) -> str:
    """Run every planned contract against the submission's implementation; store each verdict as it lands."""

    def work(job, progress):
        from workers.contracts.grading import affected_classes, grade
        from workers.contracts.sandbox import SessionPool

        submission = Submission.objects.select_related("implementation").filter(pk=job.subject_id).first()
        if submission is None:
            raise JobInputError(f"kernel submission {job.subject_id} no longer exists")
        impl = submission.implementation
        if impl.storage_name and not services.artifact_path(impl.storage_name).is_file():
            raise JobInputError(f"the uploaded module of implementation {impl.pk} (sha256 {impl.code_sha256[:12]}) "
                                "is missing from the artifact store")
        rows = {c.pk: c for c in Contract.objects.filter(pk__in=[e["contract"] for e in submission.plan])}
        missing = [e for e in submission.plan if e["contract"] not in rows]
        if missing:
            raise JobInputError(f"contract {missing[0]['contract_id']} v{missing[0]['version']} was removed")
        engine_contracts = [_engine_contract(rows[e["contract"]]) for e in submission.plan]
        flags = submission.deployment_flags or None
        # KC-A: the planned classes the deployment's flags can change are measured a second time under them
        affected = affected_classes(flags, engine_contracts) if flags else {}
        again = [(e, c) for e, c in zip(submission.plan, engine_contracts) if e["class"] in affected]
        measured = set(submission.verdicts.values_list("contract_id", flat=True))  # a retried job resumes where it stopped
        total = len(submission.plan) + len(again)
        with SessionPool() as pool:  # one sandbox for the submission's module, a fresh child per contract
            under_flags = _measure_all(submission, rows, engine_contracts, again, measured, total, flags, pool,
                                       progress)
        stored = [v.detail for v in submission.verdicts.all()]
        result = grade(stored, contracts=engine_contracts, deployment_flags=flags, deployment_verdicts=under_flags,
                       target=submission.target or None)
        services.finish_submission(submission, result)
        return {"submission": submission.pk, "kc_c": result["kc_c"], "kc_a": result["kc_a"],
                "verdict_counts": result["verdict_counts"]}

    return run_job(job_id, work)


def _measure_all(submission, rows, engine_contracts, again, measured, total, flags, pool, progress) -> list:
    """Every planned contract (stored one by one as it lands), then the flag-affected ones again under the
    deployment's flags (returned, for KC-A)."""
    for i, (entry, contract) in enumerate(zip(submission.plan, engine_contracts)):
        row = rows[entry["contract"]]
        if row.pk in measured:
            continue
        progress(i / total, f"{row.contract_class}: starting", force=True)
        trace_name = services.trace_storage_name(submission, row.contract_class)
        trace_path = services.artifact_path(trace_name)
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        trace_path.unlink(missing_ok=True)
        detail, infinite = _measure(contract, services.impl_reference(submission, entry), submission.device,
                                    _case_progress(progress, i, total, row.contract_class), pool,
                                    trace_path=str(trace_path))
        services.record_verdict(submission, row, detail, margin_infinite=infinite,
                                trace_storage=trace_name if trace_path.exists() else "")
        # a forced progress event makes the submission page fetch the new row at once
        progress((i + 1) / total, f"{row.contract_class}: {detail['verdict']}", force=True)

    under_flags = []
    for j, (entry, contract) in enumerate(again, start=len(submission.plan)):
        row = rows[entry["contract"]]
        progress(j / total, f"{row.contract_class}: again under the deployment flags", force=True)
        detail, _ = _measure(contract, services.impl_reference(submission, entry), submission.device,
                             _case_progress(progress, j, total, row.contract_class), pool, flags=flags)
        under_flags.append(detail)
    return under_flags


def _case_progress(progress, index: int, total: int, contract_class: str):
    def cases_done(n, of):
        progress((index + n / max(of, 1)) / total, f"{contract_class}: case {n}/{of}")
    return cases_done


def _measure(contract, impl: str, device: str, cases_done, pool, *, trace_path=None, flags=None) -> tuple[dict, bool]:
    """One contract's verdict as a JSON-safe dict, and whether its margin is infinite (JSON has no ∞). A harness
    failure raises (HarnessFailure / SandboxUnavailable) and fails the job: it is not a verdict."""
    from workers.contracts.runner import run_contract
    from workers.contracts.sandbox import HarnessFailure, SandboxUnavailable

    try:
        verdict = run_contract(contract, impl, device=device, trace_path=trace_path, progress=cases_done, flags=flags,
                               pool=pool)
    except (HarnessFailure, SandboxUnavailable) as exc:
        raise JobInputError(f"the kernel harness could not run {contract.cls} (no verdict was measured): {exc}") from exc
    return verdict.to_dict(include_trace=False), verdict.margin is not None and math.isinf(verdict.margin)


@shared_task(name="workers.tasks.calibrate_contracts", acks_late=True)
def calibrate_contracts(job_id: int) -> str:
    """Three-state calibration (baseline / violating / conforming) of the contract versions in job.params. A
    harness failure is recorded on every calibration it left unfinished and fails the job with the reason."""

    def work(job, progress):
        from workers.contracts.calibration import calibrate
        from workers.contracts.sandbox import HarnessFailure, SandboxUnavailable, SessionPool

        ids = list(job.params.get("contracts") or [])
        rows = {c.pk: c for c in Contract.objects.filter(pk__in=ids)}
        summary = {}
        with SessionPool() as pool:
            for i, pk in enumerate(ids):
                row = rows.get(pk)
                if row is None:
                    continue
                progress(i / max(len(ids), 1), f"calibrating {row.contract_class}", force=True)
                calibration = services.begin_calibration(job, row)
                try:
                    result = calibrate(_engine_contract(row), device="cpu", pool=pool)
                except (HarnessFailure, SandboxUnavailable) as exc:
                    reason = f"the harness could not run: {exc}"
                    ContractCalibration.objects.filter(job=job, status__in=["queued", "running"]).update(
                        status="failed", problems=[reason])
                    raise JobInputError(f"calibration stopped at {row.contract_class}: {reason}") from exc
                except Exception as exc:  # noqa: BLE001 - recorded as this version's failed calibration
                    result = {"ok": False, "problems": [f"calibration could not run: {type(exc).__name__}: {exc}"],
                              "states": {}}
                services.record_calibration(calibration, result)
                summary[f"{row.contract_class} v{row.version}"] = "calibrated" if result.get("ok") else "failed"
        ContractCalibration.objects.filter(job=job, status__in=["queued", "running"]).update(
            status="failed", problems=["the contract version disappeared before calibration"])
        return {"calibrated": sum(1 for s in summary.values() if s == "calibrated"),
                "failed": sorted(k for k, s in summary.items() if s == "failed")}

    return run_job(job_id, work)


@shared_task(name="workers.tasks.sign_kernel_submission", acks_late=True)
def sign_kernel_submission(job_id: int) -> str:
    """Sign a finished submission's stored verdicts and grade into the transparency log (cpu queue: this role
    holds the signing key and never runs submitted code)."""

    def work(job, progress):
        submission = Submission.objects.filter(pk=job.params.get("submission")).first()
        if submission is None:
            raise JobInputError(f"kernel submission {job.params.get('submission')} no longer exists")
        entry = services.sign_submission(submission)
        return {"submission": submission.pk, "log_index": entry.index}

    return run_job(job_id, work)


__all__ = ["calibrate_contracts", "run_kernel_submission", "sign_kernel_submission"]
