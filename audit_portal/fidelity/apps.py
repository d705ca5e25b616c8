from django.apps import AppConfig


class FidelityConfig(AppConfig):
    name = "audit_portal.fidelity"
    label = "fidelity"

    def ready(self):
        from audit_portal.fidelity import consistency  # noqa: F401  (registers this app's consistency checks)
