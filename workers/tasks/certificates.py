import logging

from celery import shared_task

from audit_portal.certificates import figures as certificate_figures
from audit_portal.certificates import services as certificates
from audit_portal.jobs.execution import run_job
from audit_portal.runs import services as runs
from audit_portal.runs.models import Upload

log = logging.getLogger(__name__)
CERTIFY_OPTIONS = {"threshold", "budget", "mode", "precision", "eta", "constants", "reward_range"}


@shared_task(name="workers.tasks.certify_upload", acks_late=True)
def certify_upload(job_id: int) -> str:
    """Certify a valid upload; per-sequence summaries are bulk-inserted chunk by chunk as the engine streams."""
    from workers.certify import certify_file  # torch: imported by workers only

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
        progress(1.0, "drawing the run page's figures", force=True)
        try:  # the first visit reads them; without them the web builds them on that visit (figures.py)
            certificate_figures.store_page_figures(certificate)
        except Exception:  # noqa: BLE001 - the certificate is stored and complete; figures are a convenience
            log.exception("could not store the figures of certificate %s", certificate.pk)
        s = result["summary"]
        return {"certificate": certificate.pk, "sequences": s.get("sequences"), "tokens": s.get("tokens"),
                "acceptance_rate": s.get("acceptance_rate"), "eps_hat": s.get("eps_hat"),
                "best_bound": result["bounds"].get("best"), "best_bound_id": result["bounds"].get("argmin"),
                "data_errors": s.get("data_errors")}

    return run_job(job_id, work)
