from django.apps import AppConfig


class AttestationsConfig(AppConfig):
    name = "audit_portal.attestations"
    verbose_name = "Signed certificates and the transparency log"
