"""Issue #15 on the pages: measurements passed / measured, the worst clause, QUALITY_WARNING, the coverage statement
and the open track beside every verdict; device/driver/library in the matrix columns; each implementation's
history over submissions with regressions marked (wpt.fyi-style); the contract page explains its levels and lists
its sweep. From stored verdicts (the engine itself is tested in tests/contracts/test_kc_sweeps.py)."""

from __future__ import annotations

import re

import pytest

from audit_portal.jobs import services as jobs
from audit_portal.kernels import services
from audit_portal.kernels.models import Contract
from workers.contracts.grading import grade

from .test_kernels_results import suite  # noqa: F401 - the shipped suite stored for every test (autouse)

pytestmark = pytest.mark.django_db

COVERAGE = "float32 x 12 points (3 drawn from seeds; K 1..65536, M 1..65536, N 1..65536) x values gauss x forward x cpu"


def submit(project, verdicts: dict, environment=None):
    sub = services.submit_conformance(
        project=project, submitted_by="t", device="cpu", contracts=list(verdicts), import_path="vendor.kernels"
    )
    jobs.start_job(sub.job_id)
    for entry in sub.plan:
        code, passed, measured, extra = verdicts[entry["class"]]
        detail = {
            "verdict": code,
            "contract_id": entry["contract_id"],
            "contract_class": entry["class"],
            "statistic": 5.0,
            "bound": 64.0,
            "margin": 5 / 64 if code != "QUALITY_WARNING" else 0.7,
            "assurance_level": 3,
            "reason": f"{code} by construction",
            "measurements": measured,
            "passed_measurements": passed,
            "statistic_name": "rho",
            "coverage": {"text": COVERAGE, "points": 12},
            "environment": environment or {},
            **extra,
        }
        services.record_verdict(sub, Contract.objects.get(pk=entry["contract"]), detail, margin_infinite=False)
    services.finish_submission(sub, grade([v.detail for v in sub.verdicts.all()]))
    jobs.finish_job(sub.job, {"submission": sub.pk})
    sub.refresh_from_db()
    return sub


ENV = {
    "torch": "2.13.0",
    "cpu": "x86_64 test cpu",
    "cuda": {"name": "NVIDIA H200", "driver": 12080, "cuda_runtime": "12.8"},
}


def test_submission_page_counts_clause_coverage_history_and_regression(client, owner, project):
    first = submit(project, {"C-PRC-01": ("PASS", 80, 80, {}), "C-EXC-01": ("PASS", 72, 72, {})})
    second = submit(
        project,
        {
            "C-PRC-01": (
                "FAIL",
                35,
                80,
                {
                    "failing_clause": {
                        "clause": "rho <= bound",
                        "statistic_name": "rho",
                        "point": {"M": 32, "K": 2949, "N": 32},
                    }
                },
            ),
            "C-EXC-01": ("QUALITY_WARNING", 72, 72, {"track": "open", "declaration": {"unit_roundoff": 2**-8}}),
        },
    )
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/kernels/submissions/{second.pk}/").content.decode()
    assert "35/80" in html and "72/72" in html
    clause = html[html.index('data-field="clause">rho') :]
    clause = clause[: clause.index("</td>")]
    assert "rho &lt;= bound at " in clause and "K = 2,949" in clause and "M = 32" in clause  # the point in words
    assert "<dl" not in clause  # not a key/value dump
    assert COVERAGE.split(" (")[0] in html and "K 1..65536" in html
    assert "open track" in html and "uses 0.7 of its bound" in html
    hist = html[html.index('id="history"') :]
    hist = hist[: hist.index("</table>")]
    assert f"#{first.pk}" in hist and f"#{second.pk}" in hist
    assert hist.count("regressed") == 1  # PRC-01 PASS -> FAIL; EXC-01 PASS -> QUALITY_WARNING is still a pass
    assert re.search(r'id="history-regressions">1<', html)
    row = hist[hist.index('data-class="C-PRC-01"') :]
    assert row.index("v-PASS") < row.index("regressed")
    # the first submission's page shows the same history, without a regression yet at that column
    html1 = client.get(f"/p/{project.slug}/kernels/submissions/{first.pk}/").content.decode()
    assert "history-regressions" in html1


def test_matrix_shows_counts_coverage_and_platform_columns(client, owner, project):
    submit(project, {"C-PRC-01": ("PASS", 80, 80, {})}, environment=ENV)
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/kernels/").content.decode()
    assert "80/80" in html and "measured: float32 x 12 points" in html
    assert "torch 2.13.0" in html and "NVIDIA H200" in html and "driver 12080" in html and "CUDA 12.8" in html


def test_contract_page_explains_levels_and_lists_its_sweep(client, owner):
    from django.urls import reverse

    client.force_login(owner)
    html = client.get(reverse("kernels:contract", args=["C-PRC-01/aten.mm/f32.f32->f32"])).content.decode()
    assert 'id="levels-explained"' in html and "does <b>not</b> say the kernel is correct" in html
    assert "Open track" in html and "QUALITY_WARNING" in html
    sweep = html[html.index('id="sweep"') :]
    assert "10 fixed points" in sweep and "3 drawn per seed" in sweep and "2949" in sweep and "65536" in sweep
    # issue #24: the points drawn near the top of the declared scope
    assert "3 more per seed, each drawn near the top of the declared range of one of" in sweep and "M, K, N" in sweep
