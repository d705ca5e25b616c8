"""The compare page: two of the project's certificates side by side — headline numbers with their differences and
which way is better, every bound, the caveat, three figures on common axes; scoped to the project (a certificate
of another project, or one still pending, is a 404); without two ids it is the choice form."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from audit_portal.certificates.models import RunCertificate
from audit_portal.dashboards.views import _number

from ..conftest import records
from ..certificates.test_certificates import certified

pytestmark = pytest.mark.django_db


def figures_of(html: str) -> dict:
    return json.loads(
        re.search(r'<script id="compare-figures" type="application/json">(.*?)</script>', html, re.S).group(1)
    )


def test_two_certificates_side_by_side(api, project, client, owner):
    a, _ = certified(api, project, records(trajectories=6, seed=1))
    b, _ = certified(api, project, records(trajectories=6, seed=2, spike_rate=0.08))
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/compare/?a={a.pk}&b={b.pk}").content.decode()
    row = re.search(r'<tr data-row="eps_hat">(.*?)</tr>', html, re.S).group(1)
    assert _number(a.eps_hat) in row and _number(b.eps_hat) in row and _number(b.eps_hat - a.eps_hat, True) in row
    worse = b.eps_hat > a.eps_hat
    assert (">worse<" if worse else ">better<") in row  # a larger ε̂ is worse
    tokens = re.search(r'<tr data-row="tokens">(.*?)</tr>', html, re.S).group(1)
    assert f"{a.tokens:,}" in tokens and "better" not in tokens and "worse" not in tokens  # size is neither
    assert "visited" in html and 'id="bounds"' in html
    figures = figures_of(html)
    # both uploads belong to the run "demo-run": the legends name the run and tell the certificates apart
    name_a, name_b = f"demo-run (#{a.pk})", f"demo-run (#{b.pk})"
    names = [t["name"] for t in figures["bounds"]["data"]]
    assert f"{name_a}: B* (min of all bounds)" in names and f"{name_b}: B* (min of all bounds)" in names
    assert [t["name"] for t in figures["steps"]["data"]] == [name_a, name_b]
    for trace in figures["eps"]["data"]:  # shares of each run's sequences
        assert sum(trace["y"]) == pytest.approx(1.0)


def test_three_runs_by_name_each_against_the_first(api, project, client, owner):
    certs = [
        certified(api, project, records(trajectories=5, seed=s, run_id=f"run-{s}", spike_rate=0.02 * s))[0]
        for s in (1, 2, 3)
    ]
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/compare/", {"c": [c.pk for c in certs]}).content.decode()
    assert [t["name"] for t in figures_of(html)["steps"]["data"]] == ["run-1", "run-2", "run-3"]
    row = re.search(r'<tr data-row="eps_hat">(.*?)</tr>', html, re.S).group(1)
    for c in certs[1:]:
        assert _number(c.eps_hat - certs[0].eps_hat, True) in row
    assert html.count('class="run-link"') == 3
    too_many = client.get(f"/p/{project.slug}/compare/", {"c": [certs[0].pk] * 9})
    assert too_many.status_code == 400 and "at most 8" in too_many.content.decode()


def test_run_page_links_to_the_comparison_and_the_form_preselects_a(api, project, client, owner):
    a, _ = certified(api, project, records(trajectories=4, seed=3))
    client.force_login(owner)
    run_page = client.get(f"/p/{project.slug}/runs/{a.run_id}/").content.decode()
    assert f'href="/p/{project.slug}/compare/?a={a.pk}" id="compare-link"' in run_page
    form = client.get(f"/p/{project.slug}/compare/?a={a.pk}").content.decode()
    assert f'<option value="{a.pk}" selected>' in form and 'id="compare-figures"' not in form


def test_scoped_to_the_project_and_to_finished_certificates(api, project, other_project, client, owner):
    a, _ = certified(api, project, records(trajectories=4, seed=4))
    stranger = APIClient()
    stranger.force_authenticate(get_user_model().objects.get(username="sam"))  # other_project's owner
    foreign, _ = certified(stranger, other_project, records(trajectories=4, seed=5))
    client.force_login(owner)
    assert client.get(f"/p/{project.slug}/compare/?a={a.pk}&b={foreign.pk}").status_code == 404
    RunCertificate.objects.filter(pk=a.pk).update(state=RunCertificate.State.PENDING)
    assert client.get(f"/p/{project.slug}/compare/?a={a.pk}&b={a.pk}").status_code == 404
    assert client.get(f"/p/{project.slug}/compare/?a=x&b=1").status_code == 200  # not ids: the form again
