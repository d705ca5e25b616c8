from django.apps import AppConfig


class CertificatesConfig(AppConfig):
    name = "audit_portal.certificates"
    label = "certificates"

    def ready(self):
        from audit_portal.attestations import subjects
        from audit_portal.attestations.models import SubjectKind
        from audit_portal.certificates import consistency  # noqa: F401  (registers this app's consistency checks)
        from audit_portal.certificates.models import RunCertificate
        from audit_portal.jobs.outcomes import register_product_page, run_result_page

        register_product_page("certify_upload")(run_result_page(RunCertificate, "certificate", "dashboards:run"))
        subjects.register(SubjectKind.RUN_CERTIFICATE, model=RunCertificate, files=subjects.uploaded_log)
