from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "audit_portal.alerts"
    label = "alerts"

    def ready(self):
        from audit_portal.alerts import signals  # noqa: F401 - connects the "a certificate completed" follow-up
