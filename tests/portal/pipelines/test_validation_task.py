"""The validation task: streaming validation of the whole file, then valid (joins its run) or invalid
(with line numbers), through the same code the worker runs."""

import pytest

from audit_portal.jobs.models import Job
from audit_portal.runs.models import Run, Upload, UploadStage
from pipelines import validate_upload

from ..conftest import as_file, gz, jsonl, records, upload_url

pytestmark = pytest.mark.django_db


def _upload(api, project, data, name="run.jsonl"):
    response = api.post(upload_url(project), {"file": as_file(data, name)}, format="multipart")
    assert response.status_code == 201, response.content
    return Upload.objects.get(pk=response.json()["id"])


def test_a_valid_upload_joins_its_run(api, project):
    upload = _upload(api, project, gz(jsonl(records(trajectories=8))), "run.jsonl.gz")
    job = Job.objects.get(subject_id=upload.pk)
    assert validate_upload(job.pk) == "succeeded"
    upload.refresh_from_db()
    job.refresh_from_db()
    assert upload.stage == UploadStage.VALID and upload.error_count == 0
    assert upload.run == Run.objects.get(project=project, name="demo-run")
    assert upload.validation["records"] == len(records(trajectories=8))
    assert job.state == "succeeded" and job.result["stage"] == "valid"


def test_an_error_beyond_the_preflight_head_marks_the_upload_invalid_with_its_line(api, project):
    recs = records(trajectories=40)
    good = jsonl(recs)
    assert len(good) > 64 * 1024
    bad_line = len(recs) + 1
    data = good + b'{"schema": "fcr/1", "run_id": "demo-run"}\n'
    from audit_portal.runs import upload_handler

    upload_handler_head = upload_handler.HEAD_BYTES
    upload_handler.HEAD_BYTES = 16 * 1024  # the pre-flight sees only the head; the job sees everything
    try:
        upload = _upload(api, project, data)
    finally:
        upload_handler.HEAD_BYTES = upload_handler_head
    job = Job.objects.get(subject_id=upload.pk)
    validate_upload(job.pk)
    upload.refresh_from_db()
    assert upload.stage == UploadStage.INVALID and upload.run is None
    assert upload.error_count >= 1
    assert {e["line"] for e in upload.validation["errors"]} == {bad_line}
    assert Job.objects.get(pk=job.pk).result["errors"][0]["line"] == bad_line


def test_validation_of_a_missing_file_fails_the_job_with_a_reason(api, project, settings):
    upload = _upload(api, project, jsonl(records()))
    (settings.ARTIFACT_ROOT / upload.storage_name).unlink()
    job = Job.objects.get(subject_id=upload.pk)
    assert validate_upload(job.pk) == "failed"
    job.refresh_from_db()
    assert job.state == "failed" and "No such file" in job.error
