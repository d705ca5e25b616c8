from celery import shared_task

from audit_portal import task_names
from audit_portal.jobs.execution import JobInputError, run_job
from audit_portal.training import services as training
from audit_portal.training.models import TrainingAudit


@shared_task(name=task_names.TRAINING_STEP_AUDIT, acks_late=True)
def training_step_audit(job_id: int) -> str:
    """Training-step audit (queue ``gpu``): CUDA when the worker has it, else the CPU fallback, recorded on the row."""
    import torch  # workers only

    from workers.training.audit import audit_config
    from workers.training.config import ConfigError, choose_device, validate

    def work(job, progress):
        audit = TrainingAudit.objects.get(pk=job.subject_id)
        try:
            config = validate(audit.config)  # checked at submission; a stored row is checked again
        except ConfigError as exc:
            raise JobInputError(f"invalid configuration: {exc}") from None
        device, note = choose_device(config, torch.cuda.is_available())
        if device is None:
            raise JobInputError(note)
        if device == "cuda":
            note = f"{note}: {torch.cuda.get_device_name(0)}"
        training.record_device(audit, device, note)
        progress(0.0, f"running on {device} ({note})", force=True)
        result = audit_config(config, device, progress=progress, arrays=True)
        audit = training.complete(audit, result)
        tv = audit.divergence.get("tv") or {}
        return {
            "training_audit": audit.pk,
            "device": device,
            "device_note": note,
            "tv_mean": tv.get("mean"),
            "tv_max": tv.get("max"),
            "losses": len(audit.steps),
            "seconds": (audit.summary.get("timing_s") or {}).get("total"),
        }

    return run_job(job_id, work)
