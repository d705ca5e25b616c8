"""The kernel workflows (docs/contracts.md): a submission's conformance run, the calibration of contract versions,
and the signing of their results.

``run_kernel_submission`` and ``calibrate_contracts`` run on the kernels worker role (queues ``kernels`` /
``kernels-gpu``, ``calibration``): the submitted kernel is loaded only inside the engine's sandbox (bubblewrap: no
network, no view of this worker's files or processes), never in this process, and this role holds no signing key.
``sign_kernel_submission`` runs on the ``cpu`` queue, whose workers hold the key and never run submitted code.

* A retried job resumes where it stopped: contracts with a stored verdict are not measured again.
* KC-A: the planned classes the deployment's flags can change are measured a second time under those flags; those
  verdicts feed the grade and are not stored as rows.
* Each verdict is stored as it lands, with its per-measurement trace file when the runner wrote one.
* A failure of the harness itself (no sandbox, the sandbox program does not start) fails the job with the reason:
  it is never stored as a verdict about the kernel.

The sandboxed runner, its session pool and the calibration import torch: they are imported inside the functions
that use them, so importing this module (as every worker does at start) loads no torch.
"""

from __future__ import annotations

import math

from celery import shared_task

from audit_portal import task_names
from audit_portal.core.storage import artifact_path
from audit_portal.jobs.execution import JobInputError, run_job
from audit_portal.kernels import services
from audit_portal.kernels.models import Contract, Submission
from workers.contracts.grading import affected_classes, grade
from workers.contracts.loader import load_text


@shared_task(name=task_names.RUN_KERNEL_SUBMISSION, acks_late=True)
def run_kernel_submission(job_id: int) -> str:
    """Run every planned contract against the submission's implementation; store each verdict as it lands."""
    return run_job(job_id, run_submission)


@shared_task(name=task_names.CALIBRATE_CONTRACTS, acks_late=True)
def calibrate_contracts(job_id: int) -> str:
    """Three-state calibration (baseline / violating / conforming) of the contract versions in job.params."""
    return run_job(job_id, calibrate_versions)


@shared_task(name=task_names.SIGN_KERNEL_SUBMISSION, acks_late=True)
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


def harness_errors() -> tuple:
    """The errors that mean the harness failed, not the kernel (no sandbox, the sandbox program did not start)."""
    from workers.contracts.sandbox import HarnessFailure, SandboxUnavailable

    return (HarnessFailure, SandboxUnavailable)


def engine_contract(row: Contract):
    """The contract version as stored in the database (parsed from its stored source text)."""
    return load_text(row.source_text, source=row.source_name or row.contract_id)


def run_submission(job, progress) -> dict:
    """Run every planned contract against the submission's implementation; store each verdict as it lands, then
    the grade (which queues the signature)."""
    from workers.contracts.sandbox import SessionPool  # torch: imported by workers only

    submission = Submission.objects.select_related("implementation").filter(pk=job.subject_id).first()
    if submission is None:
        raise JobInputError(f"kernel submission {job.subject_id} no longer exists")
    impl = submission.implementation
    if impl.storage_name and not artifact_path(impl.storage_name).is_file():
        raise JobInputError(
            f"the uploaded module of implementation {impl.pk} (sha256 {impl.code_sha256[:12]}) "
            "is missing from the artifact store"
        )
    rows = {c.pk: c for c in Contract.objects.filter(pk__in=[e["contract"] for e in submission.plan])}
    missing = [e for e in submission.plan if e["contract"] not in rows]
    if missing:
        raise JobInputError(f"contract {missing[0]['contract_id']} v{missing[0]['version']} was removed")
    contracts = [engine_contract(rows[e["contract"]]) for e in submission.plan]
    flags = submission.deployment_flags or None
    affected = affected_classes(flags, contracts) if flags else {}
    again = [(e, c) for e, c in zip(submission.plan, contracts) if e["class"] in affected]
    run = _Run(submission, rows, progress, total=len(submission.plan) + len(again))
    with SessionPool() as pool:  # one sandbox for the submission's module, a fresh child per contract
        run.pool = pool
        run.measure_plan(contracts)
        under_flags = run.measure_again(again, flags)
    stored = [v.detail for v in submission.verdicts.all()]
    result = grade(
        stored,
        contracts=contracts,
        deployment_flags=flags,
        deployment_verdicts=under_flags,
        target=submission.target or None,
    )
    services.finish_submission(submission, result)
    return {
        "submission": submission.pk,
        "kc_c": result["kc_c"],
        "kc_a": result["kc_a"],
        "verdict_counts": result["verdict_counts"],
    }


