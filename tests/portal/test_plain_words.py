"""Plain words: every symbol link on the run page, the runs table and the compare page leads to an entry of the
glossary; no specification section numbers on those pages; a fidelity rule is shown with what it checks."""

from __future__ import annotations

import re

import pytest

from audit_portal.dashboards.templatetags.portal_format import plain
from audit_portal.fidelity.templatetags.fidelity_tags import RULE_NAMES
from workers.fidelity.rules import RULES

from .conftest import records
from .test_certificates import certified

pytestmark = pytest.mark.django_db


def test_glossary_links_resolve_and_no_section_numbers(api, client, owner, project):
    certificate, _ = certified(api, project, records(trajectories=6))
    client.force_login(owner)
    glossary = client.get("/glossary/").content.decode()
    entries = set(re.findall(r'<dt id="([^"]+)"', glossary))
    pages = [
        f"/p/{project.slug}/runs/{certificate.run_id}/",
        f"/p/{project.slug}/runs/",
        f"/p/{project.slug}/compare/?c={certificate.pk}&c={certificate.pk}",
        f"/p/{project.slug}/runs/{certificate.run_id}/sequences/",
    ]
    linked = set()
    for url in pages:
        html = client.get(url).content.decode()
        assert "§" not in html and "T_ref" not in html, url
        linked |= set(re.findall(r'href="/glossary/#([\w-]+)"', html))
    assert linked and linked <= entries, linked - entries


def test_engine_text_loses_its_section_references():
    assert (
        plain("no finite token KL can be certified (spec §5.3); delta_hat is null")
        == "no finite token KL can be certified; delta_hat is null"
    )
    assert plain("trusted (spec/fidelity.md §4.3, §6.1): it") == "trusted: it"
    assert (
        plain("no finite token KL can be certified (docs/intervals.md#kl-bounds); delta_hat is null")
        == "no finite token KL can be certified; delta_hat is null"
    )
    assert plain("trusted (docs/fcr.md#conventions, docs/fidelity-rules.md#definitions): it") == "trusted: it"
    assert "caps=False" not in plain(
        "Top-K caps assume rollout.top_k is the engine's true top-K (descending); pass "
        "caps=False if it is not. trainer.top_k is treated as an arbitrary subset"
    )


def test_every_fidelity_rule_has_a_name():
    assert set(RULE_NAMES) == set(RULES) and all(RULE_NAMES.values())


def test_each_contract_part_has_a_one_line_summary():
    from audit_portal.dashboards.templatetags.portal_format import CONTRACT_PART_HELP
    from workers.contracts.schema import EIGHT_PARTS

    assert set(CONTRACT_PART_HELP) == set(EIGHT_PARTS) and all(CONTRACT_PART_HELP.values())
