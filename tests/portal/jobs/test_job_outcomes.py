"""A job's state in plain words and what it produced: the same wording on the pages, in websocket events and in the
REST API; /jobs/<id>/result/ leads to what a finished job made, and only for those who may read the job."""

from __future__ import annotations

import pytest

from audit_portal.jobs.models import Job
from audit_portal.jobs.outcomes import outcome
from pipelines import certify_upload, validate_upload

from ..conftest import as_file, jsonl, records, upload_url

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "kind,state,result,text,tone",
    [
        (
            "validate_upload",
            "succeeded",
            {"stage": "invalid", "error_count": 3},
            "finished: invalid (3 errors)",
            "invalid",
        ),
        (
            "validate_upload",
            "succeeded",
            {"stage": "invalid", "error_count": 1},
            "finished: invalid (1 error)",
            "invalid",
        ),
        (
            "validate_upload",
            "succeeded",
            {"stage": "valid", "records": 1200},
            "finished: valid (1,200 records)",
            "valid",
        ),
        ("fidelity_audit", "succeeded", {"verdict": "FAIL"}, "finished: audit failed", "invalid"),
        ("fidelity_audit", "succeeded", {"verdict": "PASS"}, "finished: audit passed", "valid"),
        ("certify_upload", "succeeded", {"data_errors": 2}, "finished (2 sequences with data errors)", "duplicate"),
        ("certify_upload", "succeeded", {"data_errors": 0}, "finished", "valid"),
        ("certify_upload", "failed", {}, "failed", "invalid"),
        ("certify_upload", "queued", {}, "queued", "queued"),
    ],
)
def test_outcome_words(kind, state, result, text, tone):
    assert outcome(kind, state, result) == {"text": text, "tone": tone}


def _uploaded(api, project, data, name="run.jsonl"):
    resp = api.post(upload_url(project), {"file": as_file(data, name)}, format="multipart")
    assert resp.status_code == 201, resp.content
    return resp.json()


def test_an_invalid_upload_reads_invalid_on_the_job_page_the_api_and_the_event(api, client, owner, project):
    from audit_portal.runs import upload_handler

    data = jsonl(records(trajectories=40)) + b'{"schema": "fcr/1", "run_id": "x"}\n'
    head, upload_handler.HEAD_BYTES = upload_handler.HEAD_BYTES, 16 * 1024
    try:
        body = _uploaded(api, project, data)
    finally:
        upload_handler.HEAD_BYTES = head
    job = Job.objects.get(subject_id=body["id"], kind="validate_upload")
    validate_upload(job.pk)
    job.refresh_from_db()
    n = job.result["error_count"]
    assert job.state == "succeeded" and n >= 1
    words = f"invalid ({n} error{'s' if n != 1 else ''})"
    assert job.as_event()["outcome"]["text"] == f"finished: {words}"
    assert api.get(f"/api/v1/jobs/{job.pk}/").json()["outcome"]["text"] == f"finished: {words}"
    client.force_login(owner)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert f"finished: {words}" in html and ">succeeded<" not in html
    resp = client.get(f"/jobs/{job.pk}/result/")
    assert resp.status_code == 302 and resp["Location"] == f"/p/{project.slug}/uploads/{body['id']}/"
    uploads = client.get(f"/p/{project.slug}/uploads/").content.decode()
    assert words in uploads


def test_a_certify_job_links_the_certificate_it_made(api, client, owner, project):
    body = _uploaded(api, project, jsonl(records(trajectories=6)))
    validate_upload(Job.objects.get(subject_id=body["id"], kind="validate_upload").pk)
    certify = Job.objects.get(subject_id=body["id"], kind="certify_upload")
    client.force_login(owner)
    # not finished yet: the result link says so and goes back to the job
    resp = client.get(f"/jobs/{certify.pk}/result/", follow=True)
    assert resp.redirect_chain[-1][0] == f"/jobs/{certify.pk}/" and "nothing to show yet" in resp.content.decode()
    certify_upload(certify.pk)
    certify.refresh_from_db()
    cert_id = certify.result["certificate"]
    event = certify.as_event()["outcome"]
    assert event["product"] == "certificate" and event["product_url"] == f"/jobs/{certify.pk}/result/"
    resp = client.get(f"/jobs/{certify.pk}/result/")
    assert resp.status_code == 302
    assert resp["Location"] == f"/p/{project.slug}/runs/{certify.result and _run_of(cert_id)}/?certificate={cert_id}"
    html = client.get(f"/jobs/{certify.pk}/").content.decode()
    assert f'href="/jobs/{certify.pk}/result/"' in html and "the certificate" in html


def _run_of(cert_id):
    from audit_portal.certificates.models import RunCertificate

    return RunCertificate.objects.get(pk=cert_id).run_id


def test_the_result_link_of_another_projects_job_is_404(api, client, project, other_project):
    body = _uploaded(api, project, jsonl(records(trajectories=4)))
    job = Job.objects.get(subject_id=body["id"], kind="validate_upload")
    validate_upload(job.pk)
    client.force_login(other_project.memberships.first().user)
    assert client.get(f"/jobs/{job.pk}/result/").status_code == 404


def test_the_uploads_page_is_paginated(client, owner, project):
    from audit_portal.runs.models import Upload

    Upload.objects.bulk_create(
        [
            Upload(project=project, original_name=f"f{i:03d}.jsonl", sha256=f"{i:064x}", size_bytes=10, stage="valid")
            for i in range(120)
        ]
    )
    client.force_login(owner)
    first = client.get(f"/p/{project.slug}/uploads/").content.decode()
    assert first.count("data-upload-id=") == 50 and "Page 1 of 3" in first and 'rel="next"' in first
    last = client.get(f"/p/{project.slug}/uploads/?page=3").content.decode()
    assert last.count("data-upload-id=") == 20 and "Page 3 of 3" in last
    assert client.get(f"/p/{project.slug}/uploads/?page=nonsense").status_code == 200


def test_a_finished_conformance_job_reads_as_what_the_kernel_got():
    from audit_portal.jobs.outcomes import outcome

    bad = outcome("kernel_conformance", "succeeded", {"verdict_counts": {"FAIL": 3, "PASS": 0}})
    assert bad == {"text": "finished: 3 of 3 contracts failed", "tone": "invalid"}  # never a green "finished"
    good = outcome("kernel_conformance", "succeeded", {"verdict_counts": {"PASS": 2, "QUALITY_WARNING": 1}})
    assert good == {"text": "finished: all 3 contracts passed", "tone": "valid"}
    mixed = outcome("kernel_conformance", "succeeded", {"verdict_counts": {"PASS": 1, "NOT_APPLICABLE": 2}})
    assert mixed["tone"] == "duplicate" and "1 of 3 passed" in mixed["text"]
    assert (
        outcome("kernel_conformance", "succeeded", {"verdict_counts": {}})["text"] == "finished: no contract measured"
    )
