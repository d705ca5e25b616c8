"""The calibration job runs the engine's three-state calibration on the stored contract versions and records
calibrated / failed per version; the contract page shows it. A version whose "violator" is not caught
(here: the reference named as the violator) is recorded as failed with the engine's reason."""

from __future__ import annotations

import pytest
from django.urls import reverse

from audit_portal.jobs.models import Job
from audit_portal.kernels import services
from audit_portal.kernels.models import CalibrationStatus, ContractCalibration
from workers.contracts.loader import SPECS_DIR, load_text
from pipelines import calibrate_contracts

pytestmark = pytest.mark.django_db

EXC01 = SPECS_DIR / "C-EXC-01.row_max.v0.1.0.yaml"  # one of the fastest contracts to calibrate


def test_calibration_job_records_calibrated_and_failed_versions(client, owner):
    text = EXC01.read_text()
    # v0.1.1 names the conforming reference as its "violator": the contract cannot catch it
    broken = text.replace("  version: 0.1.0\n", "  version: 0.1.1\n").replace(
        'violating: ["workers.contracts.impls.violating:fmax_tree_row_max"]',
        'violating: ["workers.contracts.impls.reference:row_max"]',
    )
    assert broken.count("0.1.1") == 1 and 'violating: ["workers.contracts.impls.reference:row_max"]' in broken
    report = services.store_contracts(
        [load_text(text, source=EXC01.name), load_text(broken, source="C-EXC-01.v0.1.1.yaml")]
    )
    good, bad = sorted(report.created, key=lambda c: c.version)
    job = services.queue_calibration([good, bad])

    assert calibrate_contracts(job.pk) == "succeeded"

    job = Job.objects.get(pk=job.pk)
    assert job.result == {"calibrated": 1, "failed": ["C-EXC-01 v0.1.1"]}
    ok = ContractCalibration.objects.get(contract=good)
    assert ok.status == CalibrationStatus.CALIBRATED and ok.problems == []
    states = ok.result["states"]
    assert [r["verdict"] for r in states["conforming"]] == ["PASS"] and states["conforming"][0]["naive_pass"]
    assert [r["verdict"] for r in states["violating"]] == ["FAIL"] and states["violating"][0]["naive_pass"]
    assert not states["baseline"][0]["naive_pass"] and states["baseline"][0]["verdict"] != "PASS"
    failed = ContractCalibration.objects.get(contract=bad)
    assert failed.status == CalibrationStatus.FAILED
    assert any("reference:row_max" in p and "did not catch" in p for p in failed.problems)

    client.force_login(owner)
    html = client.get(reverse("kernels:contract", args=["C-EXC-01"]) + "?version=0.1.0").content.decode()
    assert 'id="calibration-status">Calibrated' in html and "fmax_tree_row_max" in html
    html = client.get(reverse("kernels:contract", args=["C-EXC-01"])).content.decode()  # latest: v0.1.1
    assert 'id="calibration-status">Failed' in html and "did not catch it" in html
