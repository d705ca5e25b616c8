"""Plain words: every symbol link on the run page, the runs table and the compare page leads to an entry of the
glossary; no specification section numbers on those pages; a fidelity rule is shown with what it checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from audit_portal.dashboards.templatetags.portal_format import plain
from audit_portal.fidelity.templatetags.fidelity_tags import RULE_NAMES
from workers.fidelity.rules import RULES

from ..conftest import records
from ..certificates.test_certificates import certified

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
        == "no finite token KL can be certified; δ̂ is unbounded"
    )
    assert plain("trusted (spec/fidelity.md §4.3, §6.1): it") == "trusted: it"
    assert (
        plain("no finite token KL can be certified (docs/intervals.md#kl-bounds); delta_hat is null")
        == "no finite token KL can be certified; δ̂ is unbounded"
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


# ------------------------------------------------------------------ no internal identifier in any page's visible text
# Every GET page of the authorisation matrix's world (real uploads, certificates, fidelity report, kernels, training
# audit, alerts), rendered for the owner with the Django test client; its visible text must hold no engine name.
#
# Not visible text, so not checked: <script>/<style>/<template>, attribute values (ids, data-*, classes, hrefs).
# Allowed to show identifiers, so not checked: <code>, <pre>, <kbd>, <samp> and elements of class "mono" — the API
# field names, config keys, import paths and search-language examples a reader must type or match exactly (the
# glossary's search grammar, the API examples on the keys page, a kernel's import path, a contract class C-PRC-01).
from html.parser import HTMLParser  # noqa: E402 - beside the page check it serves, after the unit tests above

from ..accounts.test_authz_matrix import ENDPOINTS, _world_artifacts, world  # noqa: E402,F401  (the seeded world's fixtures)

_SKIP_TAGS = {"script", "style", "template", "code", "pre", "kbd", "samp", "textarea", "svg"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
# the status words a page shows as they are named in the glossary (statuses, kernel verdicts): upper-case on purpose;
# and the environment variable an operator must set for the log-integrity check, named exactly as it is set
ALLOWED_UPPER = {"DATA_ERROR", "QUALITY_WARNING", "AUDIT_LOG_WITNESS_DIR"}
INTERNAL = [
    (re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"), "snake_case name"),
    (re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"), "UPPER_CASE constant"),
    (re.compile(r"[{\[]\s*'[^']*'\s*[:,\]]"), "Python repr"),
    (re.compile(r"(?:[=:(\[,]\s*)(?:None|True|False)\b"), "Python literal"),  # not the English word "None"
    (re.compile(r"<\w+(?:\.\w+)* object at 0x|\b(?:Decimal|datetime\.\w+|UUID)\("), "Python repr"),
    (re.compile(r'"\w+"\s*:'), "raw JSON key"),
]


class _VisibleText(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[bool] = []  # per open element: is its content hidden from the check
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in _VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.stack.append(tag in _SKIP_TAGS or "mono" in classes)

    def handle_endtag(self, tag):
        if tag not in _VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if not any(self.stack):
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = _VisibleText()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def internal_identifiers(text: str) -> list[str]:
    found = []
    for pattern, what in INTERNAL:
        for m in pattern.finditer(text):
            if m.group(0) in ALLOWED_UPPER:
                continue
            found.append(f"{what} {m.group(0)!r} in …{text[max(0, m.start() - 60) : m.end() + 40]}…")
    return found


def test_visible_text_filter_finds_what_it_should():
    html = (
        '<p title="pm_tv">B* <span class="mono">adap_star</span></p><script>var eps_hat=1</script>'
        "<code>best_bound</code><p>classical_kl {'a': 1} CERT_OUT \"key\": None DATA_ERROR. None of them</p>"
    )
    found = " ".join(internal_identifiers(visible_text(html)))
    assert "classical_kl" in found and "CERT_OUT" in found and "Python repr" in found and "JSON key" in found
    assert "None" in found and not any(w in found for w in ("pm_tv", "adap_star", "eps_hat", "best_bound'"))
    assert found.count("Python literal") == 1  # the English word None is not one
    assert "'DATA_ERROR'" not in found


PAGES = sorted(route for (route, method), access in ENDPOINTS.items() if method == "GET" and access.kind == "page")


# Not fixed yet (strict: passing makes these fail, so the entry must go): the contract pages print the shipped
# contracts' prose, which names generators (log_uniform), policies (IEEE_PROPAGATE), vendor flags (allow_hf32) and
# formula variables (a_i) as plain text; they need the contract files' prose reworded or those names marked as code.
KNOWN: set = set()  # routes still expected to fail (none: contract prose sets its names as code)


@pytest.mark.xdist_group("authz-matrix")
@pytest.mark.parametrize(
    "route",
    [
        pytest.param(r, marks=pytest.mark.xfail(strict=True, reason="contract prose")) if r in KNOWN else r
        for r in PAGES
    ],
    ids=lambda r: r or "<root>",
)
def test_no_internal_identifier_on_any_page(world, route):  # noqa: F811  (the fixture imported above)
    from django.test import Client

    access = ENDPOINTS[(route, "GET")]
    client = Client()
    client.force_login(world.users["owner"])
    response = client.get(access.url(world.own))
    if response.status_code != 200 or "html" not in response.get("Content-Type", ""):
        pytest.skip(f"{route}: {response.status_code} {response.get('Content-Type')} (not a page)")
    found = internal_identifiers(visible_text(response.content.decode()))
    assert not found, f"{access.url(world.own)}:\n" + "\n".join(found)


# ------------------------------------------------------------------------------------------- glossary completeness
# every term used in the portal's headings and table headers, by the glossary anchor that explains it
GLOSSARY_TERMS = {
    "verdict": "run verdicts",
    "tv": "TV",
    "kl": "KL",
    "eps-hat": "ε̂",
    "delta-hat": "δ̂",
    "threshold": "threshold",
    "acceptance": "acceptance rate",
    "statuses": "sequence statuses IN/OUT/UNDETERMINED/HEURISTIC/DATA_ERROR",
    "reference-length": "T_ref",
    "best-bound": "B*",
    "bounds": "the bounds",
    "budget": "error budget E",
    "a-y": "weight A(y)",
    "visited": "visited contexts",
    "coverage": "coverage",
    "fidelity-verdict": "fidelity PASS/FAIL",
    "trm": "TRM",
    "mismatch-metrics": "k1, k2, k3, χ², PPL ratio",
    "is-weight": "IS weight",
    "tis-mis": "TIS / MIS",
    "search": "runs search",
    "kernel-contracts": "kernel contracts",
    "contract": "contract",
    "contract-class": "contract class",
    "contract-family": "family",
    "tolerance-level": "T0–T4",
    "unit-roundoff": "u",
    "kernel-verdict": "PASS / QUALITY_WARNING / FAIL",
    "kc-level": "KC level",
    "kc-c": "KC-C",
    "kc-a": "KC-A",
    "kc-t": "KC-T",
    "calibration": "calibration",
}
TEMPLATES = Path(__file__).resolve().parents[3] / "templates"


def _glossary_anchors(client) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', client.get("/glossary/").content.decode()))


def test_glossary_has_an_entry_for_every_listed_term(client, owner):
    client.force_login(owner)
    missing = set(GLOSSARY_TERMS) - _glossary_anchors(client)
    assert not missing, sorted(missing)


def test_every_glossary_link_in_the_templates_resolves(client, owner):
    client.force_login(owner)
    anchors = _glossary_anchors(client)
    links = {}
    for path in TEMPLATES.rglob("*.html"):
        for anchor in re.findall(r"(?:glossary' %\}|/glossary/)#([\w-]+)", path.read_text()):
            links.setdefault(anchor, set()).add(path.name)
    assert len(links) >= 10  # the pattern still finds the links
    broken = {a: sorted(where) for a, where in links.items() if a not in anchors}
    assert not broken, broken
