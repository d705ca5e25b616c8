"""Training-step audits through the API and the project page: submission queues one job on the ``gpu`` queue with
the validated config; a bad field is a 400 naming it and stores nothing; viewers and read-only keys cannot submit;
every read is scoped to the caller's projects (a foreign audit is a 404)."""

from __future__ import annotations

import pytest
from django.http import Http404
from rest_framework.test import APIClient

from audit_portal import task_names
from audit_portal.accounts.models import Role
from audit_portal.accounts.principal import Principal
from audit_portal.accounts.services import issue_api_key
from audit_portal.jobs.models import Job
from audit_portal.training import selectors, services
from audit_portal.training.models import TrainingAudit

pytestmark = pytest.mark.django_db

TINY = {
    "vocab": 16,
    "d_model": 16,
    "n_layers": 1,
    "n_heads": 2,
    "max_len": 16,
    "batch": 4,
    "group": 2,
    "prompt_len": 3,
    "length": 6,
    "topk": 4,
    "losses": ["ppo", "cdppo"],
}


def url(project):
    return f"/api/v1/projects/{project.slug}/training-audits/"


def test_submit_queues_one_gpu_job_with_the_validated_config(api, project):
    response = api.post(url(project), {**TINY, "numerics": "bf16_weights,sdpa"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    audit = TrainingAudit.objects.get(pk=body["id"])
    assert audit.project == project and audit.rollout_numerics == "bf16_weights,sdpa"
    assert audit.config["vocab"] == 16 and audit.config["losses"] == ["ppo", "cdppo"]
    assert audit.config["optimizer"] == "sgd" and audit.config["device"] == "auto"  # defaults filled in
    job = Job.objects.get(pk=body["job"]["id"])
    assert (job.queue, job.task_name, job.subject_kind, job.subject_id) == (
        "gpu",
        task_names.TRAINING_STEP_AUDIT,
        "training_audit",
        audit.pk,
    )
    assert body["state"] == "queued" and body["links"]["page"] == f"/p/{project.slug}/training/{audit.pk}/"
    assert body["submitted_by"].startswith("key:")
    listed = api.get(url(project)).json()["results"]
    assert [a["id"] for a in listed] == [audit.pk]
    assert api.get(f"/api/v1/training-audits/{audit.pk}/").json()["config"] == audit.config


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("numerics", "bf17_autocast", "unknown rollout numerics"),
        ("numerics", "fp32,bf16_weights", "at most one precision"),
        ("batch", -4, "at least 1"),
        ("length", 0, "at least 1"),
        ("vocab", "many", "must be an integer"),
        ("d_model", 4096, "too large for the CPU fallback"),
        ("lr", "nan", "finite"),
        ("losses", ["ppo", "sft"], "unknown loss 'sft'"),
        ("device", "tpu", "must be one of auto, cuda, cpu"),
        ("topk", 99, "at most vocab"),
        ("colour", "blue", "unknown field"),
    ],
)
def test_bad_config_is_a_400_naming_the_field_and_nothing_is_stored(api, project, field, value, words):
    response = api.post(url(project), {**TINY, field: value}, format="json")
    assert response.status_code == 400
    err = response.json()["error"]
    assert err["code"] == "invalid_training_config" and err["detail"]["field"] == field
    assert err["message"].startswith(f"{field}:") and words in err["message"]
    assert not TrainingAudit.objects.exists() and not Job.objects.exists()


def test_a_large_model_needs_the_gpu_and_is_accepted_for_cuda(api, project):
    big = {
        **TINY,
        "vocab": 8192,
        "d_model": 512,
        "n_layers": 4,
        "n_heads": 8,
        "max_len": 96,
        "batch": 32,
        "group": 4,
        "length": 64,
        "topk": 20,
    }
    refused = api.post(url(project), big, format="json")
    assert refused.status_code == 400 and refused.json()["error"]["detail"]["field"] == "d_model"
    accepted = api.post(url(project), {**big, "device": "cuda"}, format="json")
    assert accepted.status_code == 201 and accepted.json()["device_requested"] == "cuda"


