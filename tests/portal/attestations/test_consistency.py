"""``manage.py check_consistency`` against a portal whose data was produced by the real upload path and the
real tasks (run in-process), then broken on purpose: each break must be reported and fail the command."""

import json
import os
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit_portal.certificates.models import RunCertificate
from audit_portal.fidelity.models import FidelityReport
from audit_portal.jobs import consistency
from audit_portal.jobs.models import Job, JobState
from audit_portal.runs.models import Upload
from pipelines import certify_upload, fidelity_audit, validate_upload

from ..conftest import as_file, gz, jsonl, records, upload_url

pytestmark = pytest.mark.django_db


def run_check(*args) -> tuple[bool, str]:
    out = StringIO()
    try:
        call_command("check_consistency", *args, stdout=out)
        return True, out.getvalue()
    except CommandError:
        return False, out.getvalue()


@pytest.fixture
def processed(api, project, settings):
    """One upload taken through validation, certification and the fidelity audit by the real tasks."""
    response = api.post(
        upload_url(project), {"file": as_file(gz(jsonl(records(trajectories=4))), "r.jsonl.gz")}, format="multipart"
    )
    assert response.status_code == 201, response.content
    upload = Upload.objects.get(pk=response.json()["id"])
    assert validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk) == "succeeded"
    for kind, task in (("certify_upload", certify_upload), ("fidelity_audit", fidelity_audit)):
        job = Job.objects.get(subject_id=upload.pk, kind=kind)
        assert task(job.pk) == "succeeded", Job.objects.get(pk=job.pk).error
    upload.refresh_from_db()
    return upload


def test_a_portal_built_by_the_real_path_is_consistent(processed):
    ok, out = run_check()
    assert ok, out
    assert "consistent" in out and "certificates=1" in out and "fidelity_reports=1" in out
    assert f"bytes_rehashed={processed.size_bytes}" in out


def test_json_output_lists_the_problems(processed, settings):
    (Path(settings.ARTIFACT_ROOT) / processed.storage_name).unlink()
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("check_consistency", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["ok"] is False and any("missing" in p for p in data["problems"])


def test_a_missing_upload_file_is_a_problem(processed, settings):
    (Path(settings.ARTIFACT_ROOT) / processed.storage_name).unlink()
    ok, out = run_check()
    assert not ok
    assert f"upload {processed.pk}" in out and "missing from the artifact store" in out


def test_changed_bytes_of_the_same_size_are_caught_by_rehashing(processed, settings):
    path = Path(settings.ARTIFACT_ROOT) / processed.storage_name
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF  # same length, different content
    path.write_bytes(bytes(data))
    ok, out = run_check()
    assert not ok and "SHA-256 of the stored file" in out
    # size-only mode cannot see it: the re-hash is what catches changed bytes
    ok_sizes, _ = run_check("--no-rehash")
    assert ok_sizes


def test_a_truncated_file_is_caught_without_rehashing(processed, settings):
    path = Path(settings.ARTIFACT_ROOT) / processed.storage_name
    path.write_bytes(path.read_bytes()[:-10])
    ok, out = run_check("--no-rehash")
    assert not ok and f"{processed.size_bytes} recorded" in out


def test_a_finished_certification_without_its_certificate_is_a_problem(processed):
    RunCertificate.objects.filter(upload=processed).delete()
    ok, out = run_check()
    assert not ok and "no certificate is stored" in out


def test_lost_sequence_rows_are_a_problem(processed):
    cert = RunCertificate.objects.get(upload=processed)
    victim = cert.sequence_summaries.order_by("line").first()
    victim.delete()
    ok, out = run_check()
    assert not ok and f"{cert.sequences - 1} sequence summaries stored, {cert.sequences} certified" in out


def test_duplicate_sequence_rows_are_a_problem(processed):
    cert = RunCertificate.objects.get(upload=processed)
    row = cert.sequence_summaries.order_by("line").first()
    row.pk = None
    row.save()
    cert.sequences += 1  # even with the count adjusted, two rows for one line are duplicate results
    cert.save(update_fields=["sequences"])
    ok, out = run_check()
    assert not ok and "duplicate results" in out


def test_a_finished_audit_without_its_report_or_calls_is_a_problem(processed):
    report = FidelityReport.objects.get(upload=processed)
    report.calls.all().delete()
    ok, out = run_check()
    assert not ok and f"0 call rows stored, {report.calls_total} audited" in out
    report.delete()
    ok, out = run_check()
    assert not ok and "no fidelity report is stored" in out


def test_a_job_stuck_running_past_the_heartbeat_timeout_is_a_problem(processed, settings):
    job = Job.objects.get(subject_id=processed.pk, kind="certify_upload")
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, heartbeat_at=timezone.now() - timedelta(seconds=5))
    ok, _ = run_check()
    assert ok  # a live job reporting recently is fine
    Job.objects.filter(pk=job.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.JOB_HEARTBEAT_TIMEOUT_SECONDS + 60)
    )
    ok, out = run_check()
    assert not ok and f"job {job.pk} (certify_upload) is running" in out and "stuck" in out


