from django.apps import AppConfig


class CertificatesConfig(AppConfig):
    name = "audit_portal.certificates"
    label = "certificates"

    def ready(self):
        from audit_portal.certificates import consistency  # noqa: F401  (registers this app's consistency checks)
