from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "audit_portal.alerts"
    label = "alerts"

    def ready(self):
        from audit_portal.alerts import consistency, signals  # noqa: F401 - the follow-up of certificates; checks
