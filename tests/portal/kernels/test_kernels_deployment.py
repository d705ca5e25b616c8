"""KC-A and KC-T through the portal (docs/contract-language.md#grades): a submission declares the flags its deployment
runs with and the levels it needs; the worker measures the classes those flags can change a second time with the flags
applied; the grade, the submission page and the CI status show KC-A next to KC-C and whether the target is met. Bad
flags or targets are refused naming the field, and nothing is stored."""

from __future__ import annotations

import re

import pytest

from audit_portal.jobs.models import Job
from audit_portal.kernels.models import Submission
from pipelines import run_kernel_submission

from audit_portal.kernels import services
from workers.contracts.loader import SPECS_DIR

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def suite(db):
    """The first version of every contract: what is under test is how deployment flags are applied, measured
    again and graded, not the sweeps (the v0.4.0 sweeps through the sandbox cost about a minute per submission
    here; tests/contracts cover them)."""
    services.store_contracts(services.parse_contract_files(sorted(SPECS_DIR.glob("*.v0.1.0.yaml"))))


FAMILIES_RUN = ["C-PRC-01", "C-PRC-02", "C-PRC-03", "C-PRC-04", "C-EXC-01", "C-EXC-02"]


def url(project):
    return f"/api/v1/projects/{project.slug}/kernel-submissions/"


@pytest.mark.parametrize(
    "field,value,code,words",
    [
        ("deployment_flags", {"allow_tf64": True}, "invalid_deployment_flags", "unknown deployment flag 'allow_tf64'"),
        ("deployment_flags", {"allow_tf32": "yes"}, "invalid_deployment_flags", "'allow_tf32' must be true or false"),
        ("deployment_flags", {"float32_matmul_precision": "low"}, "invalid_deployment_flags", "must be one of highest"),
        ("deployment_flags", [1, 2], "invalid_deployment_flags", "must be an object"),
        ("target", {"XYZ": 3}, "invalid_target", "unknown family 'XYZ'"),
        ("target", {"ORD": 7}, "invalid_target", "must be 0–4, got 7"),
        ("target", "PRC 3", "invalid_target", "must look like 'PRC=3, ORD=2'"),
    ],
)
def test_bad_flags_and_targets_are_refused_naming_the_field(api, project, field, value, code, words):
    body = {"impl": "workers.contracts.impls.reference", "contracts": ["C-EXC-01"], field: value}
    response = api.post(url(project), body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == code and words in error["message"] and error["message"].startswith(field)
    assert not Submission.objects.exists() and not Job.objects.filter(kind="kernel_conformance").exists()


def test_ftz_in_deployment_lowers_prc_a_below_target_though_prc_c_is_full(api, project, client, owner):
    response = api.post(
        url(project),
        {
            "impl": "workers.contracts.impls.reference",
            "contracts": FAMILIES_RUN,
            "deployment_flags": {"flush_denormal": True},
            "target": "PRC=3, EXC=3",
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["deployment_flags"] == {"flush_denormal": True} and body["target"] == {"PRC": 3, "EXC": 3}
    submission = Submission.objects.get(pk=body["id"])
    assert run_kernel_submission(submission.job_id) == "succeeded", Job.objects.get(pk=submission.job_id).error
    submission.refresh_from_db()
    grade = submission.grade
    assert grade["kc_c"]["PRC"] == 3 and grade["kc_c"]["EXC"] == 3  # every planned contract passes as measured
    # FTZ is the one flag that can change C-PRC-03 (subnormals): measured again under it, it fails -> PRC-A 0
    assert [(d["contract_class"], d["verdict"]) for d in grade["deployment_verdicts"]] == [("C-PRC-03", "FAIL")]
    assert grade["kc_a"]["PRC"] == 0 and grade["kc_a"]["EXC"] == 3
    assert grade["meets_target"] == {"PRC": False, "EXC": True}
    assert all(v.verdict == "PASS" for v in submission.verdicts.all())  # the plan's own verdicts are untouched

    status = api.get(f"/api/v1/implementations/{submission.implementation_id}/status/").json()
    assert status["state"] == "failure" and "below target: PRC 0 < 3" in status["description"]
    assert status["kc_a"]["PRC"] == 0 and status["kc_t"] == {"PRC": 3, "EXC": 3} and status["meets_target"] is False
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/kernels/submissions/{submission.pk}/").content.decode()
    assert re.search(r'id="kc-a"><a href="/glossary/#kc-a"[^>]*>KC-A</a> PRC<b class="l0">0</b>', page)
    assert (
        'PRC ≥ 3 <span class="badge FAIL">below (0)</span>' in page and 'EXC ≥ 3 <span class="badge PASS">met' in page
    )
    assert "flush_denormal=True" in page and '<td class="mono">C-PRC-03</td><td><span class="badge FAIL">' in page


def test_a_target_without_flags_is_judged_on_kc_c_and_can_pass(api, project):
    response = api.post(
        url(project),
        {"impl": "workers.contracts.impls.reference", "contracts": ["C-EXC-01", "C-EXC-02"], "target": {"EXC": 3}},
        format="json",
    )
    submission = Submission.objects.get(pk=response.json()["id"])
    assert run_kernel_submission(submission.job_id) == "succeeded"
    submission.refresh_from_db()
    assert submission.grade["deployment_verdicts"] == [] and submission.grade["meets_all_targets"] is True
    status = api.get(f"/api/v1/implementations/{submission.implementation_id}/status/").json()
    assert status["state"] == "success" and status["meets_target"] is True and status["kc_a"] is None


def test_the_form_sends_flags_and_target(client, project, owner):
    client.force_login(owner)
    form = {
        "source": "import",
        "impl": "workers.contracts.impls.reference",
        "contracts": ["C-EXC-01"],
        "device": "cpu",
        "flag": ["allow_tf32", "flush_denormal"],
        "flag_float32_matmul_precision": "high",
        "target_ORD": "3",
        "target_EXC": "",
    }
    response = client.post(f"/p/{project.slug}/kernels/submit/", form)
    assert response.status_code == 302, response.content
    submission = Submission.objects.get()
    assert submission.deployment_flags == {
        "allow_tf32": True,
        "flush_denormal": True,
        "float32_matmul_precision": "high",
    }
    assert submission.target == {"ORD": 3}
    bad = client.post(f"/p/{project.slug}/kernels/submit/", {**form, "target_ORD": "9"})
    assert bad.status_code == 400 and "target level for ORD must be 0–4" in bad.content.decode()
    assert 'name="flag" value="allow_tf32" checked' in bad.content.decode()  # the form keeps what was chosen
