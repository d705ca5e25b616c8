from django.apps import AppConfig


class FidelityConfig(AppConfig):
    name = "audit_portal.fidelity"
    label = "fidelity"
