"""The fidelity page and API lead with coverage: a log with no verifiable policy token is shown as "PASS — nothing
verifiable" under its coverage headline, never as a plain PASS; ``?min_coverage=`` gives CI a gate over a report."""

from __future__ import annotations

import copy

import pytest

from audit_portal.accounts.models import Role

from ..pipelines.test_fidelity_job import audited, example_a

pytestmark = pytest.mark.django_db


def inference_only():
    rec = copy.deepcopy(example_a())
    rec.pop("trainer")  # an imported inference log before the join
    return rec


def test_nothing_verifiable_is_not_a_plain_pass(client, api, project, member_of):
    report, _ = audited(api, project, [inference_only()])
    assert report.verdict == "PASS" and report.verifiable_policy_tokens == 0
    body = api.get(f"/api/v1/fidelity/reports/{report.pk}/").json()
    assert body["headline"] == "0% of policy tokens verifiable (0 of 3)"
    assert body["verdict_label"] == "PASS — nothing verifiable" and body["coverage_gate"] is None
    gate = api.get(f"/api/v1/fidelity/reports/{report.pk}/?min_coverage=0.5").json()["coverage_gate"]
    assert gate["met"] is False and "below the required 50.00%" in gate["reasons"][0]
    assert api.get(f"/api/v1/fidelity/reports/{report.pk}/?min_coverage=0").json()["coverage_gate"]["met"] is True
    for bad in ("2", "abc", "-1"):
        response = api.get(f"/api/v1/fidelity/reports/{report.pk}/?min_coverage={bad}")
        assert response.status_code == 400, bad
        assert "min_coverage" in response.content.decode()

    client.force_login(member_of(project, Role.MEMBER))
    html = client.get(f"/p/{project.slug}/runs/{report.run_id}/fidelity/").content.decode()
    assert 'id="fid-headline">0% of policy tokens verifiable (0 of 3)' in html
    assert 'id="verdict-value">PASS — nothing verifiable<' in html and "fid-verdict EMPTY" in html
    assert html.index('id="fid-headline"') < html.index('id="fid-verdict"')


def test_verifiable_report_passes_plainly_and_meets_its_gate(client, api, project, member_of):
    report, _ = audited(api, project, [example_a()])
    body = api.get(f"/api/v1/fidelity/reports/{report.pk}/?min_coverage=1").json()
    assert body["verdict_label"] == "PASS" and body["headline"] == "100% of policy tokens verifiable (3 of 3)"
    assert body["coverage_gate"] == {"min_coverage": 1.0, "met": True, "reasons": []}
    client.force_login(member_of(project, Role.MEMBER))
    html = client.get(f"/p/{project.slug}/runs/{report.run_id}/fidelity/").content.decode()
    assert 'id="verdict-value">PASS<' in html and "fid-verdict PASS" in html
