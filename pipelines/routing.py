from celery import shared_task

from audit_portal import task_names
from audit_portal.jobs.execution import JobInputError, run_job
from audit_portal.runs import services as runs
from audit_portal.runs.models import Upload

ROUTING_OPTIONS = {"min_flipped_layers", "threshold", "precision"}
MAX_POSITIONS = 4096  # per-position counts kept in the job result (the layer x position grid covers every position)


def compact(report: dict) -> dict:
    """The routing report as a job result: per-position lists cut at MAX_POSITIONS (said in the result)."""
    out = dict(report)
    pp = dict(report["per_position"])
    if len(pp["verified"]) > MAX_POSITIONS:
        pp.update(verified=pp["verified"][:MAX_POSITIONS], flipped=pp["flipped"][:MAX_POSITIONS], cut_at=MAX_POSITIONS)
    out["per_position"] = pp
    return out


@shared_task(name=task_names.ROUTING_AUDIT, acks_late=True)
def routing_audit(job_id: int) -> str:
    """Routing audit of a valid upload that carries MoE routes (docs/routing.md): flip rates, the R3 replay verdict and
    the attribution split, stored as the job's result (``replay.state`` is the CI gate)."""
    from workers.routing.file import RoutingFileError, audit_file

    def work(job, progress):
        upload = Upload.objects.get(pk=job.subject_id)
        path = runs.artifact_path(upload.storage_name)
        if not path.exists():
            raise JobInputError(f"the uploaded file {upload.original_name} is no longer in the artifact store")
        options = {k: v for k, v in job.params.items() if k in ROUTING_OPTIONS}
        total = max(int((upload.validation or {}).get("records") or 0), 1)
        try:
            report = audit_file(path, progress=lambda n: progress(min(n / total, 1.0), f"{n} records"), **options)
        except RoutingFileError as exc:
            raise JobInputError(str(exc)) from None
        return compact(report)

    return run_job(job_id, work)
