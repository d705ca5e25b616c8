"""The contract page reads as a document: each of the eight parts as labelled lines in words (classes, tolerance
levels, statistics with their units, the unit roundoff's value), links that land on glossary entries, no nested
key/value dumps for the shipped contracts, and contract text escaped whatever it holds."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from audit_portal.kernels.contract_view import FIELDS, readable_extras, readable_part, readable_parts
from audit_portal.kernels.views import PART_TITLES
from workers.contracts.loader import SPECS_DIR, load_text

from .test_kernels_contract_pages import suite  # noqa: F401  (fixture)


def shipped_specs():
    return {p.name: load_text(p.read_text(), source=p.name).to_dict() for p in sorted(SPECS_DIR.glob("*.yaml"))}


def test_every_field_of_every_shipped_contract_has_a_reader():
    for name, spec in shipped_specs().items():
        for part in readable_parts(spec, PART_TITLES):
            assert part["rows"], (name, part["key"])
            assert part["other"] is None, (name, part["key"], part["other"])
        extras = readable_extras(spec)
        assert extras["derivation"]["other"] is None and extras["provenance"]["other"] is None, name


def test_tolerance_reads_with_its_level_statistic_unit_and_unit_roundoff():
    spec = shipped_specs()["C-PRC-01.matmul.v0.2.0.yaml"]
    rows = dict(readable_part("tolerance", spec["parts"]["tolerance"])["rows"])
    assert (
        str(rows["Level"])
        == '<a href="/glossary/#tolerance-level">T2</a> — a bound derived from rounding-error analysis'
    )
    assert "in units of u·‖aᵢ∘bⱼ‖₂" in str(rows["Statistic"])
    assert "u = 2**-24" in str(rows["Unit roundoff"]) and "≈ 5.96e-08" in str(rows["Unit roundoff"])
    scope = dict(readable_part("scope", spec["parts"]["scope"])["rows"])
    assert "accumulates in float32" in str(scope["Data types"])
    assert "K</span> from 1 to 65,536" in str(scope["Shapes"])
    assert readable_extras(spec)["sweep_points"][0] == "M = 32, K = 64, N = 32"
    pre = dict(readable_part("precondition", spec["parts"]["precondition"])["rows"])
    assert str(pre["Magnitudes"]) == "|x| from 1e-15 to 1e+15"


def test_contract_text_is_escaped_and_unknown_fields_are_kept():
    part = readable_part(
        "identifier",
        {"title": "<script>alert(1)</script>", "class": "<b>x</b>", "family": "<i>", "brand_new": {"k": "<img src=x>"}},
    )
    html = " ".join(str(h) for _, h in part["rows"])
    assert "<script>" not in html and "&lt;script&gt;" in html and "<b>x</b>" not in html
    assert part["other"] == {"brand_new": {"k": "<img src=x>"}}  # shown as written (spec_value escapes it)
    assert readable_part("scope", ["not", "a", "mapping"]) == {"rows": [], "other": ["not", "a", "mapping"]}
    odd = readable_part("scope", {"shape_class": {"dims": {"M": "many"}}, "dtypes": "f32"})
    assert dict(odd["rows"]).keys() == {"Shapes", "Data types"}


@pytest.mark.django_db
def test_contract_page_shows_parts_in_words_with_glossary_links_and_no_dumps(client, owner, suite):  # noqa: F811 - the fixture, asked for by name
    client.force_login(owner)
    glossary = client.get("/glossary/").content.decode()
    entries = set(re.findall(r'<dt id="([^"]+)"', glossary))
    for cls in ("C-PRC-01", "C-EXC-02", "C-ORD-03", "C-CMP-02"):
        html = client.get(reverse("kernels:contract", args=[suite[cls].contract_id])).content.decode()
        parts = html[html.index('<div class="parts">') : html.index('id="derivation"')]
        for key, _ in PART_TITLES:
            assert f'id="part-{key}"' in parts
        assert 'class="kv spec"' not in parts and "Other fields" not in parts, cls  # no nested key/value dump
        assert parts.count("<dt>") >= sum(1 for k, _ in PART_TITLES if FIELDS[k]), cls
        linked = set(re.findall(r'href="/glossary/#([\w-]+)"', html))
        assert {"contract-class", "contract-family", "tolerance-level"} <= linked <= entries, linked - entries
    listing = client.get("/contracts/").content.decode()
    anchors = set(re.findall(r'id="([^"]+)"', glossary))
    assert set(re.findall(r'href="/glossary/#([\w-]+)"', listing)) == {"kernel-contracts", "contract-family"} <= anchors
    assert "spec " not in listing  # the contract language by name, not as a specification reference
    prc = client.get(reverse("kernels:contract", args=[suite["C-PRC-01"].contract_id])).content.decode()
    assert "finite values only (no NaN or ±Inf)" in prc and "every stream" not in prc
    assert "inputs are hashed before and after" in prc and "public 7; 3 hidden seeds" in prc
    assert "M = 65,536, K = 5, N = 3" in prc  # sweep points as words, not a dump


def test_contract_prose_sets_its_names_as_code_and_escapes_the_rest():
    from audit_portal.kernels.templatetags.kernels_tags import names_as_code

    got = str(names_as_code("declared IEEE_PROPAGATE; drawn from log_uniform <b>x</b> a_i"))
    assert got == (
        "declared <code>IEEE_PROPAGATE</code>; drawn from <code>log_uniform</code> &lt;b&gt;x&lt;/b&gt; "
        "<code>a_i</code>"
    )
    assert str(names_as_code("TF32 on Ampere")) == "TF32 on Ampere"  # no underscore: a word, not a name
