from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "audit_portal.jobs"
    label = "jobs"

    def ready(self):
        from audit_portal.jobs import signals  # noqa: F401 - connects the task_failure handler
