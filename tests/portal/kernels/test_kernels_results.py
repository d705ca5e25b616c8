"""Results over the API and the pages: matrix (cells, family pass rates, interop score, KC-C per column),
diff of two submissions, CI status payload and SVG badge — from stored verdicts (no engine run here; the
end-to-end test runs the engine)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from functools import lru_cache

import pytest
from rest_framework.test import APIClient

from audit_portal.accounts.models import Role
from audit_portal.accounts.services import issue_api_key
from audit_portal.jobs import services as jobs
from audit_portal.kernels import services
from audit_portal.kernels.models import Contract
from workers.contracts.grading import grade
from workers.contracts.loader import SPECS_DIR

pytestmark = pytest.mark.django_db


@lru_cache(maxsize=1)
def shipped_contracts():
    return services.parse_contract_files(SPECS_DIR.glob("*.yaml"))


@pytest.fixture(autouse=True)
def suite(db):
    services.store_contracts(shipped_contracts())


def make_submission(project, impl, verdicts: dict[str, str], device="cpu", finish=True):
    """A submission of ``impl`` whose job ran and produced ``verdicts`` ({class: code}), graded by the engine."""
    submission = services.submit_conformance(
        project=project, submitted_by="test", device=device, contracts=list(verdicts), import_path=impl
    )
    jobs.start_job(submission.job_id)
    for entry in submission.plan:
        code = verdicts[entry["class"]]
        failed_t0 = code == "FAIL"
        detail = {
            "verdict": code,
            "contract_id": entry["contract_id"],
            "contract_class": entry["class"],
            "statistic": 3.0 if failed_t0 else 0.2,
            "bound": 0.0 if failed_t0 else 1.0,
            "margin": None if failed_t0 else 0.2,
            "assurance_level": 3,
            "reason": f"{code} by construction",
        }
        contract = Contract.objects.get(pk=entry["contract"])
        services.record_verdict(submission, contract, detail, margin_infinite=failed_t0)
    if finish:
        services.finish_submission(submission, grade([v.detail for v in submission.verdicts.all()]))
        jobs.finish_job(submission.job, {"submission": submission.pk})
    submission.refresh_from_db()
    return submission


ALL_PASS = {c: "PASS" for c in ("C-PRC-01", "C-PRC-02", "C-PRC-03", "C-PRC-04", "C-EXC-01", "C-EXC-02")}


def test_matrix_cells_pass_rates_interop_and_grades(api, project, client, owner):
    ref = make_submission(project, "vendor.kernels", ALL_PASS)
    cuda = make_submission(
        project, "vendor.kernels", {**ALL_PASS, "C-PRC-01": "FAIL", "C-EXC-02": "QUALITY_WARNING"}, device="cuda"
    )
    older = make_submission(project, "fast.kernels", {**ALL_PASS, "C-EXC-01": "CRASH"})
    newest = make_submission(project, "fast.kernels", ALL_PASS)  # the latest submission of a column wins
    body = api.get(f"/api/v1/projects/{project.slug}/kernels/matrix/").json()
    columns = {(c["name"], c["device"]): c for c in body["columns"]}
    assert set(columns) == {("vendor.kernels", "cpu"), ("vendor.kernels", "cuda"), ("fast.kernels", "cpu")}
    assert columns[("fast.kernels", "cpu")]["submission"] == newest.pk != older.pk
    assert columns[("vendor.kernels", "cuda")]["families"]["PRC"] == {"passed": 3, "total": 4, "rate": 0.75}
    assert columns[("vendor.kernels", "cuda")]["families"]["EXC"]["rate"] == 1.0  # QUALITY_WARNING still passes
    assert columns[("vendor.kernels", "cuda")]["specific_failures"] == 1
    # 6 contracts were run; 5 pass on every column. The other 6 of the suite have no verdict anywhere.
    assert body["interop_score"] == pytest.approx(5 / 6)
    by_id = {r["contract_id"].split("/")[0]: r for r in body["rows"]}
    index = [c["submission"] for c in body["columns"]].index(cuda.pk)
    assert by_id["C-PRC-01"]["cells"][index] == {"verdict": "FAIL", "margin": None, "margin_infinite": True}
    assert by_id["C-PRC-02"]["all_pass"] and not by_id["C-PRC-01"]["all_pass"]
    assert all(cell is None for cell in by_id["C-ORD-01"]["cells"])
    # the engine's grade: PRC fails on cuda, ORD and CMP were never run (0: no cherry-picking)
    assert columns[("vendor.kernels", "cpu")]["kc_c"] == {"PRC": 3, "ORD": 0, "CMP": 0, "EXC": 3} == ref.grade["kc_c"]
    assert columns[("vendor.kernels", "cuda")]["kc_c"]["PRC"] == 0

    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/kernels/").content.decode()
    assert 'id="interop-score">83%' in html
    assert html.count('class="cell v-FAIL"') == 1 and 'class="cell v-QUALITY_WARNING"' in html
    assert 'PRC<b class="l3">3</b>' in html


def test_matrix_reads_only_the_newest_submission_of_each_column(api, project, django_assert_max_num_queries):
    history = [make_submission(project, "fast.kernels", {**ALL_PASS, "C-EXC-01": "CRASH"}) for _ in range(4)]
    newest = make_submission(project, "fast.kernels", ALL_PASS)
    other = make_submission(project, "slow.kernels", ALL_PASS, device="cuda")
    with django_assert_max_num_queries(12) as ctx:  # independent of how long each column's history is
        body = api.get(f"/api/v1/projects/{project.slug}/kernels/matrix/").json()
    assert [c["submission"] for c in body["columns"]] == [newest.pk, other.pk]
    assert not any(h.pk in {c["submission"] for c in body["columns"]} for h in history)
    assert body["interop_score"] == 1.0  # the older CRASH submissions do not count
    # the columns come from one query that picks each column's newest row in the database (LIMIT 1 per column)
    reads = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith('SELECT "kernels_submission"')]
    assert len(reads) == 1 and "LIMIT 1" in reads[0], reads


def test_diff_regressed_improved_unchanged(api, project, client, owner):
    a = make_submission(
        project, "k.v1", {"C-PRC-01": "PASS", "C-PRC-02": "FAIL", "C-EXC-01": "PASS", "C-EXC-02": "PASS"}
    )
    b = make_submission(
        project, "k.v2", {"C-PRC-01": "CRASH", "C-PRC-02": "PASS", "C-EXC-01": "PASS", "C-PRC-03": "PASS"}
    )
    body = api.get(f"/api/v1/kernel-submissions/diff/?a={a.pk}&b={b.pk}").json()
    change = {row["contract_class"]: row["change"] for row in body["contracts"]}
    assert change == {
        "C-PRC-01": "regressed",
        "C-PRC-02": "improved",
        "C-EXC-01": "unchanged",
        "C-EXC-02": "only_in_a",
        "C-PRC-03": "only_in_b",
    }
    assert body["counts"] == {"regressed": 1, "improved": 1, "unchanged": 1, "only_in_a": 1, "only_in_b": 1}
    assert api.get("/api/v1/kernel-submissions/diff/?a=1").json()["error"]["code"] == "diff_needs_two_submissions"
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/kernels/diff/?a={a.pk}&b={b.pk}").content.decode()
    assert 'id="n-regressed">1<' in html and 'data-change="improved"' in html


def test_ci_status_and_badge_follow_the_latest_submission(api, project):
    ok = make_submission(project, "vendor.kernels", ALL_PASS)
    implementation = ok.implementation_id
    status = api.get(f"/api/v1/implementations/{implementation}/status/").json()
    assert status["state"] == "success" and status["passed"] == status["total"] == 6
    assert status["kc_c"] == {"PRC": 3, "ORD": 0, "CMP": 0, "EXC": 3} and status["counts"] == {"PASS": 6}
    assert status["link"].endswith(f"/p/{project.slug}/kernels/submissions/{ok.pk}/") and status["link"].startswith(
        "http"
    )
    badge = api.get(f"/api/v1/implementations/{implementation}/badge.svg")
    assert badge.status_code == 200 and badge["Content-Type"] == "image/svg+xml"
    svg = ET.fromstring(badge.content)
    assert "PRC3 ORD0 CMP0 EXC3" in "".join(svg.itertext()) and "#2e8540" in badge.content.decode()

    make_submission(project, "vendor.kernels", {**ALL_PASS, "C-EXC-02": "FAIL"})
    status = api.get(f"/api/v1/implementations/{implementation}/status/").json()
    assert status["state"] == "failure" and status["passed"] == 5 and status["counts"] == {"FAIL": 1, "PASS": 5}
    assert "5/6 pass" in "".join(
        ET.fromstring(api.get(f"/api/v1/implementations/{implementation}/badge.svg").content).itertext()
    )

    running = make_submission(project, "vendor.kernels", ALL_PASS, device="cuda", finish=False)
    assert api.get(f"/api/v1/implementations/{implementation}/status/?device=cuda").json()["state"] == "pending"
    assert api.get(f"/api/v1/implementations/{implementation}/status/?device=cpu").json()["state"] == "failure"
    jobs.fail_job(running.job, "worker lost")
    assert api.get(f"/api/v1/implementations/{implementation}/status/?device=cuda").json()["state"] == "error"


def test_tenancy_foreign_results_are_404_and_viewers_cannot_submit(
    api, project, other_project, owner, member_of, client
):
    theirs = make_submission(other_project, "their.kernels", {"C-EXC-01": "PASS"})
    for path in (
        f"/api/v1/kernel-submissions/{theirs.pk}/",
        f"/api/v1/implementations/{theirs.implementation_id}/status/",
        f"/api/v1/implementations/{theirs.implementation_id}/badge.svg",
        f"/api/v1/projects/{other_project.slug}/kernels/matrix/",
        f"/api/v1/projects/{other_project.slug}/kernel-submissions/",
    ):
        assert api.get(path).status_code == 404, path
    mine = make_submission(project, "my.kernels", {"C-EXC-01": "PASS"})
    assert api.get(f"/api/v1/kernel-submissions/diff/?a={mine.pk}&b={theirs.pk}").status_code == 404
    assert (
        api.post(
            f"/api/v1/projects/{other_project.slug}/kernel-submissions/", {"impl": "x.y"}, format="json"
        ).status_code
        == 404
    )
    assert [s["id"] for s in api.get(f"/api/v1/projects/{project.slug}/kernel-submissions/").json()["results"]] == [
        mine.pk
    ]

    read_only = APIClient()
    read_only.credentials(
        HTTP_AUTHORIZATION="Bearer "
        + issue_api_key(project=project, name="ro", scopes=["read"], created_by=owner).token
    )
    refused = read_only.post(f"/api/v1/projects/{project.slug}/kernel-submissions/", {"impl": "x.y"}, format="json")
    assert refused.status_code == 403 and "submit scope" in refused.json()["error"]["message"]
    assert read_only.get(f"/api/v1/kernel-submissions/{mine.pk}/").status_code == 200

    viewer = member_of(project, Role.VIEWER)
    client.force_login(viewer)
    page = client.get(f"/p/{project.slug}/kernels/submit/").content.decode()
    assert 'id="no-submit"' in page and 'id="submit-form"' not in page and "submit role" in page
    before = mine.__class__.objects.count()
    client.post(f"/p/{project.slug}/kernels/submit/", {"source": "import", "impl": "x.y"})
    assert mine.__class__.objects.count() == before
    assert client.get(f"/p/{other_project.slug}/kernels/").status_code == 404
    assert client.get(f"/p/{project.slug}/kernels/submissions/{theirs.pk}/").status_code == 404


def test_matrix_badges_say_what_the_kernel_got_and_cells_link_to_the_result(project, client, owner):
    failing = make_submission(project, "broken.kernels", {c: "FAIL" for c in ALL_PASS})
    passing = make_submission(project, "good.kernels", ALL_PASS)
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/kernels/").content.decode()
    assert f"finished: {len(ALL_PASS)} of {len(ALL_PASS)} contracts failed" in html  # not a green "succeeded"
    assert f"finished: all {len(ALL_PASS)} contracts passed" in html
    assert "badge succeeded" not in html
    contract = failing.verdicts.get(contract__contract_class="C-PRC-01").contract.contract_id
    from django.utils.text import slugify

    link = f"/p/{project.slug}/kernels/submissions/{failing.pk}/#contract-{slugify(contract)}"
    assert link in html
    page = client.get(f"/p/{project.slug}/kernels/submissions/{failing.pk}/").content.decode()
    assert f'id="contract-{slugify(contract)}"' in page and passing.pk != failing.pk
