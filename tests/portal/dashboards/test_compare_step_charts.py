"""The compare page's metric-against-step charts: one figure per metric (acceptance rate, ε̂ max, |Δ log p| mean),
one line per compared run named after it, the baseline first and thicker, x the steps and y that run's values,
every run's steps read in one query."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit_portal.certificates.figures import step_comparison
from audit_portal.certificates.models import RunCertificate, StepAggregate

from .test_compare_page import figures_of
from .test_runs_table_browser import synthetic_runs

pytestmark = pytest.mark.django_db

STEPS = {  # run index -> {step: (acceptance, eps max, abs_diff_mean or None)}
    0: {0: (1.0, 0.01, 0.002), 1: (0.9, 0.02, -0.003), 5: (0.8, 0.04, 0.004)},
    1: {0: (0.5, 0.1, 0.05), 2: (0.25, 0.3, None), 3: (0.0, 0.5, 0.07)},
}


def certificates(project):
    runs = synthetic_runs(project, 2)
    certs = [RunCertificate.objects.get(run=r) for r in runs]
    for i, cert in enumerate(certs):
        StepAggregate.objects.bulk_create(
            StepAggregate(
                certificate=cert,
                step=step,
                sequences=4,
                tokens=100,
                accepted=int(4 * acc),
                acceptance_rate=acc,
                eps_hat_max=eps,
                metrics={"abs_diff_mean": logp, "k3": 0.1} if logp is not None else {"k3": 0.1},
            )
            for step, (acc, eps, logp) in reversed(list(STEPS[i].items()))  # stored out of order on purpose
        )
    return certs


def expected(i, column):
    steps = sorted(STEPS[i])
    pairs = [(s, STEPS[i][s][column]) for s in steps if STEPS[i][s][column] is not None]
    return [float(s) for s, _ in pairs], [abs(v) for _, v in pairs]


def test_one_line_per_run_with_its_steps_and_values(project, client, owner):
    a, b = certificates(project)
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/compare/", {"c": [a.pk, b.pk], "base": b.pk}).content.decode()
    figures = figures_of(html)
    for key, column in (("steps", 0), ("step_eps", 1), ("step_logp", 2)):
        traces = figures[key]["data"]
        # the baseline (b, "sweep-01") first and thicker, then a; legends are the run names
        assert [t["name"] for t in traces] == ["sweep-01", "sweep-00"], key
        assert traces[0]["line"]["width"] > traces[1]["line"]["width"]
        for trace, i in zip(traces, (1, 0)):
            xs, ys = expected(i, column)
            assert trace["x"] == xs, (key, i)
            assert trace["y"] == pytest.approx(ys), (key, i)
    assert figures["step_logp"]["layout"]["yaxis"]["type"] == "log"
    for fig_id in ("fig-cmp-steps", "fig-cmp-step-eps", "fig-cmp-step-logp"):
        assert f'id="{fig_id}"' in html


def test_all_runs_steps_in_one_query(project):
    certs = certificates(project)
    with CaptureQueriesContext(connection) as queries:
        figures = step_comparison(certs, ["x", "y"])
    assert len([q for q in queries.captured_queries if "stepaggregate" in q["sql"].lower()]) == 1
    assert [len(figures["step_eps"]["data"][i]["x"]) for i in (0, 1)] == [3, 3]


def test_a_run_without_a_metric_has_no_line_for_it(project):
    a, b = certificates(project)
    StepAggregate.objects.filter(certificate=b).update(metrics={})
    figures = step_comparison([a, b], ["a", "b"])
    assert [t["name"] for t in figures["step_logp"]["data"]] == ["a"]
    assert [t["name"] for t in figures["step_eps"]["data"]] == ["a", "b"]
