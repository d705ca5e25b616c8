from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "audit_portal.jobs"
    label = "jobs"
