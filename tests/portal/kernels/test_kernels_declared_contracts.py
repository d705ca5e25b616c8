"""Declared-property contracts in the portal (issue #24): batch invariance, the exact GELU, lowest-index top-k
ties and a bottom-right causal mask are loaded beside the suite of twelve but run only when a submission names one
by its full id. A class names the suite's contract; a function mapped to a class never reaches a declared contract
of that class. End to end, through the worker roles as they ship, a conforming and a violating GELU get PASS and
FAIL on the declared contract, each with a trace of its own."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from audit_portal.jobs.models import Job
from audit_portal.kernels.models import Contract, Submission

from ..shipped_workers import shipped_workers, wait_for

GELU = "C-CMP-01/gelu/f32->f32.exact_erf"
SOFTMAX_BATCH_INVARIANT = "C-ORD-03/softmax/f32->f32.batch_invariant"

TANH_GELU_MODULE = b'''"""A user's GELU: the tanh approximation, sold as the exact one."""
import math

import torch


def my_gelu(x, out):
    c = math.sqrt(2.0 / math.pi)
    out.copy_(0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x * x * x))))
    return out
'''


def url(project):
    return f"/api/v1/projects/{project.slug}/kernel-submissions/"


def upload(data: bytes, name: str = "my_gelu.py"):
    f = io.BytesIO(data)
    f.name = name
    return f


@pytest.fixture
def loaded(db):
    call_command("load_contracts", "--no-calibrate", stdout=io.StringIO())


@pytest.mark.django_db
def test_declared_contracts_are_loaded_apart_and_listed_with_their_flag(api, loaded):
    suite = Contract.objects.filter(declared=False)
    declared = Contract.objects.filter(declared=True)
    assert {c.contract_id for c in declared} >= {GELU, SOFTMAX_BATCH_INVARIANT}
    assert declared.count() == 9 and not {c.contract_id for c in suite} & {c.contract_id for c in declared}
    listing = api.get("/api/v1/contracts/").json()
    flags = {c["id"]: c["declared"] for c in listing}
    assert flags[GELU] is True and flags["C-CMP-01/rms_norm/f32->f32"] is False
    first_declared = next(i for i, c in enumerate(listing) if c["declared"])
    assert all(c["declared"] for c in listing[first_declared:]), "the suite first, then the declared properties"
    out = io.StringIO()
    call_command("load_contracts", "--no-calibrate", stdout=out)  # idempotent: nothing new the second time
    assert "0 contract version(s) loaded" in out.getvalue()


@pytest.mark.django_db
def test_the_default_plan_is_the_suite_and_a_class_names_the_suites_contract(api, project, loaded):
    whole = api.post(url(project), {"impl": "workers.contracts.impls.reference"}, format="json")
    assert whole.status_code == 201, whole.content
    plan = whole.json()["plan"]
    assert len(plan) == 12 and len({e["class"] for e in plan}) == 12
    assert not {e["contract_id"] for e in plan} & set(
        Contract.objects.filter(declared=True).values_list("contract_id", flat=True)
    )

    by_class = api.post(
        url(project), {"impl": "workers.contracts.impls.reference", "contracts": ["C-ORD-03"]}, format="json"
    )
    assert [e["contract_id"] for e in by_class.json()["plan"]] == ["C-ORD-03/aten.linear/f32.f32->f32.batch_invariant"]

    by_id = api.post(
        url(project),
        {"impl": "workers.contracts.impls.declared_reference", "contracts": [SOFTMAX_BATCH_INVARIANT, "C-ORD-03"]},
        format="json",
    )
    assert by_id.status_code == 201, by_id.content
    entries = {e["contract_id"]: e for e in by_id.json()["plan"]}
    assert entries[SOFTMAX_BATCH_INVARIANT]["function"] == "softmax"
    assert entries[SOFTMAX_BATCH_INVARIANT]["label"] == SOFTMAX_BATCH_INVARIANT
    assert entries["C-ORD-03/aten.linear/f32.f32->f32.batch_invariant"]["label"] == "C-ORD-03"


@pytest.mark.django_db
def test_a_function_mapped_to_a_class_never_reaches_a_declared_contract_of_it(api, project, loaded):
    response = api.post(
        url(project),
        {"module": upload(TANH_GELU_MODULE), "contracts": GELU, "functions": json.dumps({"C-CMP-01": "my_gelu"})},
        format="multipart",
    )
    assert response.status_code == 400
    err = response.json()["error"]
    assert err["code"] == "function_not_found" and "'gelu'" in err["message"], err
    assert not Submission.objects.exists()


@pytest.mark.django_db
def test_pages_show_the_declared_properties_apart(client, owner, project, loaded):
    client.force_login(owner)
    listing = client.get("/contracts/").content.decode()
    suite_table, declared_part = listing.split('id="declared"', 1)
    shown = GELU.replace(">", "&gt;")  # ids are HTML-escaped on the page
    assert shown not in suite_table and shown in declared_part and "C-CMP-01/rms_norm/f32-&gt;f32" in suite_table
    assert client.get(f"/contracts/{GELU}/").status_code == 200
    form = client.get(f"/p/{project.slug}/kernels/submit/").content.decode()
    assert 'id="declared-properties"' in form and f'value="{shown}"' in form


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_declared_gelu_is_judged_through_the_shipped_workers(api, project, settings, tmp_path):
    call_command("load_contracts", "--no-calibrate", stdout=io.StringIO())
    with shipped_workers(settings, tmp_path):
        good = api.post(
            url(project),
            {"impl": "workers.contracts.impls.declared_reference", "contracts": [GELU], "device": "cpu"},
            format="json",
        )
        assert good.status_code == 201, good.content
        bad = api.post(
            url(project),
            {"module": upload(TANH_GELU_MODULE), "contracts": GELU, "functions": json.dumps({GELU: "my_gelu"})},
            format="multipart",
        )
        assert bad.status_code == 201, bad.content
        for sid in (good.json()["id"], bad.json()["id"]):
            done = lambda sid=sid: Job.objects.get(subject_kind="kernel_submission", subject_id=sid).is_terminal
            assert wait_for(done)
    verdicts = {}
    for sid in (good.json()["id"], bad.json()["id"]):
        submission = Submission.objects.get(pk=sid)
        assert submission.job.state == "succeeded", submission.job.error
        (v,) = submission.verdicts.all()
        assert v.contract.contract_id == GELU and v.contract.declared
        assert v.trace_storage.endswith("C-CMP-01_gelu_f32-_f32.exact_erf.jsonl")
        assert (Path(settings.ARTIFACT_ROOT) / v.trace_storage).stat().st_size > 0
        verdicts[sid] = v
    assert verdicts[good.json()["id"]].verdict == "PASS"
    failed = verdicts[bad.json()["id"]]
    assert failed.verdict == "FAIL" and failed.statistic_name == "e" and failed.statistic > failed.bound