def test_a_json_array_body_is_a_400_not_a_crash(api, project):
    response = api.post(url(project), [1, 2], format="json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_training_config"


def test_read_scope_key_and_viewer_cannot_submit(project, owner, member_of, client):
    reader = APIClient()
    reader.credentials(
        HTTP_AUTHORIZATION="Bearer "
        + issue_api_key(project=project, name="ro", scopes=["read"], created_by=owner).token
    )
    response = reader.post(url(project), TINY, format="json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "permission_denied"
    assert reader.get(url(project)).status_code == 200
    client.force_login(member_of(project, Role.VIEWER))
    page = client.get(f"/p/{project.slug}/training/")
    assert page.status_code == 200 and b'id="no-submit"' in page.content and b'id="training-form"' not in page.content
    client.post(f"/p/{project.slug}/training/", {"numerics": "fp32"})
    assert not TrainingAudit.objects.exists()


def test_foreign_audits_are_404_everywhere(api, project, other_project, client, owner):
    foreign = services.submit(project=other_project, data=TINY, submitted_by="sam")
    assert api.get(f"/api/v1/training-audits/{foreign.pk}/").status_code == 404
    assert api.get(f"/api/v1/training-audits/{foreign.pk}/tokens/").status_code == 404
    assert api.get(url(other_project)).status_code == 404
    assert api.post(url(other_project), TINY, format="json").status_code == 404
    mine = Principal(user=owner)
    assert list(selectors.audits_for(mine)) == []
    with pytest.raises(Http404):
        selectors.get_audit(mine, foreign.pk)
    own = services.submit(project=project, data=TINY, submitted_by="olivia")
    assert selectors.get_audit(mine, own.pk) == own
    with pytest.raises(Http404):  # the right audit under another project's page is not found either
        selectors.get_audit(mine, own.pk, other_project)
    client.force_login(owner)
    assert client.get(f"/p/{project.slug}/training/{foreign.pk}/").status_code == 404
    assert client.get(f"/p/{other_project.slug}/training/").status_code == 404


def test_member_submits_from_the_form_and_a_bad_field_is_shown(client, project, member_of):
    client.force_login(member_of(project, Role.MEMBER))
    form = {k: (",".join(v) if isinstance(v, list) else str(v)) for k, v in TINY.items()}
    bad = client.post(f"/p/{project.slug}/training/", {**form, "n_heads": "3", "losses": ["ppo", "cdppo"]})
    assert bad.status_code == 400 and b"n_heads: must divide d_model" in bad.content
    assert b'name="n_heads" id="n_heads" value="3" aria-invalid="true"' in bad.content  # the form keeps the input
    assert not TrainingAudit.objects.exists()
    ok = client.post(
        f"/p/{project.slug}/training/",
        {**form, "losses": ["ppo", "trm_max_kl"], "prompts": "1 2 3\n4 5 6", "numerics": "bf16_autocast,extra_batch"},
    )
    audit = TrainingAudit.objects.get()
    assert ok.status_code == 302 and ok["Location"] == f"/p/{project.slug}/training/{audit.pk}/"
    assert audit.config["prompts"] == [[1, 2, 3], [4, 5, 6]] and audit.config["batch"] == 4  # 2 prompts × group 2
    assert audit.config["losses"] == ["ppo", "trm_max_kl"] and audit.job.queue == "gpu"
    page = client.get(ok["Location"])
    assert page.status_code == 200 and b'id="job-card"' in page.content and b"/ws/jobs/" in page.content


def test_dashboard_links_the_training_page_and_the_schema_has_the_endpoints(client, project, owner):
    client.force_login(owner)
    assert f'href="/p/{project.slug}/training/"'.encode() in client.get(f"/p/{project.slug}/").content
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    post = schema["paths"]["/api/v1/projects/{slug}/training-audits/"]["post"]
    assert "201" in post["responses"] and "application/json" in post["requestBody"]["content"]
    assert "get" in schema["paths"]["/api/v1/training-audits/{id}/"]
    assert "/api/v1/training-audits/{id}/tokens/" in schema["paths"]
