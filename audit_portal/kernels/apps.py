from django.apps import AppConfig


class KernelsConfig(AppConfig):
    name = "audit_portal.kernels"
    label = "kernels"

    def ready(self):
        from audit_portal.kernels import consistency  # noqa: F401  (registers this app's consistency checks)
