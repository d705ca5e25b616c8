from django.apps import AppConfig


class KernelsConfig(AppConfig):
    name = "audit_portal.kernels"
    label = "kernels"
