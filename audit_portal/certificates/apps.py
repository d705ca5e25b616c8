from django.apps import AppConfig
from django.urls import reverse


class CertificatesConfig(AppConfig):
    name = "audit_portal.certificates"
    label = "certificates"

    def ready(self):
        from audit_portal.attestations import subjects
        from audit_portal.attestations.models import SubjectKind
        from audit_portal.certificates import consistency  # noqa: F401  (registers this app's consistency checks)
        from audit_portal.certificates.models import RunCertificate
        from audit_portal.jobs.outcomes import register_product_page

        register_product_page("certify_upload")(certificate_page)
        subjects.register(SubjectKind.RUN_CERTIFICATE, model=RunCertificate, files=subjects.uploaded_log)


def certificate_page(job):
    from audit_portal.certificates.models import RunCertificate

    cert = RunCertificate.objects.filter(pk=(job.result or {}).get("certificate"), project_id=job.project_id).first()
    if cert is None or not cert.run_id:
        return None
    return reverse("dashboards:run", args=[job.project.slug, cert.run_id]) + f"?certificate={cert.pk}"
