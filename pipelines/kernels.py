"""Kernel conformance and contract calibration tasks (docs/contracts.md), and the signing of their results.

``run_kernel_submission`` and ``calibrate_contracts`` run on the kernels worker role (queues ``kernels`` /
``kernels-gpu``): the submitted kernel is loaded only inside the engine's sandbox (bubblewrap: no network, no
view of this worker's files or processes), never in this process, and this role holds no signing key.
``sign_kernel_submission`` runs on the ``cpu`` queue, whose workers hold the key and never run submitted code.

Thin: each task hands the torch-based engine to the kernels app's orchestration
(:mod:`audit_portal.kernels.conformance`: resume after a retry, the pass under the deployment's flags, trace files,
storing verdicts), which the web tier may not import with torch.
"""

from __future__ import annotations

from celery import shared_task

from audit_portal import task_names
from audit_portal.jobs.execution import JobInputError, run_job
from audit_portal.kernels import conformance, services
from audit_portal.kernels.models import Submission


def _engine() -> conformance.Engine:
    from workers.contracts.calibration import calibrate
    from workers.contracts.runner import run_contract
    from workers.contracts.sandbox import HarnessFailure, SandboxUnavailable, SessionPool

    return conformance.Engine(
        run_contract=run_contract,
        calibrate=calibrate,
        session_pool=SessionPool,
        harness_errors=(HarnessFailure, SandboxUnavailable),
    )


@shared_task(name=task_names.RUN_KERNEL_SUBMISSION, acks_late=True)
def run_kernel_submission(job_id: int) -> str:
    """Run every planned contract against the submission's implementation; store each verdict as it lands."""
    return run_job(job_id, lambda job, progress: conformance.run_submission(job, progress, _engine()))


@shared_task(name=task_names.CALIBRATE_CONTRACTS, acks_late=True)
def calibrate_contracts(job_id: int) -> str:
    """Three-state calibration (baseline / violating / conforming) of the contract versions in job.params."""
    return run_job(job_id, lambda job, progress: conformance.calibrate(job, progress, _engine()))


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


__all__ = ["calibrate_contracts", "run_kernel_submission", "sign_kernel_submission"]
