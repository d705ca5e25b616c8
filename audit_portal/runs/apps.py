from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "audit_portal.runs"
    label = "runs"

    def ready(self):
        from audit_portal.runs import consistency  # noqa: F401  (registers this app's consistency checks)
