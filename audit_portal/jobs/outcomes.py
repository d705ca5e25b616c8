"""What a job's state means to a person, and what it produced.

A job that ran to the end is ``succeeded`` even when what it found is bad news (an upload that is not a valid run
log): the state says the work finished, the outcome says what came of it. ``outcome(job)`` is the one place that
turns (kind, state, result) into plain words and a badge colour; the pages, the websocket events and the REST API
all use it, so the same job never reads "succeeded" in one place and "invalid" in another.

``product_url(principal, job)`` resolves what a finished job made (a certificate, a fidelity report, a kernel
submission's results, a training audit, the upload it validated) to the page that shows it; ``/jobs/<id>/result/``
redirects there, so a live event needs only the job's id to link to its result.
"""
from __future__ import annotations

from django.urls import reverse

# kind -> what a successful job of that kind produced, in words
PRODUCTS = {
    "validate_upload": "validation report",
    "certify_upload": "certificate",
    "fidelity_audit": "fidelity report",
    "routing_audit": "routing audit",
    "kernel_conformance": "conformance results",
    "kernel_signature": "signed conformance result",
    "training_step_audit": "training audit",
    "calibrate_contracts": "contract calibration",
}


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def outcome(kind: str, state: str, result: dict | None, error: str = "") -> dict:
    """``{"text", "tone"}``: the state in plain words (``finished: invalid (3 errors)``) and the badge colour
    (one of the stage/state badge classes: ``valid``, ``invalid``, ``running``, ``queued``, ``cancelled``)."""
    result = result or {}
    if state == "queued":
        return {"text": "queued", "tone": "queued"}  # waiting for a worker
    if state == "running":
        return {"text": "running", "tone": "running"}
    if state == "cancelled":
        return {"text": "cancelled", "tone": "cancelled"}
    if state == "failed":
        return {"text": "failed", "tone": "invalid"}
    if state != "succeeded":
        return {"text": state, "tone": "queued"}
    if kind == "validate_upload":
        stage = result.get("stage")
        if stage == "invalid":
            return {"text": f"finished: invalid ({_plural(int(result.get('error_count') or 0), 'error')})",
                    "tone": "invalid"}
        if stage == "valid":
            records = result.get("records")
            return {"text": "finished: valid" + (f" ({_plural(int(records), 'record')})" if records else ""),
                    "tone": "valid"}
    if kind == "fidelity_audit" and result.get("verdict"):
        passed = result["verdict"] == "PASS"
        return {"text": "finished: " + ("audit passed" if passed else "audit failed"),
                "tone": "valid" if passed else "invalid"}
    if kind == "routing_audit" and isinstance(result.get("replay"), dict):
        state = result["replay"].get("state")
        return {"text": f"finished: replay {state}" if state in ("PASS", "FAIL", "UNVERIFIABLE") else "finished",
                "tone": {"PASS": "valid", "FAIL": "invalid", "UNVERIFIABLE": "duplicate"}.get(state, "valid")}
    if kind == "certify_upload" and result.get("data_errors"):
        return {"text": f"finished ({_plural(int(result['data_errors']), 'sequence')} with data errors)",
                "tone": "duplicate"}
    return {"text": "finished", "tone": "valid"}


def job_outcome(job) -> dict:
    """``outcome`` of a Job row, plus the label and link of what it produced (succeeded jobs only)."""
    out = outcome(job.kind, job.state, job.result, job.error)
    if job.state == "succeeded" and job.kind in PRODUCTS:
        out.update(product=PRODUCTS[job.kind], product_url=reverse("dashboards:job_result", args=[job.pk]))
    return out


def product_url(job) -> str | None:
    """The page showing what ``job`` produced, or None (not finished, or nothing to show). The caller has already
    checked that the principal may read the job; every object named here belongs to the job's project."""
    from audit_portal.certificates.models import RunCertificate
    from audit_portal.fidelity.models import FidelityReport
    from audit_portal.runs.models import Upload

    if job.state != "succeeded":
        return None
    slug, result = job.project.slug, job.result or {}
    if job.kind == "validate_upload" and job.subject_id:
        return reverse("dashboards:upload", args=[slug, job.subject_id])
    if job.kind == "certify_upload":
        cert = RunCertificate.objects.filter(pk=result.get("certificate"), project_id=job.project_id).first()
        if cert is not None and cert.run_id:
            return reverse("dashboards:run", args=[slug, cert.run_id]) + f"?certificate={cert.pk}"
    if job.kind == "fidelity_audit":
        report = FidelityReport.objects.filter(pk=result.get("report"), project_id=job.project_id).first()
        if report is not None and report.run_id:
            return reverse("fidelity:run", args=[slug, report.run_id]) + f"?report={report.pk}"
    if job.kind in ("kernel_conformance", "kernel_signature") and job.subject_id:
        return reverse("kernels:submission", args=[slug, job.subject_id])
    if job.kind == "training_step_audit" and result.get("training_audit"):
        return reverse("training:detail", args=[slug, result["training_audit"]])
    if job.kind == "calibrate_contracts":
        return reverse("kernels:contracts")
    if job.subject_kind == "upload" and job.subject_id:
        upload = Upload.objects.filter(pk=job.subject_id, project_id=job.project_id).first()
        if upload is not None:
            return reverse("dashboards:upload", args=[slug, upload.pk])
    return None
