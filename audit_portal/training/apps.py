from django.apps import AppConfig
from django.urls import reverse


class TrainingConfig(AppConfig):
    name = "audit_portal.training"
    label = "training"

    def ready(self):
        from audit_portal.jobs.outcomes import register_product_page

        register_product_page("training_step_audit")(training_audit_page)


def training_audit_page(job):
    audit = (job.result or {}).get("training_audit")
    return reverse("training:detail", args=[job.project.slug, audit]) if audit else None
