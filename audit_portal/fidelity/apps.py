from django.apps import AppConfig
from django.urls import reverse


class FidelityConfig(AppConfig):
    name = "audit_portal.fidelity"
    label = "fidelity"

    def ready(self):
        from audit_portal.attestations import subjects
        from audit_portal.attestations.models import SubjectKind
        from audit_portal.fidelity import consistency  # noqa: F401  (registers this app's consistency checks)
        from audit_portal.fidelity.models import FidelityReport
        from audit_portal.jobs.outcomes import register_product_page

        register_product_page("fidelity_audit")(fidelity_report_page)
        subjects.register(SubjectKind.FIDELITY_REPORT, model=FidelityReport, files=subjects.uploaded_log)


def fidelity_report_page(job):
    from audit_portal.fidelity.models import FidelityReport

    report = FidelityReport.objects.filter(pk=(job.result or {}).get("report"), project_id=job.project_id).first()
    if report is None or not report.run_id:
        return None
    return reverse("fidelity:run", args=[job.project.slug, report.run_id]) + f"?report={report.pk}"
