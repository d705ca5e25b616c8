"""When the harness itself cannot run (no sandbox here), nothing is measured and nothing is signed: the job fails
with the reason, the CI status says ``error`` (not ``failure``), the calibrations say why. An operator who allows
unisolated runs gets verdicts that say so, on the page, in the CI payload and in the signed statement; and the
kernels worker role refuses to sign at all."""

import base64
import json

import pytest

from audit_portal.attestations.models import LogEntry
from audit_portal.attestations.services import AttestationError
from audit_portal.jobs.models import Job
from audit_portal.kernels import selectors, services
from audit_portal.kernels.models import ContractCalibration, Verdict
from audit_portal.accounts.selectors import Principal
from workers.contracts import isolation
from workers.contracts.loader import SPECS_DIR
from pipelines import calibrate_contracts, run_kernel_submission, sign_kernel_submission

pytestmark = pytest.mark.django_db(transaction=True)
SPEC = SPECS_DIR / "C-EXC-01.row_max.v0.1.0.yaml"


@pytest.fixture
def contract(db):
    services.store_contracts(services.parse_contract_files([SPEC]))
    return services.Contract.objects.get(contract_class="C-EXC-01")


@pytest.fixture
def no_bubblewrap(monkeypatch):
    real_which = isolation.shutil.which
    monkeypatch.setattr(isolation.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    isolation.probe.cache_clear()
    yield
    isolation.probe.cache_clear()


def _submit(project):
    return services.submit_conformance(
        project=project,
        submitted_by="ci",
        device="cpu",
        contracts=["C-EXC-01"],
        import_path="workers.contracts.impls.reference",
    )


def test_no_sandbox_fails_the_job_with_the_reason_and_signs_nothing(project, owner, contract, no_bubblewrap):
    submission = _submit(project)
    assert run_kernel_submission(submission.job_id) == "failed"
    job = Job.objects.get(pk=submission.job_id)
    assert "bubblewrap is not installed" in job.error and "AUDIT_KERNEL_ISOLATION=none" in job.error
    assert not Verdict.objects.filter(submission=submission).exists()  # no verdict was made up
    status = selectors.ci_status(Principal(user=owner), submission.implementation)
    assert status["state"] == "error"
    assert not Job.objects.filter(kind="kernel_signature").exists()
    assert not LogEntry.objects.filter(subject_kind="kernel_submission").exists()


def test_no_sandbox_fails_the_calibration_job_and_says_why(contract, no_bubblewrap):
    job = services.queue_calibration([contract])
    assert calibrate_contracts(job.pk) == "failed"
    job.refresh_from_db()
    assert "the harness could not run" in job.error
    calibration = ContractCalibration.objects.get(job=job)
    assert calibration.status == "failed" and "bubblewrap is not installed" in calibration.problems[0]


def test_unisolated_runs_are_allowed_only_explicitly_and_are_labelled(project, owner, contract, monkeypatch):
    monkeypatch.setenv("AUDIT_KERNEL_ISOLATION", "none")
    submission = _submit(project)
    assert run_kernel_submission(submission.job_id) == "succeeded"
    assert submission.isolation == ["none"]
    status = selectors.ci_status(Principal(user=owner), submission.implementation)
    assert status["isolation"] == ["none"] and "UNISOLATED" in status["description"]
    signing = Job.objects.get(kind="kernel_signature", subject_id=submission.pk)
    assert sign_kernel_submission(signing.pk) == "succeeded"
    entry = LogEntry.objects.get(subject_kind="kernel_submission", subject_id=submission.pk)
    assert entry.key_id
    signed_statement = json.loads(base64.b64decode(json.loads(entry.envelope)["payload"]))
    assert signed_statement["predicate"]["isolation"] == ["none"]  # the signed record says it ran unisolated


def test_the_kernels_role_refuses_to_sign(project, contract, settings):
    submission = _submit(project)
    assert run_kernel_submission(submission.job_id) == "succeeded"
    submission.refresh_from_db()
    settings.AUDIT_SIGNING_ENABLED = False
    with pytest.raises(AttestationError, match="holds no signing key"):
        services.sign_submission(submission)
    assert not LogEntry.objects.filter(subject_kind="kernel_submission").exists()
