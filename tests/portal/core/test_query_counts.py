"""List endpoints answer in a fixed number of queries, whatever the page holds: no N+1 can come back.

Each list is read with few rows and with many; both must stay under the same bound (the bound is what one page
costs: authentication, project lookup, the page, and at most one batched query per nested collection)."""

import hashlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit_portal import task_names
from audit_portal.jobs.models import Job
from audit_portal.kernels.models import Contract, Implementation, Submission, Verdict
from audit_portal.runs.models import Run, Upload

from ..conftest import upload_url

pytestmark = pytest.mark.django_db


def make_uploads(project, n, start=0):
    for i in range(start, start + n):
        digest = hashlib.sha256(f"u{i}".encode()).hexdigest()
        run = Run.objects.get_or_create(project=project, name=f"run-{i % 3}")[0]
        up = Upload.objects.create(
            project=project,
            run=run,
            original_name=f"r{i}.jsonl",
            sha256=digest,
            size_bytes=10,
            storage_name=f"uploads/{digest[:2]}/{digest}.jsonl",
            stage="valid",
        )
        Job.objects.bulk_create(
            [
                Job(
                    project=project,
                    kind=kind,
                    task_name=task_names.PREFIX + kind,
                    subject_kind="upload",
                    subject_id=up.pk,
                )
                for kind in ("validate_upload", "certify_upload", "fidelity_audit")
            ]
        )


def make_submissions(project, n, start=0):
    contract = Contract.objects.first() or Contract.objects.create(
        contract_id="C-PRC-01/t",
        version="0.1.0",
        contract_class="C-PRC-01",
        family="precision",
        protocol="p",
        signature="matmul(a, b)",
        source_text="x",
        sha256="0" * 64,
    )
    impl = Implementation.objects.get_or_create(
        project=project, fingerprint="f", defaults={"name": "impl", "kind": "import_path", "import_path": "pkg.mod:fn"}
    )[0]
    for i in range(start, start + n):
        job = Job.objects.create(
            project=project, kind="run_kernel_submission", task_name=task_names.RUN_KERNEL_SUBMISSION
        )
        sub = Submission.objects.create(project=project, implementation=impl, job=job, plan=[{"contract": contract.pk}])
        Verdict.objects.create(
            submission=sub, contract=contract, contract_class="C-PRC-01", verdict="PASS" if i % 2 else "FAIL"
        )


def count_queries(api, url) -> tuple[int, dict]:
    with CaptureQueriesContext(connection) as ctx:
        response = api.get(url)
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries), response.json()


LISTS = {
    "uploads": (make_uploads, lambda p: upload_url(p) + "?page_size=100", 6),
    "jobs": (make_uploads, lambda p: f"/api/v1/projects/{p.slug}/jobs/?page_size=100", 5),
    "runs": (make_uploads, lambda p: f"/api/v1/projects/{p.slug}/runs/?page_size=100", 5),
    "kernel_submissions": (
        make_submissions,
        lambda p: f"/api/v1/projects/{p.slug}/kernel-submissions/?page_size=100",
        6,
    ),
}


@pytest.mark.parametrize("name", LISTS)
def test_list_queries_do_not_grow_with_the_page(api, project, django_assert_max_num_queries, name):
    make, url, bound = LISTS[name]
    make(project, 2)
    count_queries(api, url(project))  # the first request of a key also records its use
    few, body_few = count_queries(api, url(project))
    make(project, 30, start=2)
    with django_assert_max_num_queries(bound):
        response = api.get(url(project))
    body = response.json()
    assert len(body["results"]) > len(body_few["results"])  # the page really grew
    many, _ = count_queries(api, url(project))
    assert many == few, f"{name}: {few} queries for {len(body_few['results'])} rows, {many} for {len(body['results'])}"


