from django.apps import AppConfig
from django.urls import reverse


class RunsConfig(AppConfig):
    name = "audit_portal.runs"
    label = "runs"

    def ready(self):
        from audit_portal.jobs.outcomes import register_product_page
        from audit_portal.runs import consistency  # noqa: F401  (registers this app's consistency checks)
        from audit_portal.runs import declarations, extras

        # checked with the other extra fields (a bad one refused before storing); receive_upload stores them
        extras.register("config", declarations.parse_config, None)
        extras.register("tags", declarations.parse_tags, None)

        register_product_page("validate_upload")(validated_upload_page)
        register_product_page(subject_kind="upload")(upload_page)


def validated_upload_page(job):
    return reverse("dashboards:upload", args=[job.project.slug, job.subject_id]) if job.subject_id else None


def upload_page(job):
    """Any job about an upload whose own product has no page: the upload's page, if it is still in the project."""
    from audit_portal.runs.models import Upload

    if not job.subject_id or not Upload.objects.filter(pk=job.subject_id, project_id=job.project_id).exists():
        return None
    return reverse("dashboards:upload", args=[job.project.slug, job.subject_id])
