from celery import shared_task
from django.conf import settings

from audit_portal.jobs.execution import run_job
from audit_portal.runs import services as runs
from workers.fcr.validate import validate_file


@shared_task(name="workers.tasks.validate_upload", acks_late=True)
def validate_upload(job_id: int) -> str:
    """Stream-validate an uploaded run log; a valid upload joins its run and queues its follow-ups."""

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
