"""Celery tasks: thin. Each loads its inputs, calls an engine, stores results through one service
function, and reports progress. The web tier sends these by name only (it never imports this module)."""
from __future__ import annotations

from celery import shared_task
from django.conf import settings

from audit_portal.jobs.execution import run_job
from audit_portal.jobs.services import reap_stale_jobs as reap
from audit_portal.runs import services as runs
from workers.fcr.validate import validate_file


@shared_task(name="workers.tasks.validate_upload", acks_late=True)
def validate_upload(job_id: int) -> str:
    def work(job, progress):
        upload = runs.begin_processing(job.subject_id)
        progress(0.0, f"validating {upload.original_name}", force=True)
        summary = validate_file(
            runs.artifact_path(upload.storage_name),
            max_errors=settings.UPLOAD_VALIDATION_MAX_ERRORS,
            progress=lambda f, m: progress(f, m),
        )
        upload = runs.record_validation(upload, summary)
        return {"upload": upload.pk, "stage": upload.stage, "records": summary.get("records"),
                "error_count": summary.get("error_count"), "errors": summary.get("errors", [])[:5]}

    return run_job(job_id, work)


@shared_task(name="workers.tasks.reap_stale_jobs")
def reap_stale_jobs() -> dict:
    return reap()


@shared_task(name="workers.tasks.certify_upload", acks_late=True)
def certify_upload(job_id: int) -> str:
    from audit_portal.certificates import services as certificates
    from audit_portal.runs.models import Upload
    from workers.certify import certify_file

    def work(job, progress):
        upload = Upload.objects.select_related("project", "run").get(pk=job.subject_id)
        options = {k: v for k, v in job.params.items() if k in CERTIFY_OPTIONS}
        certificate = certificates.begin(upload, options)
        histograms = certificates.Histograms()
        result = certify_file(
            runs.artifact_path(upload.storage_name),
            sequence_sink=lambda rows: certificates.add_sequences(certificate, rows, histograms),
            progress=lambda f, m: progress(f, m), **options,
        )
        certificate = certificates.complete(certificate, result, histograms)
        s = result["summary"]
        return {"certificate": certificate.pk, "sequences": s.get("sequences"), "tokens": s.get("tokens"),
                "acceptance_rate": s.get("acceptance_rate"), "eps_hat": s.get("eps_hat"),
                "best_bound": result["bounds"].get("best"), "best_bound_id": result["bounds"].get("argmin"),
                "data_errors": s.get("data_errors")}

    return run_job(job_id, work)


CERTIFY_OPTIONS = {"threshold", "budget", "mode", "precision", "eta", "constants", "reward_range"}
