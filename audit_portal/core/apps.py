from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "audit_portal.core"
    label = "core"

    def ready(self):
        from audit_portal.core import schema  # noqa: F401  (registers the API-key OpenAPI extension)
