"""The routing-audit job: queued only for a valid upload whose records carry MoE routes, it stores the flip rates and
the replay verdict as its result, readable through the jobs API (the CI gate reads ``result.replay.state``)."""

from __future__ import annotations

import numpy as np
import pytest

from audit_portal.jobs.models import Job
from audit_portal.runs.models import Upload
from pipelines import routing_audit, validate_upload
from workers.training.moe import experiment_records

from ..conftest import as_file, jsonl, records, upload_url

pytestmark = pytest.mark.django_db

B, T, L, K, E = 4, 10, 3, 2, 8


def _exp(corrupt_layer=None):
    rng = np.random.default_rng(0)
    r = np.stack([[[rng.permutation(E)[:K] for _ in range(L)] for _ in range(T)] for _ in range(B)])
    t = r.copy()
    if corrupt_layer is not None:
        t[2, 5, corrupt_layer] = [x for x in range(E) if x not in r[2, 5, corrupt_layer]][:K]
    lp = np.log(rng.uniform(0.05, 1, (B, T)))
    return {
        "tokens": rng.integers(0, 30, (B, 3 + T)),
        "prompt_len": 3,
        "rollout_routes": r,
        "trainer_routes": t,
        "rollout_logp": lp,
        "trainer_logp": lp,
        "n_experts": E,
    }


def _upload(api, project, recs, name):
    response = api.post(upload_url(project), {"file": as_file(jsonl(recs), name)}, format="multipart")
    assert response.status_code == 201, response.content
    upload = Upload.objects.get(pk=response.json()["id"])
    validate_upload(Job.objects.get(subject_id=upload.pk, kind="validate_upload").pk)
    return upload


def test_r3_run_with_a_corrupted_layer_fails_closed_through_the_api(api, project):
    upload = _upload(api, project, experiment_records(_exp(corrupt_layer=1), replay="R3"), "moe.jsonl")
    job = Job.objects.get(subject_id=upload.pk, kind="routing_audit")  # queued: the log carries routes
    assert routing_audit(job.pk) == "succeeded", Job.objects.get(pk=job.pk).error
    jobs = api.get(f"/api/v1/uploads/{upload.pk}/").json()["jobs"]  # how CI finds it (docs/routing.md)
    assert [j["id"] for j in jobs if j["kind"] == "routing_audit"] == [job.pk]
    body = api.get(f"/api/v1/jobs/{job.pk}/").json()
    replay = body["result"]["replay"]
    assert replay["state"] == "FAIL" and replay["failed_layers"] == [1]
    assert replay["failed"] == [{"call_id": "moe-ground-truth-s0-2", "pairs_flipped": 1, "layers_flipped": [1]}]
    assert body["result"]["pairs_flipped"] == 1 and body["result"]["pairs_verified"] == B * T * L


def test_replay_that_held_passes(api, project):
    upload = _upload(api, project, experiment_records(_exp(), replay="R3"), "held.jsonl")
    job = Job.objects.get(subject_id=upload.pk, kind="routing_audit")
    assert routing_audit(job.pk) == "succeeded"
    assert Job.objects.get(pk=job.pk).result["replay"]["state"] == "PASS"


def test_no_routing_job_for_a_log_without_routes(api, project):
    upload = _upload(api, project, records(trajectories=2), "plain.jsonl")
    assert Upload.objects.get(pk=upload.pk).stage == "valid"
    assert not Job.objects.filter(subject_id=upload.pk, kind="routing_audit").exists()
    assert Job.objects.filter(subject_id=upload.pk, kind="fidelity_audit").exists()


def test_run_page_shows_the_verdict_the_heatmap_and_the_split(api, project, client, owner):
    upload = _upload(api, project, experiment_records(_exp(corrupt_layer=2), replay="R3"), "page.jsonl")
    job = Job.objects.get(subject_id=upload.pk, kind="routing_audit")
    assert routing_audit(job.pk) == "succeeded"
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/runs/{Upload.objects.get(pk=upload.pk).run_id}/").content.decode()
    assert "Replay FAIL" in html and "moe-ground-truth-s0-2" in html and "at layer 2" in html
    # layer 2, positions 4-7 of 4 calls: 16 pairs, the corrupted one flipped
    assert 'id="routing-heatmap"' in html and 'title="1 of 16 flipped"' in html and ">0.063<" in html
    assert 'id="routing-attribution"' in html and "flipped at ≥ 2 layers" in html
