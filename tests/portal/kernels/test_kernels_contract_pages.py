"""Contract pages: the eight parts, derivation, evidence, calibration status (three states) and version
history render for a signed-in user; the list shows each contract's calibration status."""

from __future__ import annotations

from functools import lru_cache

import pytest
from django.urls import reverse

from audit_portal.kernels import services
from audit_portal.kernels.views import PART_TITLES
from workers.contracts.loader import SPECS_DIR

pytestmark = pytest.mark.django_db


@lru_cache(maxsize=1)
def shipped_contracts():
    """Parsed once per test module (parsing the twelve files is the slow part; load_contracts has its own tests)."""
    return services.parse_contract_files(SPECS_DIR.glob("*.yaml"))


@pytest.fixture
def suite(db):
    services.store_contracts(shipped_contracts())
    from audit_portal.kernels.selectors import latest_contracts

    return {c.contract_class: c for c in latest_contracts()}  # the latest version of each (0.1.0 ships too)


def test_contract_pages_need_sign_in(client, suite):
    assert client.get("/contracts/").status_code == 302


def test_contract_list_shows_every_contract_and_its_calibration_status(client, owner, suite):
    job = services.queue_calibration([suite["C-EXC-02"]])
    services.record_calibration(
        services.begin_calibration(job, suite["C-EXC-02"]),
        {"ok": False, "problems": ["violating clamp_gather: contract did not catch it"]},
    )
    client.force_login(owner)
    html = client.get("/contracts/").content.decode()
    for cls in suite:
        assert cls in html
    assert html.count('data-calibration="not_run"') == 11 and html.count('data-calibration="failed"') == 1
    assert "0 of 12 contracts calibrated" in html


def test_contract_detail_renders_the_eight_parts_derivation_calibration_and_versions(client, owner, suite):
    prc = suite["C-PRC-01"]
    job = services.queue_calibration([prc])
    services.record_calibration(
        services.begin_calibration(job, prc),
        {
            "ok": True,
            "problems": [],
            "seeds": [7],
            "duration_s": 3.1,
            "states": {
                "baseline": [
                    {
                        "impl": "workers.contracts.impls.baseline:zeros_matmul",
                        "naive_pass": False,
                        "verdict": "FAIL",
                        "statistic": 5.3e7,
                        "margin": 8.3e5,
                        "ok": True,
                    }
                ],
                "violating": [
                    {
                        "impl": "workers.contracts.impls.violating:hf32_matmul",
                        "naive_pass": True,
                        "verdict": "FAIL",
                        "statistic": 8.8e3,
                        "margin": 138.0,
                        "ok": True,
                    }
                ],
                "conforming": [
                    {
                        "impl": "workers.contracts.impls.reference:matmul",
                        "naive_pass": True,
                        "verdict": "PASS",
                        "statistic": 11.2,
                        "margin": 0.176,
                        "ok": True,
                    }
                ],
            },
        },
    )
    client.force_login(owner)
    url = reverse("kernels:contract", args=[prc.contract_id])
    assert "%3E" in url  # the id's "->" survives the URL
    response = client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    for key, title in PART_TITLES:
        assert f'id="part-{key}"' in html and title in html
    assert "8*sqrt(K)" in html and "dot-l2-probabilistic-v1" in html  # tolerance and its derivation
    assert "Higham &amp; Mary 2019" in html and "PyTorch CUDA semantics" in html  # derivation reference, evidence
    assert 'id="calibration-status">Calibrated' in html
    for impl in ("zeros_matmul", "hf32_matmul", "matmul"):
        assert f'<td class="mono">{impl}</td>' in html
    assert "matmul(a[M,K], b[K,N]) -&gt; [M,N]" in html


def test_version_history_lists_every_version_and_old_versions_stay_readable(client, owner, suite, tmp_path):
    prc = suite["C-PRC-01"]
    assert "  version: 0.4.0\n" in prc.source_text
    newer = prc.source_text.replace("  version: 0.4.0\n", "  version: 0.5.0\n")
    (tmp_path / "C-PRC-01.v0.5.0.yaml").write_text(newer)
    services.load_contract_files([tmp_path / "C-PRC-01.v0.5.0.yaml"])
    client.force_login(owner)
    html = client.get(reverse("kernels:contract", args=["C-PRC-01"])).content.decode()
    assert (
        "version 0.5.0" in html
        and "?version=0.1.0" in html
        and "?version=0.2.0" in html
        and "?version=0.4.0" in html
        and "?version=0.5.0" in html
    )
    old = client.get(reverse("kernels:contract", args=[prc.contract_id]) + "?version=0.1.0").content.decode()
    assert "version 0.1.0" in old and "not the latest (v0.5.0)" in old
    assert client.get(reverse("kernels:contract", args=["C-XXX-99"])).status_code == 404
