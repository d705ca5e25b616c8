"""The fidelity page's histograms are binned on the server: a fully verifiable trajectory (share 1.0) is counted in
the last bin (it used to fall outside plotly's half-open bins and vanish), and the payload is the bins, not one
value per trajectory or call, however large the run."""

from __future__ import annotations

import pytest
from django.db.models import Sum

from audit_portal.fidelity.figures import HIST_BINS, alignment, binned, trajectory_coverage

from ..pipelines.test_fidelity_job import audited, examples

pytestmark = pytest.mark.django_db


def test_binned_closes_the_last_bin_and_keeps_every_value():
    h = binned([0.0, 0.049, 0.05, 0.5, 0.999, 1.0, 1.0], 0.0, 1.0, 20)
    assert len(h["counts"]) == 20 and sum(h["counts"]) == 7
    assert h["counts"][0] == 2 and h["counts"][1] == 1 and h["counts"][10] == 1 and h["counts"][19] == 3
    assert h["edges"][0] == 0.0 and h["edges"][-1] == pytest.approx(1.0)
    assert h["centres"][0] == pytest.approx(0.025) and h["width"] == pytest.approx(0.05)


def test_trajectory_histogram_counts_fully_verifiable_trajectories(api, project):
    report, _ = audited(api, project, examples())
    per_trajectory = (
        report.calls.filter(role="policy")
        .values("trajectory_id")
        .annotate(n=Sum("n_tokens"), v=Sum("verifiable_tokens"))
        .filter(n__gt=0)
    )
    shares = sorted(r["v"] / r["n"] for r in per_trajectory)
    assert 1.0 in shares and len(shares) >= 2  # the worked examples have a fully and a partly verifiable one
    bars = trajectory_coverage(report)["data"][0]
    assert len(bars["x"]) == len(bars["y"]) == HIST_BINS
    assert sum(bars["y"]) == len(shares)
    assert bars["y"][-1] == shares.count(1.0)
    assert bars["customdata"][-1] == "0.95–1.00"


def test_alignment_histogram_is_bins_up_to_tau(api, project):
    report, _ = audited(api, project, examples())
    fig = alignment(report)
    bars = fig["data"][0]
    calls = report.calls.filter(alignment__isnull=False).count()
    assert len(bars["y"]) == 40 and sum(bars["y"]) == calls > 0
    tau = report.coverage["logprob_alignment"]["tau_align"]
    assert bars["x"][-1] < tau <= bars["x"][-1] + bars["width"]  # the range reaches τ_align
