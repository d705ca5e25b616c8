"""The compare page with a chosen baseline (``?base=``: it goes first and every difference is relative to it) and the
params diff (config keys whose values differ between the compared runs)."""

from __future__ import annotations

import re

import pytest

from audit_portal.dashboards.views import params_diff

from .test_runs_columns import declared

pytestmark = pytest.mark.django_db


def certificates(project):
    from audit_portal.certificates.models import RunCertificate

    runs = declared(project)
    return [RunCertificate.objects.get(run=r).pk for r in runs]


def diffs(html: str, row: str) -> list[str]:
    body = re.search(rf'<tr data-row="{row}">(.*?)</tr>', html, re.S).group(1)
    return re.findall(r'data-verdict="([a-z]*)"', body)


def test_baseline_goes_first_and_differences_are_relative_to_it(client, owner, project):
    ids = certificates(project)
    client.force_login(owner)
    url = f"/p/{project.slug}/compare/"
    plain = client.get(url, [("c", ids[0]), ("c", ids[1]), ("c", ids[2])]).content.decode()
    assert re.findall(r'class="run-link" id="run-\d">([^<]+)<', plain) == ["sweep-00", "sweep-01", "sweep-02"]
    assert diffs(plain, "eps_hat") == ["", "worse", "worse"]  # eps_hat grows with i: lower is better
    chosen = client.get(url, [("c", ids[0]), ("c", ids[1]), ("c", ids[2]), ("base", ids[2])]).content.decode()
    assert re.findall(r'class="run-link" id="run-\d">([^<]+)<', chosen) == ["sweep-02", "sweep-00", "sweep-01"]
    assert diffs(chosen, "eps_hat") == ["", "better", "better"]
    assert f'value="{ids[2]}" id="base-1" checked' in chosen and chosen.count(" checked>") == 1
    # the baseline form keeps the selection
    form = re.search(r'<form method="get" class="card baseline-form".*?</form>', chosen, re.S).group(0)
    assert re.findall(r'name="c" value="(\d+)"', form) == [str(i) for i in ids]


def test_baseline_outside_the_selection_is_refused(client, owner, project):
    ids = certificates(project)
    client.force_login(owner)
    resp = client.get(f"/p/{project.slug}/compare/", [("c", ids[0]), ("c", ids[1]), ("base", ids[2])])
    assert resp.status_code == 400 and "The baseline must be one of the compared certificates" in resp.content.decode()
    assert client.get(f"/p/{project.slug}/compare/", [("c", ids[0]), ("c", ids[1]), ("base", "x")]).status_code == 400


def test_params_diff_on_the_page(client, owner, project):
    ids = certificates(project)
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/compare/", [("c", ids[1]), ("c", ids[0]), ("c", ids[2])]).content.decode()
    table = re.search(r'<table id="params-diff">.*?</table>', html, re.S).group(0)
    assert re.findall(r'<tr data-key="([^"]+)">', table) == ["lr", "optimizer"]  # "bad key!" is 1 in all three
    lr = re.search(r'<tr data-key="lr">(.*?)</tr>', table, re.S).group(1)
    assert lr.count('data-differs="true"') == 2  # baseline 3e-05 vs 1e-05 and 0.0001
    opt = re.search(r'<tr data-key="optimizer">(.*?)</tr>', table, re.S).group(1)
    assert opt.count('data-differs="true"') == 1 and "sgd" in opt  # sweep-02 is adam like the baseline
    assert "2 of 3 config keys differ; 1 are the same in every run" in html


def test_params_diff_flattens_nesting_and_counts_missing_keys():
    got = params_diff(
        [
            {"optim": {"lr": 1, "beta": 0.9}, "seed": 1},
            {"optim": {"lr": 2, "beta": 0.9}},
            {"optim": {"lr": 1, "beta": 0.9}, "seed": 1},
        ]
    )
    assert [r["key"] for r in got["rows"]] == ["optim.lr", "seed"] and got["same"] == 1 and got["keys"] == 3
    seed = got["rows"][1]["cells"]
    assert [c["text"] for c in seed] == ["1", "—", "1"] and [c["differs"] for c in seed] == [False, True, False]
    assert params_diff([{}, {}]) == {"rows": [], "same": 0, "keys": 0}


def test_the_api_export_link_gets_exactly_the_compared_runs_even_with_quotes_in_names(api, client, owner, project):
    """The compare page's export link quotes each run name for the search language; a name with a double quote is
    single-quoted, one with both quote characters gets no link (the search language cannot say it)."""
    import csv
    import html as html_lib
    import io

    from audit_portal.runs.models import Run

    from .test_runs_table_browser import synthetic_runs

    runs = synthetic_runs(project, 4)
    Run.objects.filter(pk=runs[0].pk).update(name='say "hi"')
    Run.objects.filter(pk=runs[1].pk).update(name="sweep-01 or name ~ sweep")  # must stay one name, not a query
    ids = [r.certificates.get().pk for r in runs]
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/compare/", {"c": ids[:2]}).content.decode()
    href = html_lib.unescape(re.search(r'id="compare-export-link"[^>]*>GET ([^<]*)<', page).group(1))
    body = b"".join(api.get(href).streaming_content).decode()
    assert sorted(r["name"] for r in csv.DictReader(io.StringIO(body))) == sorted(
        ['say "hi"', "sweep-01 or name ~ sweep"]
    )
    Run.objects.filter(pk=runs[2].pk).update(name="both \" and '")
    page = client.get(f"/p/{project.slug}/compare/", {"c": ids[1:3]}).content.decode()
    assert 'id="compare-export"' not in page
