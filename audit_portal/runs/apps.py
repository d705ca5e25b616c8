from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "audit_portal.runs"
    label = "runs"
