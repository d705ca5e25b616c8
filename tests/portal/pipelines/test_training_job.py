"""The training-audit job end to end (task function called as a worker would, then through a real in-process
worker listening on the ``gpu`` queue): the stored summaries are the engine's, the per-token arrays land in the
artifact store, the device actually used is recorded (CUDA when present, CPU fallback otherwise), a config that
cannot run fails the job with the reason, and the page draws the stored data."""

from __future__ import annotations

import gzip
import json
import re
import time
from pathlib import Path

import pytest
import torch
from celery.contrib.testing.worker import start_worker

from audit_portal.celery import app
from audit_portal.jobs.models import Job
from audit_portal.training import services
from audit_portal.training.models import TrainingAudit
from pipelines import training_step_audit
from workers.training.audit import audit_config
from workers.training.config import validate

from ..training.test_training_api import TINY

pytestmark = pytest.mark.django_db

CONFIG = {**TINY, "losses": ["ppo", "dppo_binary_tv", "cdppo", "trm_max_kl"], "numerics": "bf16_weights"}


@pytest.fixture(scope="module")
def direct():
    """The engine on the same config, outside the portal (CPU): the oracle for what the portal stores."""
    return audit_config(validate(CONFIG), "cpu")


def run(project, config=CONFIG, monkeypatch=None, cuda=False):
    if monkeypatch is not None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    audit = services.submit(project=project, data=config, submitted_by="olivia")
    outcome = training_step_audit(audit.job_id)
    audit.refresh_from_db()
    return audit, outcome


def test_job_stores_the_engine_result_and_the_per_token_file(project, settings, monkeypatch, direct):
    messages = []
    real = services.jobs.report_progress
    monkeypatch.setattr(
        "audit_portal.jobs.services.report_progress", lambda job, f, m="": (messages.append(m), real(job, f, m))
    )
    audit, outcome = run(project, monkeypatch=monkeypatch, cuda=False)
    assert outcome == "succeeded", audit.job.error
    job = Job.objects.get(pk=audit.job_id)
    assert job.state == "succeeded" and job.progress == 1.0 and job.result["training_audit"] == audit.pk
    assert audit.device_used == "cpu" and "CPU fallback" in audit.device_note and job.result["device"] == "cpu"
    assert any(m.startswith("running on cpu") for m in messages)
    # what the portal stored is what the engine computes for this config
    assert audit.divergence["tv"] == pytest.approx(direct["divergence"]["tv"])
    assert audit.divergence["kl"]["max"] == pytest.approx(direct["divergence"]["kl"]["max"])
    assert set(audit.steps) == {"ppo", "dppo_binary_tv", "cdppo", "trm_max_kl"}
    for name, row in direct["steps"].items():
        assert audit.steps[name]["masked_fraction"] == pytest.approx(row["masked_fraction"])
    assert set(audit.certificates) == {"K=1", "K=4"}
    assert audit.summary["batch"] == 4 and audit.summary["model"]["vocab"] == 16
    # per-token arrays: one file, B × T, consistent with the stored summaries
    path = Path(settings.ARTIFACT_ROOT) / audit.tokens_storage
    assert path.exists() and audit.tokens_bytes == path.stat().st_size
    tokens = json.loads(gzip.decompress(path.read_bytes()))
    tv = [v for row in tokens["tv"] for v in row]
    assert len(tokens["tv"]) == 4 and all(len(r) == 6 for r in tokens["tv"]) and len(tokens["tokens"][0]) == 6
    assert sum(tv) / len(tv) == pytest.approx(audit.divergence["tv"]["mean"])
    assert all(
        lo - 1e-9 <= t <= hi + 1e-9 for t, lo, hi in zip(tv, sum(tokens["topk_lo"], []), sum(tokens["topk_hi"], []))
    )
    hist = audit.profile["tv_histogram"]
    assert sum(hist["counts"]) + hist["zeros"] == len(tv)
    assert audit.profile["position"]["x"] == list(range(6))
    assert max(audit.profile["position"]["tv_max"]) == pytest.approx(max(tv))


def test_cuda_request_without_cuda_falls_back_to_cpu_and_says_so(project, monkeypatch):
    audit, outcome = run(project, {**CONFIG, "device": "cuda", "losses": ["ppo"]}, monkeypatch, cuda=False)
    assert outcome == "succeeded"
    assert audit.device_requested == "cuda" and audit.device_used == "cpu"
    assert audit.device_note == "no CUDA on this worker: CPU fallback"
    cpu_only, _ = run(project, {**CONFIG, "device": "cpu", "losses": ["ppo"]}, monkeypatch, cuda=True)
    assert cpu_only.device_used == "cpu" and cpu_only.device_note == "CPU requested"


