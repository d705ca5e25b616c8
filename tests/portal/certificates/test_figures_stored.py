"""The run page's figures are built once, by the certify job, and read on every visit for the certificate's own
budget; another budget is built on request (and cached). Either way the JSON is the figures for that budget."""

from __future__ import annotations

import orjson
import pytest

from audit_portal.certificates import figures

from ..conftest import records
from .test_certificates import certified

pytestmark = pytest.mark.django_db


def test_the_certify_job_stores_the_run_pages_figures(api, project):
    certificate, _ = certified(api, project, records(trajectories=6))
    path = figures.stored_figures_path(certificate)
    assert path.exists()
    stored = orjson.loads(path.read_bytes())
    assert stored["budget"] == figures.default_budget(certificate)
    assert set(stored) == {
        "budget",
        "bound_table",
        "bound_tightness",
        "steps",
        "step_metrics",
        "distributions",
        "token_status",
        "acceptance_by_length",
    }
    resp = api.get(f"/api/v1/certificates/{certificate.pk}/figures/")
    assert resp.status_code == 200 and resp.content == path.read_bytes()
    # the stored copy is what a fresh build gives
    assert stored["bound_table"] == orjson.loads(orjson.dumps(figures.bound_table(certificate, stored["budget"])))


def test_another_budget_is_built_for_that_budget_and_a_missing_copy_is_rebuilt(api, project):
    certificate, _ = certified(api, project, records(trajectories=6))
    other = api.get(f"/api/v1/certificates/{certificate.pk}/figures/", {"budget": "0.37"}).json()
    assert other["budget"] == 0.37 and any(r["within_budget"] is not None for r in other["bound_table"])
    figures.stored_figures_path(certificate).unlink()
    again = api.get(f"/api/v1/certificates/{certificate.pk}/figures/").json()
    assert again["budget"] == figures.default_budget(certificate) and figures.stored_figures_path(certificate).exists()
