"""Writes for training-step audits: submit (validate, row + job on the ``gpu`` queue), record the device a worker
chose, and store the engine's result (summaries in Postgres, per-token arrays as one artifact file)."""

from __future__ import annotations

import gzip
import json
import math

from django.db import transaction
from django.utils import timezone

from audit_portal import task_names
from audit_portal.core.errors import PortalError
from audit_portal.jobs import services as jobs
from audit_portal.core.storage import artifact_path
from audit_portal.training.models import TrainingAudit
from workers.jsonsafe import json_safe  # non-finite floats → None (Postgres JSON has no NaN/∞)
from workers.training.config import ConfigError, validate  # torch-free

JOB_KIND = "training_step_audit"
QUEUE = "gpu"  # a GPU worker takes it; the worker started by scripts/up listens on cpu and gpu (CPU fallback)
MAX_POSITIONS = 256
MEAN_SERIES = ("tv_mean", "kl_mean", "topk_lo_mean", "topk_hi_mean")


def check_config(data) -> dict:
    """The validated config, or a 400 ``invalid_training_config`` naming the field."""
    try:
        return validate(data)
    except ConfigError as exc:
        raise PortalError(
            f"{exc.field}: {exc.message}", code="invalid_training_config", extra={"field": exc.field}
        ) from None


def submit(*, project, data, submitted_by: str) -> TrainingAudit:
    config = check_config(data)
    with transaction.atomic():
        audit = TrainingAudit.objects.create(
            project=project,
            config=config,
            rollout_numerics=config["numerics"],
            device_requested=config["device"],
            submitted_by=submitted_by[:150],
        )
        job = jobs.create_job(
            project=project,
            kind=JOB_KIND,
            task_name=task_names.TRAINING_STEP_AUDIT,
            queue=QUEUE,
            title=f"Training-step audit #{audit.pk} · {config['numerics'].replace('_', ' ').replace(',', ' + ')} vs fp32",
            subject_kind="training_audit",
            subject_id=audit.pk,
            submitted_by=submitted_by,
        )
        audit.job = job
        audit.save(update_fields=["job"])
    return audit


def record_device(audit: TrainingAudit, device: str, note: str) -> None:
    audit.device_used, audit.device_note = device, note[:300]
    audit.save(update_fields=["device_used", "device_note"])


def downsample_positions(position: dict, max_points: int = MAX_POSITIONS) -> dict:
    """Per-position series binned to at most ``max_points`` equal bins: means averaged, maxima maxed; ``x`` is the
    bin's first position (0-based) and ``width`` its size."""
    n = len(next(iter(position.values()), []))
    width = max(1, math.ceil(n / max_points))
    out = {"x": list(range(0, n, width)), "width": width}
    for key, values in position.items():
        chunks = [values[i : i + width] for i in range(0, n, width)]
        out[key] = [(sum(c) / len(c)) if key in MEAN_SERIES else max(c) for c in chunks]
    return out


def _store_tokens(audit: TrainingAudit, arrays: dict) -> tuple[str, int]:
    name = f"training/{audit.project_id}/audit-{audit.pk}-tokens.json.gz"
    path = artifact_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump(json_safe({"schema": "training-audit-tokens/1", "audit": audit.pk, **arrays}), fh)
    tmp.replace(path)
    return name, path.stat().st_size


def complete(audit: TrainingAudit, result: dict) -> TrainingAudit:
    """Store the engine's result (rerunning a job overwrites the previous attempt's values)."""
    result = json_safe(result)
    arrays = result.pop("arrays", None)
    if arrays is not None:
        audit.tokens_storage, audit.tokens_bytes = _store_tokens(audit, arrays)
    profile = dict(result.get("profile") or {})
    profile["position"] = downsample_positions(profile.get("position") or {})
    audit.profile = profile
    audit.summary = {
        k: result.get(k)
        for k in (
            "schema",
            "device",
            "torch",
            "numerics",
            "model",
            "batch",
            "group",
            "prompt_len",
            "length",
            "seed",
            "optimizer",
            "reward",
            "timing_s",
        )
    }
    audit.divergence = result.get("divergence") or {}
    audit.certificates = result.get("certificates") or {}
    audit.steps = result.get("steps") or {}
    audit.mask_agreement = result.get("dppo_vs_cdppo_masks") or {}
    audit.trainer_numerics = (result.get("numerics") or {}).get("trainer", audit.trainer_numerics)
    audit.completed_at = timezone.now()
    audit.save()
    return audit
