from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "audit_portal.live"
    label = "live"