def test_upload_list_still_shows_each_uploads_own_jobs(api, project):
    make_uploads(project, 3)
    results = api.get(upload_url(project)).json()["results"]
    for row in results:
        kinds = [j["kind"] for j in row["jobs"]]
        assert kinds == ["validate_upload", "certify_upload", "fidelity_audit"]
        detail = api.get(f"/api/v1/uploads/{row['id']}/").json()
        assert detail["jobs"] == row["jobs"]  # the batched list and the per-upload detail agree


def test_submission_list_counts_each_submissions_own_verdicts(api, project):
    make_submissions(project, 4)
    results = api.get(f"/api/v1/projects/{project.slug}/kernel-submissions/").json()["results"]
    assert sorted(tuple(r["counts"].items()) for r in results) == sorted(
        [(("FAIL", 1),), (("PASS", 1),), (("FAIL", 1),), (("PASS", 1),)]
    )


def test_contract_list_is_one_query_for_calibrations(api, project, django_assert_max_num_queries):
    from django.core.management import call_command

    call_command("load_contracts", "--no-calibrate", verbosity=0) if _has_no_calibrate() else call_command(
        "load_contracts", verbosity=0
    )
    n = Contract.objects.values("contract_id").distinct().count()  # the API lists the latest version of each
    assert n >= 10
    with django_assert_max_num_queries(6):
        response = api.get("/api/v1/contracts/")
    assert response.status_code == 200 and len(response.json()) == n


def _has_no_calibrate() -> bool:
    from audit_portal.kernels.management.commands.load_contracts import Command

    parser = Command().create_parser("manage.py", "load_contracts")
    return any("--no-calibrate" in a.option_strings for a in parser._actions)


def test_a_certificate_sequence_page_reads_an_index_in_line_order_without_sorting(project):
    """The unfiltered sequence page (ORDER BY line, id LIMIT n) must not sort all of a certificate's rows."""
    from audit_portal.certificates.models import RunCertificate, SequenceSummary

    if connection.vendor != "postgresql":
        pytest.skip("EXPLAIN output checked on PostgreSQL")
    digest = hashlib.sha256(b"seq").hexdigest()
    upload = Upload.objects.create(project=project, original_name="r.jsonl", sha256=digest, size_bytes=1)
    cert = RunCertificate.objects.create(project=project, upload=upload)
    SequenceSummary.objects.bulk_create(
        [SequenceSummary(certificate=cert, line=i, status="CERT_IN", accept=True) for i in range(2000)]
    )
    page = SequenceSummary.objects.filter(certificate=cert, line__gt=50).order_by("line", "id")[:101]
    with connection.cursor() as cur:
        cur.execute("ANALYZE certificates_sequencesummary")  # statistics of this table as it now is
        cur.execute("SET LOCAL enable_seqscan = off")  # a small table would be scanned anyway; ask what it can do
        plan = page.explain()
    assert "seqsummary_cert_line" in plan and "Sort" not in plan, plan


def test_the_run_page_does_not_grow_with_the_runs_uploads_and_certificates(client, owner, project):
    from audit_portal.certificates.models import RunCertificate

    def grow(n, start):
        make_uploads(project, n, start)
        for up in Upload.objects.filter(certificate__isnull=True):
            RunCertificate.objects.create(
                project=project, run=up.run, upload=up, state="complete", summary={"big": list(range(50))}
            )

    client.force_login(owner)
    grow(3, 0)
    run = Run.objects.get(name="run-0")
    url = f"/p/{project.slug}/runs/{run.pk}/"
    client.get(url)
    with CaptureQueriesContext(connection) as few:
        small = client.get(url)
    grow(60, 3)
    with CaptureQueriesContext(connection) as many:
        large = client.get(url)
    assert small.status_code == large.status_code == 200
    assert len(many.captured_queries) == len(few.captured_queries), [q["sql"][:120] for q in many.captured_queries]
    assert large.content.count(b"<option value=") == run.certificates.count() == 21  # every certificate offered
    assert b"21 uploads" in large.content
