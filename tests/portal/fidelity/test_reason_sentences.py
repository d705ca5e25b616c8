"""Fidelity reason codes are shown as a sentence with the code beside it (run page: calls table, filter, a key of the
reasons present; call drill-down; figure hovers); every engine code has a sentence. The fidelity and training pages
load Plotly like the run page: the partial bundle, deferred, with skeletons until a figure is drawn."""

from __future__ import annotations

import re

import pytest
from django.utils.html import escape

from audit_portal.fidelity.figures import coverage_by_reason, reasons_any
from audit_portal.fidelity.models import FidelityCall
from audit_portal.fidelity.reasons import REASON_SENTENCES, reason_sentence
from workers.fidelity.rules import CODES

from ..pipelines.test_fidelity_job import audited, examples

pytestmark = pytest.mark.django_db


def scripts(html: str) -> list[str]:
    return re.findall(r"<script\b[^>]*\bsrc=[^>]*>", html)


def assert_plotly_deferred(html: str):
    tags = [t for t in scripts(html) if "plotly" in t]
    assert len(tags) == 1 and "plotly-basic" in tags[0] and " defer" in tags[0], tags
    assert not any("plotly.min.js" in t for t in scripts(html))  # never the full bundle
    assert all(" defer" in t for t in scripts(html) if "figures.js" in t or "fidelity.js" in t)


def test_every_engine_reason_code_has_a_sentence():
    assert set(REASON_SENTENCES) == set(CODES)
    assert all(s.endswith(".") and s[0].isupper() for s in REASON_SENTENCES.values())
    assert "does not describe yet" in reason_sentence("SOMETHING_NEW")


def test_fidelity_pages_show_sentences_next_to_codes_and_load_plotly_deferred(client, api, project, owner):
    report, _ = audited(api, project, examples())
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/{report.run_id}/fidelity/").content.decode()
    assert_plotly_deferred(html)
    assert html.count('class="skeleton"') == html.count("data-figure=") > 0
    table = html[html.index('id="calls-table"') :]
    listed = {c.primary_reason for c in report.calls.exclude(primary_reason="")} & set(CODES)
    assert listed
    for code in listed:  # each listed call's primary reason: the sentence, then the code
        assert f'{escape(reason_sentence(code))} <span class="mono muted small">{code}</span>' in table
    key = html[html.index('id="reason-key"') : html.index('id="calls-table"')]
    present = set(report.coverage["excluded_tokens_by_primary_reason"]) | set(
        report.coverage["excluded_policy_tokens_by_any_reason"]
    )
    for code in present:
        assert f'<span class="mono">{code}</span></dt><dd>{escape(reason_sentence(code))}</dd>' in key
    assert "SENTINEL_LOGPROB" in present
    assert escape(reason_sentence("CERT_MISSING")[:40]) in html  # the filter's options read as sentences too

    d = FidelityCall.objects.get(report=report, call_id="tD-0")
    call_html = client.get(f"/p/{project.slug}/fidelity/calls/{d.pk}/").content.decode()
    assert (
        f'{escape(reason_sentence("SENTINEL_LOGPROB"))} <span class="mono muted small">SENTINEL_LOGPROB</span>'
        in call_html
    )

    codes = list(CODES)
    hovers = [t.get("hovertext") for t in coverage_by_reason(report, codes)["data"][1:]]
    assert reason_sentence("SENTINEL_LOGPROB") in {h[0] for h in hovers}
    assert reasons_any(report, codes)["data"][0]["hovertext"] == [
        reason_sentence(c) for c in reasons_any(report, codes)["data"][0]["x"]
    ]


def test_training_page_loads_plotly_deferred(client, project, owner):
    from audit_portal.training.models import TrainingAudit

    from django.utils import timezone

    audit = TrainingAudit.objects.create(project=project, rollout_numerics="bf16", completed_at=timezone.now())
    client.force_login(owner)
    response = client.get(f"/p/{project.slug}/training/{audit.pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="training-figures"' in html  # a finished audit's page (figures from empty series: empty states)
    assert_plotly_deferred(html)
    assert html.count('class="skeleton"') == html.count("data-figure=") > 0
