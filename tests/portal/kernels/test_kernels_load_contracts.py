"""load_contracts: the shipped suite loads, reloading is a no-op, a changed text needs a new version, a bad
file is refused with its field and line and nothing is written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from audit_portal.jobs.models import Job
from audit_portal.kernels import selectors
from audit_portal.kernels.models import CalibrationStatus, Contract, ContractCalibration
from workers.contracts.loader import SPECS_DIR

pytestmark = pytest.mark.django_db

PRC01 = "C-PRC-01.matmul.v0.4.0.yaml"  # the latest shipped version (0.1.0 and 0.2.0 ship too)
LATEST = "0.4.0"


@pytest.fixture
def specs(tmp_path) -> Path:
    target = tmp_path / "specs"
    shutil.copytree(SPECS_DIR, target)
    return target


def load(directory, *extra):
    call_command("load_contracts", "--dir", str(directory), *extra, stdout=open("/dev/null", "w"))


def test_suite_loads_once_and_reloading_changes_nothing(specs):
    load(specs)
    shipped = sorted(p.name for p in specs.glob("*.yaml"))
    rows = list(Contract.objects.all())
    # twelve classes, versions 0.1.0, 0.2.0 and 0.4.0 (issue #24); C-PRC-02 and C-CMP-03 also 0.3.0
    assert len(rows) == len(shipped) == 38
    assert {r.contract_class for r in rows} == {r.contract_id.split("/")[0] for r in rows}
    prc = Contract.objects.get(contract_class="C-PRC-01", version=LATEST)
    assert prc.source_text == (specs / PRC01).read_text() and prc.spec["parts"]["tolerance"]["bound"] == "8*sqrt(K)"
    # one calibration job queued for the new versions, each version "queued"
    job = Job.objects.get(kind="calibrate_contracts")
    assert sorted(job.params["contracts"]) == sorted(r.pk for r in rows) and job.queue == "calibration"
    assert set(ContractCalibration.objects.values_list("status", flat=True)) == {CalibrationStatus.QUEUED}

    load(specs)
    assert Contract.objects.count() == 38 and Job.objects.filter(kind="calibrate_contracts").count() == 1

    # --recalibrate queues the versions that are not calibrated (here: one that failed), nothing else
    failed = dict(contract__contract_class="C-EXC-02", contract__version=LATEST)
    ContractCalibration.objects.exclude(**failed).update(status=CalibrationStatus.CALIBRATED)
    ContractCalibration.objects.filter(**failed).update(status=CalibrationStatus.FAILED)
    load(specs, "--recalibrate")
    again = Job.objects.filter(kind="calibrate_contracts").latest("id")
    assert again.params["contracts"] == [Contract.objects.get(contract_class="C-EXC-02", version=LATEST).pk]


def test_edited_text_under_the_same_version_is_refused(specs):
    load(specs, "--no-calibrate")
    path = specs / PRC01
    path.write_text(path.read_text().replace('bound: "8*sqrt(K)"', 'bound: "9*sqrt(K)"'))
    with pytest.raises(
        CommandError, match=r"C-PRC-01/aten.mm/f32.f32->f32 version 0.4.0 is already loaded with different text"
    ):
        load(specs, "--no-calibrate")
    assert (
        Contract.objects.get(contract_class="C-PRC-01", version=LATEST).spec["parts"]["tolerance"]["bound"]
        == "8*sqrt(K)"
    )


def test_a_new_version_is_a_new_row_and_becomes_the_latest(specs):
    load(specs, "--no-calibrate")
    text = (specs / PRC01).read_text()
    assert text.count("  version: 0.4.0\n") == 1
    (specs / "C-PRC-01.matmul.v0.5.0.yaml").write_text(
        text.replace("  version: 0.4.0\n", "  version: 0.5.0\n").replace('bound: "8*sqrt(K)"', 'bound: "7*sqrt(K)"')
    )
    load(specs, "--no-calibrate")
    versions = selectors.contract_versions("C-PRC-01/aten.mm/f32.f32->f32")
    assert [v.version for v in versions] == ["0.5.0", "0.4.0", "0.2.0", "0.1.0"]
    latest = [c for c in selectors.latest_contracts() if c.contract_class == "C-PRC-01"]
    assert [c.version for c in latest] == ["0.5.0"] and latest[0].spec["parts"]["tolerance"]["bound"] == "7*sqrt(K)"
    assert Contract.objects.count() == 39  # 38 shipped + this one


def test_an_invalid_file_names_field_and_line_and_nothing_is_written(specs):
    path = specs / PRC01
    lines = path.read_text().splitlines(keepends=True)
    bad_line = next(i for i, line in enumerate(lines) if line.strip().startswith("level: T2")) + 1
    path.write_text(path.read_text().replace("level: T2", "level: T9"))
    with pytest.raises(CommandError) as info:
        load(specs)
    message = str(info.value)
    assert "tolerance.level" in message and f":{bad_line}:" in message and "T9" in message
    assert Contract.objects.count() == 0 and not Job.objects.exists()
