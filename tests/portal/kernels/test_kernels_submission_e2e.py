"""Conformance end to end through the worker roles as they ship (``scripts/worker``: prefork pool, the kernels
role on its own queue without a signing key, the general role signing): API submission → job sent by name after
commit → the kernels worker runs each contract in the bubblewrap sandbox → verdicts stored one by one → graded →
a signing job on the cpu queue puts the result in the transparency log. A kernel that raises gets a CRASH verdict
and the worker carries on with the next job; a calibration runs on its own role (scripts/worker calibration)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from audit_portal.attestations.models import LogEntry
from audit_portal.jobs.models import Job
from audit_portal.kernels.models import ContractCalibration, Submission, Verdict

from ..shipped_workers import shipped_workers, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Two of the fastest contracts keep this test short; the engine's own tests cover every class.
CONTRACTS = ["C-EXC-01", "C-PRC-03"]

CRASHING_MODULE = b'''"""A user kernel: row_max raises, mul flushes subnormals (a C-PRC-03 violator)."""
import torch


def row_max(x):
    raise RuntimeError("kernel launch failed: out of shared memory")


def my_mul(x, w):
    torch.set_flush_denormal(True)
    try:
        return torch.mul(x, w)
    finally:
        torch.set_flush_denormal(False)
'''


def finished(submission_id):
    return lambda: Job.objects.get(subject_kind="kernel_submission", subject_id=submission_id).is_terminal


def signed(submission_id):
    return lambda: Job.objects.filter(kind="kernel_signature", subject_id=submission_id, state="succeeded").exists()


def test_reference_passes_and_a_crashing_upload_is_a_verdict_not_a_dead_worker(api, project, settings, tmp_path):
    call_command("load_contracts", "--no-calibrate", stdout=io.StringIO())
    url = f"/api/v1/projects/{project.slug}/kernel-submissions/"
    with shipped_workers(settings, tmp_path):
        ok = api.post(
            url, {"impl": "workers.contracts.impls.reference", "contracts": CONTRACTS, "device": "cpu"}, format="json"
        )
        assert ok.status_code == 201, ok.content
        ok_id = ok.json()["id"]
        assert ok.json()["job"]["queue"] == "kernels"
        assert [e["function"] for e in ok.json()["plan"]] == ["row_max", "mul"]  # signature names by default
        assert wait_for(finished(ok_id)), Job.objects.get(subject_id=ok_id, subject_kind="kernel_submission").as_event()

        module = io.BytesIO(CRASHING_MODULE)
        module.name = "my_kernels.py"
        bad = api.post(
            url,
            {
                "module": module,
                "functions": '{"C-PRC-03": "my_mul"}',
                "contracts": ",".join(CONTRACTS),
                "name": "my kernels",
            },
            format="multipart",
        )
        assert bad.status_code == 201, bad.content
        bad_id = bad.json()["id"]
        assert wait_for(finished(bad_id))
        assert wait_for(signed(ok_id)) and wait_for(signed(bad_id))

    good = api.get(f"/api/v1/kernel-submissions/{ok_id}/").json()
    assert good["job"]["state"] == "succeeded" and good["job"]["progress"] == 1.0
    assert {v["contract_id"].split("/")[0]: v["verdict"] for v in good["verdicts"]} == {
        "C-EXC-01": "PASS",
        "C-PRC-03": "PASS",
    }
    assert good["kc_c"]["EXC"] == 0  # C-EXC-02 was not run: no cherry-picking, the family stays at 0
    assert good["kc_c"]["PRC"] == 0 and set(good["kc_c"]) == {"PRC", "ORD", "CMP", "EXC"}
    assert good["counts"] == {"PASS": 2}
    for v in Verdict.objects.filter(submission_id=ok_id):  # each verdict has its per-measurement trace
        assert v.trace_storage and (Path(settings.ARTIFACT_ROOT) / v.trace_storage).stat().st_size > 0
        assert v.measurements > 0 and v.impl_hash

    crashed = Submission.objects.get(pk=bad_id)
    assert crashed.job.state == "succeeded"  # the job reports verdicts; the kernel's failure is one of them
    verdicts = {v.contract_class: v for v in crashed.verdicts.all()}
    assert verdicts["C-EXC-01"].verdict == "CRASH" and "out of shared memory" in verdicts["C-EXC-01"].reason
    assert verdicts["C-PRC-03"].verdict == "FAIL" and verdicts["C-PRC-03"].margin_infinite
    stored = Path(settings.ARTIFACT_ROOT) / crashed.implementation.storage_name
    assert stored.read_bytes() == CRASHING_MODULE and crashed.implementation.code_sha256 in stored.name
    assert verdicts["C-PRC-03"].impl_hash == crashed.implementation.code_sha256  # the engine ran exactly these bytes

    diff = api.get(f"/api/v1/kernel-submissions/diff/?a={ok_id}&b={bad_id}").json()
    assert diff["counts"]["regressed"] == 2 and diff["counts"]["unchanged"] == 0

    # measured in the sandbox, signed elsewhere: the verdict records its isolation, the signing job (cpu queue)
    # appended the result to the log, and the kernels worker never loaded the key
    for v in Verdict.objects.filter(submission_id__in=[ok_id, bad_id]):
        assert v.detail["environment"]["isolation"]["mode"] == "bubblewrap", v.detail["environment"]
    for sid in (ok_id, bad_id):
        entry = LogEntry.objects.get(subject_kind="kernel_submission", subject_id=sid)
        assert entry.key_id and json.loads(entry.envelope)["signatures"]
    signing = Job.objects.filter(kind="kernel_signature")
    assert {j.queue for j in signing} == {"cpu"} and {j.state for j in signing} == {"succeeded"}
    kernels_log = (tmp_path / "kernels-worker.log").read_text()
    assert "sign_kernel_submission" not in kernels_log and "run_kernel_submission" in kernels_log
    assert not (tmp_path / "worker-var" / "keys").exists()


def test_calibration_runs_on_its_own_role_apart_from_submissions(api, project, settings, tmp_path):
    from audit_portal.kernels import services

    from workers.contracts.loader import SPECS_DIR

    # what is under test is where the job runs, not what it measures: the quickest contract to calibrate (the
    # shipped calibration of every class is tests/contracts/test_kc_calibration.py)
    contracts = services.store_contracts(
        services.parse_contract_files([SPECS_DIR / "C-EXC-01.row_max.v0.1.0.yaml"])
    ).created
    with shipped_workers(settings, tmp_path, roles=("kernels", "calibration")):
        job = services.queue_calibration(contracts)
        assert job.queue == "calibration"  # never in the queue submissions wait in
        assert wait_for(lambda: Job.objects.get(pk=job.pk).is_terminal, timeout=300)
    assert "calibrate_contracts" in (tmp_path / "calibration-worker.log").read_text()
    assert "calibrate_contracts" not in (tmp_path / "kernels-worker.log").read_text()
    job.refresh_from_db()
    assert job.state == "succeeded", job.error
    rows = ContractCalibration.objects.filter(job=job)
    assert {r.status for r in rows} == {"calibrated"}, [(r.contract.contract_class, r.problems) for r in rows]


def test_a_redelivered_job_resumes_after_the_verdicts_already_stored(project):
    """acks_late: a job whose worker died is run again; contracts measured by the first attempt are kept, the
    rest are run (each contract run is a sandboxed child, so a retry never repeats finished work)."""
    from audit_portal.jobs.services import start_job
    from audit_portal.kernels import services
    from workers.contracts.loader import SPECS_DIR
    from pipelines import run_kernel_submission

    services.store_contracts(
        services.parse_contract_files(
            [SPECS_DIR / "C-EXC-01.row_max.v0.1.0.yaml", SPECS_DIR / "C-PRC-03.mul.v0.1.0.yaml"]
        )
    )
    submission = services.submit_conformance(
        project=project,
        submitted_by="ci",
        device="cpu",
        contracts=CONTRACTS,
        import_path="workers.contracts.impls.reference",
    )
    first = next(e for e in submission.plan if e["class"] == "C-PRC-03")
    services.record_verdict(
        submission,
        services.Contract.objects.get(pk=first["contract"]),
        {"verdict": "PASS", "reason": "measured by the first attempt"},
        margin_infinite=False,
    )
    job = start_job(submission.job_id)  # the first attempt's worker is lost mid-job ...
    Job.objects.filter(pk=job.pk).update(state="queued")  # ... and the reaper re-queued it

    assert run_kernel_submission(submission.job_id) == "succeeded"

    verdicts = {v.contract_class: v for v in Verdict.objects.filter(submission=submission)}
    assert verdicts["C-PRC-03"].reason == "measured by the first attempt"  # not run again
    assert verdicts["C-EXC-01"].verdict == "PASS" and verdicts["C-EXC-01"].measurements > 0
    assert Job.objects.get(pk=job.pk).attempts == 2
