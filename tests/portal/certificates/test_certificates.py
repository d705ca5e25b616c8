"""Certification jobs store a run certificate with per-step and per-sequence summaries (bulk, never per
token), idempotently; the REST API serves them scoped, filtered, compared and drawn."""

import pytest

from audit_portal.certificates.figures import MAX_POINTS, downsample
from audit_portal.certificates.models import RunCertificate, SequenceSummary, StepAggregate
from audit_portal.jobs.models import Job
from audit_portal.runs.models import Upload
from pipelines import certify_upload, validate_upload

from ..conftest import as_file, gz, jsonl, records, upload_url

pytestmark = pytest.mark.django_db


def certified(api, project, recs):
    response = api.post(upload_url(project), {"file": as_file(gz(jsonl(recs)), "r.jsonl.gz")}, format="multipart")
    assert response.status_code == 201, response.content
    upload = Upload.objects.get(pk=response.json()["id"])
    validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk)
    job = Job.objects.get(subject_id=upload.pk, kind="certify_upload")  # queued by a valid validation
    assert certify_upload(job.pk) == "succeeded", Job.objects.get(pk=job.pk).error
    return RunCertificate.objects.get(upload=upload), job


def test_certificate_summaries_match_the_run(api, project):
    recs = records(trajectories=10)
    certificate, job = certified(api, project, recs)
    policy = [r for r in recs if r["role"] == "policy"]
    assert certificate.state == "complete" and certificate.sequences == len(policy)
    assert SequenceSummary.objects.filter(certificate=certificate).count() == len(policy)
    assert certificate.tokens == sum(len(r["response"]["token_ids"]) for r in policy)
    assert sorted(StepAggregate.objects.filter(certificate=certificate).values_list("step", flat=True)) == sorted(
        {r["step"] for r in policy}
    )
    with_eps = SequenceSummary.objects.filter(certificate=certificate, eps_hat__isnull=False).count()
    assert sum(certificate.histograms["eps"]["counts"]) == with_eps
    assert certificate.best_bound == certificate.bounds["best"] and certificate.caveats
    assert any("visited" in c for c in certificate.caveats)
    assert Job.objects.get(pk=job.pk).result["certificate"] == certificate.pk


def test_rerunning_the_job_replaces_rather_than_duplicates(api, project):
    certificate, job = certified(api, project, records(trajectories=4))
    Job.objects.filter(pk=job.pk).update(state="queued")  # a redelivery after a lost worker
    assert certify_upload(job.pk) == "succeeded"
    assert RunCertificate.objects.count() == 1
    again = RunCertificate.objects.get()
    assert SequenceSummary.objects.filter(certificate=again).count() == again.sequences == certificate.sequences
    assert SequenceSummary.objects.count() == again.sequences


def test_a_bad_record_is_a_data_error_sequence_not_a_failed_job(api, project):
    recs = records(trajectories=4)
    policy = next(i for i, r in enumerate(recs) if r["role"] == "policy")
    recs[policy]["trainer"]["logprobs"][0] = 0.5  # a positive log-prob
    certificate, job = certified(api, project, recs)
    bad = SequenceSummary.objects.get(certificate=certificate, status="DATA_ERROR", line=policy + 1)
    assert "positive" in bad.reason.lower() or "> 0" in bad.reason
    assert certificate.data_errors >= 1 and any(e["line"] == policy + 1 for e in certificate.errors)


def test_certificate_api_sequences_filters_and_pagination(api, project):
    certificate, _ = certified(api, project, records(trajectories=12))
    body = api.get(f"/api/v1/certificates/{certificate.pk}/").json()
    assert body["summary"]["sequences"] == certificate.sequences and "caveats" in body
    assert api.get(f"/api/v1/runs/{certificate.run_id}/certificate/").json()["id"] == certificate.pk
    url = f"/api/v1/certificates/{certificate.pk}/sequences/"
    page = api.get(url + "?page_size=5").json()
    lines = [s["line"] for s in page["results"]]
    assert len(lines) == 5 and lines == sorted(lines) and page["next"]
    step = StepAggregate.objects.filter(certificate=certificate).first().step
    by_step = api.get(url + f"?step={step}&page_size=1000").json()["results"]
    assert by_step and {s["step"] for s in by_step} == {step}
    assert len(by_step) == SequenceSummary.objects.filter(certificate=certificate, step=step).count()
    status = SequenceSummary.objects.filter(certificate=certificate).first().status
    assert {s["status"] for s in api.get(url + f"?status={status}&page_size=1000").json()["results"]} == {status}
    bad = api.get(url + "?step=abc")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_parameter"


def test_comparison_of_two_runs(api, project):
    a, _ = certified(api, project, records(trajectories=5, seed=1))
    b, _ = certified(api, project, records(trajectories=5, seed=2, spike_rate=0.05))
    body = api.get(f"/api/v1/certificates/compare/?a={a.pk}&b={b.pk}").json()
    assert body["headline"]["tokens"] == {"a": a.tokens, "b": b.tokens, "diff": b.tokens - a.tokens}
    assert body["bounds"]["best"]["a"] == a.best_bound
    assert api.get("/api/v1/certificates/compare/?a=1").status_code == 400


def test_figures_are_plotly_json_with_the_budget(api, project):
    certificate, _ = certified(api, project, records(trajectories=6))
    body = api.get(f"/api/v1/certificates/{certificate.pk}/figures/?budget=0.25").json()
    for key in ("bound_tightness", "steps", "distributions", "token_status", "acceptance_by_length"):
        assert body[key]["data"], key
    assert any(t["name"] == "B* (min)" for t in body["bound_tightness"]["data"])
    assert all(len(t.get("x") or []) <= MAX_POINTS for t in body["steps"]["data"])
    thresholds = {r["id"]: r for r in body["bound_table"]}
    assert thresholds["classical_kl"]["parameter"] == "δ" and thresholds["coup"]["parameter"] == "ε"
    assert api.get(f"/api/v1/certificates/{certificate.pk}/figures/?budget=-1").status_code == 400


def test_certificates_of_another_project_are_404(api, project, other_project):
    from audit_portal.certificates import services
    from audit_portal.runs.models import Upload as U

    foreign = U.objects.create(project=other_project, original_name="x", sha256="f" * 64, size_bytes=1)
    certificate = services.complete(services.begin(foreign, {}), {"summary": {}, "bounds": {}})
    for url in [
        f"/api/v1/certificates/{certificate.pk}/",
        f"/api/v1/certificates/{certificate.pk}/sequences/",
        f"/api/v1/certificates/{certificate.pk}/figures/",
    ]:
        assert api.get(url).status_code == 404, url


def test_downsample_keeps_bands_and_limits_points():
    import math

    xs = list(range(10_000))
    ys = [math.sin(x / 50) + (5 if x == 7777 else 0) for x in xs]
    out = downsample(xs, ys, 1000)
    assert len(out["x"]) == 1000
    assert all(lo <= m <= hi for lo, m, hi in zip(out["lo"], out["y"], out["hi"]))
    assert max(out["hi"]) == max(ys) and min(out["lo"]) == min(ys)  # the spike survives in the band
    small = downsample([1, 2, None], [3, None, 5], 1000)
    assert small["x"] == [1] and small["y"] == [3]
