from django.apps import AppConfig


class FidelityConfig(AppConfig):
    name = "audit_portal.fidelity"
    label = "fidelity"

    def ready(self):
        from audit_portal.attestations import subjects
        from audit_portal.attestations.models import SubjectKind
        from audit_portal.fidelity import consistency  # noqa: F401  (registers this app's consistency checks)
        from audit_portal.fidelity.models import FidelityReport
        from audit_portal.jobs.outcomes import register_product_page, run_result_page

        register_product_page("fidelity_audit")(run_result_page(FidelityReport, "report", "fidelity:run"))
        subjects.register(SubjectKind.FIDELITY_REPORT, model=FidelityReport, files=subjects.uploaded_log)
