from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "audit_portal.core"
    label = "core"