class _Run:
    """One attempt at a submission's plan: progress over ``total`` contract runs, one sandbox pool."""

    def __init__(self, submission, rows, progress, *, total: int):
        self.submission, self.rows, self.progress, self.total = submission, rows, progress, total
        self.pool = None

    def measure_plan(self, contracts) -> None:
        """Every planned contract without a stored verdict (a retried job resumes where it stopped)."""
        measured = set(self.submission.verdicts.values_list("contract_id", flat=True))
        for i, (entry, contract) in enumerate(zip(self.submission.plan, contracts)):
            row = self.rows[entry["contract"]]
            if row.pk in measured:
                continue
            self.progress(i / self.total, f"{row.label}: starting", force=True)
            trace_name = services.trace_storage_name(self.submission, row)
            trace_path = artifact_path(trace_name)
            trace_path.parent.mkdir(parents=True, exist_ok=True)
            trace_path.unlink(missing_ok=True)
            detail, infinite = self.measure(i, entry, contract, trace_path=str(trace_path))
            services.record_verdict(
                self.submission,
                row,
                detail,
                margin_infinite=infinite,
                trace_storage=trace_name if trace_path.exists() else "",
            )
            # a forced progress event makes the submission page fetch the new row at once
            self.progress((i + 1) / self.total, f"{row.label}: {detail['verdict']}", force=True)

    def measure_again(self, again, flags) -> list:
        """The flag-affected contracts once more under the deployment's flags (KC-A); returned, not stored."""
        under_flags = []
        for j, (entry, contract) in enumerate(again, start=len(self.submission.plan)):
            row = self.rows[entry["contract"]]
            self.progress(j / self.total, f"{row.label}: again under the deployment flags", force=True)
            detail, _ = self.measure(j, entry, contract, flags=flags)
            under_flags.append(detail)
        return under_flags

    def measure(self, index: int, entry: dict, contract, *, trace_path=None, flags=None) -> tuple[dict, bool]:
        """One contract's verdict as a JSON-safe dict, and whether its margin is infinite (JSON has no ∞)."""
        cls = self.rows[entry["contract"]].label

        def cases_done(n, of):
            self.progress((index + n / max(of, 1)) / self.total, f"{cls}: case {n}/{of}")

        from workers.contracts.runner import run_contract  # torch: imported by workers only

        try:
            verdict = run_contract(
                contract,
                services.impl_reference(self.submission, entry),
                device=self.submission.device,
                trace_path=trace_path,
                progress=cases_done,
                flags=flags,
                pool=self.pool,
            )
        except harness_errors() as exc:
            raise JobInputError(
                f"the kernel harness could not run {contract.cls} (no verdict was measured): {exc}"
            ) from exc
        return verdict.to_dict(include_trace=False), verdict.margin is not None and math.isinf(verdict.margin)


def calibrate_versions(job, progress) -> dict:
    """Three-state calibration (baseline / violating / conforming) of the contract versions in ``job.params``. A
    harness failure is recorded on every calibration it left unfinished and fails the job with the reason; any
    other failure is that version's failed calibration."""
    from workers.contracts.calibration import calibrate  # torch: imported by workers only
    from workers.contracts.sandbox import SessionPool

    ids = list(job.params.get("contracts") or [])
    rows = {c.pk: c for c in Contract.objects.filter(pk__in=ids)}
    summary = {}
    with SessionPool() as pool:
        for i, pk in enumerate(ids):
            row = rows.get(pk)
            if row is None:
                continue
            progress(i / max(len(ids), 1), f"calibrating {row.label}", force=True)
            calibration = services.begin_calibration(job, row)
            try:
                result = calibrate(engine_contract(row), device="cpu", pool=pool)
            except harness_errors() as exc:
                reason = f"the harness could not run: {exc}"
                services.fail_pending_calibrations(job, reason)
                raise JobInputError(f"calibration stopped at {row.label}: {reason}") from exc
            except Exception as exc:  # noqa: BLE001 - recorded as this version's failed calibration
                result = {
                    "ok": False,
                    "problems": [f"calibration could not run: {type(exc).__name__}: {exc}"],
                    "states": {},
                }
            services.record_calibration(calibration, result)
            # label: a declared-property contract shares its class (and may share its version) with a suite one
            summary[f"{row.label} v{row.version}"] = "calibrated" if result.get("ok") else "failed"
    services.fail_pending_calibrations(job, "the contract version disappeared before calibration")
    return {
        "calibrated": sum(1 for s in summary.values() if s == "calibrated"),
        "failed": sorted(k for k, s in summary.items() if s == "failed"),
    }


__all__ = ["calibrate_contracts", "run_kernel_submission", "sign_kernel_submission"]
