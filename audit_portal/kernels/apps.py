from django.apps import AppConfig
from django.urls import reverse

from audit_portal.core.storage import artifact_path


class KernelsConfig(AppConfig):
    name = "audit_portal.kernels"
    label = "kernels"

    def ready(self):
        from audit_portal.attestations import subjects
        from audit_portal.attestations.models import SubjectKind
        from audit_portal.jobs.outcomes import register_product_page
        from audit_portal.kernels import consistency  # noqa: F401  (registers this app's consistency checks)
        from audit_portal.kernels.models import Submission

        register_product_page("kernel_conformance", "kernel_signature")(submission_page)
        register_product_page("calibrate_contracts")(lambda job: reverse("kernels:contracts"))
        subjects.register(SubjectKind.KERNEL_SUBMISSION, model=Submission, files=submitted_module)


def submission_page(job):
    return reverse("kernels:submission", args=[job.project.slug, job.subject_id]) if job.subject_id else None


def submitted_module(submission) -> dict:
    """The uploaded kernel module a submission's statement names (none for an import-path submission)."""
    impl = submission.implementation
    return {impl.original_filename or "module.py": artifact_path(impl.storage_name)} if impl.storage_name else {}