def test_too_large_for_the_fallback_fails_the_job_with_the_reason(project, monkeypatch):
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
        "device": "cuda",
    }
    audit, outcome = run(project, big, monkeypatch, cuda=False)
    assert outcome == "failed" and not audit.is_complete and audit.device_used == ""
    job = Job.objects.get(pk=audit.job_id)
    assert job.state == "failed" and "too large for the CPU fallback" in job.error and "parameters" in job.error


def test_a_stored_bad_config_fails_the_job_never_the_worker(project):
    audit = services.submit(project=project, data=TINY, submitted_by="olivia")
    TrainingAudit.objects.filter(pk=audit.pk).update(config={**audit.config, "numerics": "fp8_magic"})
    assert training_step_audit(audit.job_id) == "failed"
    job = Job.objects.get(pk=audit.job_id)
    assert (
        job.state == "failed" and job.error.startswith("invalid configuration: numerics:") and "fp8_magic" in job.error
    )
    assert training_step_audit(audit.job_id) == "skipped"  # a redelivered message does not run a finished job


def test_the_page_carries_the_figures_data(client, project, owner, monkeypatch):
    audit, _ = run(project, monkeypatch=monkeypatch)
    client.force_login(owner)
    html = client.get(f"/p/{project.slug}/training/{audit.pk}/").content.decode()
    assert "/static/vendor/plotly-basic.min" in html and "cdn.plot.ly" not in html
    figures = json.loads(
        re.search(r'<script id="training-figures" type="application/json">(.*?)</script>', html, re.S).group(1)
    )
    assert set(figures) == {
        "tv_distribution",
        "tv_by_position",
        "interval_by_position",
        "bounds",
        "undetermined",
        "masked",
    }
    masked = figures["masked"]["data"][0]
    assert masked["x"] == audit.config["losses"] and masked["y"] == [
        audit.steps[n]["masked_fraction"] for n in masked["x"]
    ]
    assert figures["tv_distribution"]["data"][0]["y"] == audit.profile["tv_histogram"]["counts"]
    mean_tv = next(t for t in figures["tv_by_position"]["data"] if t["name"] == "mean TV")
    assert mean_tv["y"] == audit.profile["position"]["tv_mean"]
    band = figures["interval_by_position"]["data"][0]
    assert band["y"] == audit.profile["position"]["topk_hi_mean"] + audit.profile["position"]["topk_lo_mean"][::-1]
    bounds = {t["name"]: t["y"] for t in figures["bounds"]["data"]}
    assert bounds["top-K"] == [
        audit.certificates[k]["sequence"]["topk_tv_mode"]["bounds"]["best"] for k in ("K=1", "K=4")
    ]
    assert re.findall(r'data-loss="([^"]+)"', html) == audit.config["losses"]  # the config's order, not jsonb's
    for row in ('id="device-used"', "cpu", 'id="steps-table"', 'data-loss="cdppo"', 'data-view="K=4"'):
        assert row in html
    listing = client.get(f"/p/{project.slug}/training/").content.decode()
    assert f'data-audit-id="{audit.pk}"' in listing


def test_downsampled_positions_keep_means_and_maxima():
    n = 600
    position = {"tv_mean": [i / n for i in range(n)], "tv_max": [(i * 7919) % n for i in range(n)]}
    out = services.downsample_positions(position, max_points=256)
    assert out["width"] == 3 and len(out["x"]) == 200 and out["x"][:3] == [0, 3, 6]
    assert max(out["tv_max"]) == max(position["tv_max"])
    assert sum(out["tv_mean"]) / len(out["tv_mean"]) == pytest.approx(sum(position["tv_mean"]) / n)


@pytest.mark.django_db(transaction=True)
def test_a_worker_on_the_gpu_queue_runs_the_submitted_job(api, project):
    import pipelines  # noqa: F401 - registers the tasks with the app, as `celery -A` would

    with start_worker(app, pool="solo", perform_ping_check=False, queues=["gpu"], shutdown_timeout=10):
        response = api.post(
            f"/api/v1/projects/{project.slug}/training-audits/", {**TINY, "losses": ["ppo"]}, format="json"
        )
        assert response.status_code == 201
        job_id = response.json()["job"]["id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not Job.objects.get(pk=job_id).is_terminal:
            time.sleep(0.1)
    detail = api.get(f"/api/v1/training-audits/{response.json()['id']}/").json()
    assert detail["job"]["state"] == "succeeded" and detail["state"] == "complete"
    assert detail["device_used"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert detail["divergence"]["tv"]["n"] == 4 * 6 and detail["links"]["tokens"]
    tokens = api.get(detail["links"]["tokens"])
    assert (
        tokens.status_code == 200
        and json.loads(gzip.decompress(b"".join(tokens.streaming_content)))["audit"] == detail["id"]
    )