def test_a_failed_job_must_carry_its_reason(processed):
    job = Job.objects.get(subject_id=processed.pk, kind="fidelity_audit")
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, error="")
    ok, out = run_check()
    assert not ok and "failed without a reason" in out


def test_an_upload_left_processing_after_its_validation_ended_is_a_problem(processed):
    Upload.objects.filter(pk=processed.pk).update(stage="processing")
    ok, out = run_check()
    assert not ok and "still processing although its validation job" in out


def test_a_stray_file_is_a_half_stored_upload_once_the_grace_period_passed(processed, settings):
    stray = Path(settings.ARTIFACT_ROOT) / "uploads" / "ab" / ("ab" + "0" * 62 + ".jsonl")
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"{}\n")
    ok, _ = run_check()
    assert ok  # an upload may be between its file move and its row commit
    old = time.time() - 3600
    os.utime(stray, (old, old))
    ok, out = run_check()
    assert not ok and "stray file uploads/ab/" in out and "half-stored" in out


def test_the_transparency_log_check_is_registered_by_its_app_and_reports_what_verify_log_finds(processed, monkeypatch):
    from audit_portal.attestations import consistency as log_check
    from audit_portal.attestations.selectors import LogVerification

    calls = []

    def verify_log():
        calls.append(1)
        outcome = LogVerification()
        outcome.problem("entry 3: hash chain broken")
        outcome.warn("the witness lags the log by 2 entries")
        return outcome

    monkeypatch.setattr(log_check.selectors, "verify_log", verify_log)
    report = consistency.check(rehash=False)
    assert calls == [1] and not report.ok
    assert "transparency log: entry 3: hash chain broken" in report.problems
    assert "transparency log: the witness lags the log by 2 entries" in report.warnings

    monkeypatch.setattr(log_check.selectors, "verify_log", LogVerification)  # a log with nothing wrong
    ok, out = run_check()
    assert ok and "transparency_log=1" in out

    def raising():
        raise ValueError("signature mismatch at index 7")

    monkeypatch.setattr(log_check.selectors, "verify_log", raising)
    ok, out = run_check()
    assert not ok and "signature mismatch at index 7" in out


def test_jobs_runs_the_checks_each_app_registered_without_importing_the_apps():
    """The registry is filled by the apps' ready(): every domain app's checks are there, and jobs.consistency
    itself names no app above it (its source imports only jobs and Django)."""
    import inspect

    kinds = set(consistency._JOB_CHECKS)
    assert {
        "validate_upload",
        "certify_upload",
        "fidelity_audit",
        "run_kernel_submission",
        "calibrate_contracts",
    } <= kinds
    owners = {fn.__module__ for fn in consistency._CHECKS} | {fn.__module__ for fn in consistency._JOB_CHECKS.values()}
    assert {
        "audit_portal.runs.consistency",
        "audit_portal.certificates.consistency",
        "audit_portal.fidelity.consistency",
        "audit_portal.kernels.consistency",
        "audit_portal.attestations.consistency",
    } <= owners
    source = inspect.getsource(consistency)
    for app in ("runs", "certificates", "fidelity", "kernels", "attestations", "training"):
        assert f"audit_portal.{app}" not in source.split('"""', 2)[2], app


def test_the_real_transparency_log_is_verified_and_a_forged_entry_is_caught(processed):
    from audit_portal.attestations.models import LogEntry

    ok, out = run_check()
    assert ok and "transparency_log=1" in out, out
    LogEntry.objects.create(
        index=LogEntry.objects.count(),
        leaf_hash="0" * 64,
        envelope="{}",
        predicate_type="forged",
        subject_kind=LogEntry._meta.get_field("subject_kind").choices[0][0],
        subject_id=processed.pk,
        key_id="nobody",
    )
    ok, out = run_check()
    assert not ok and "transparency log: entry" in out, out
