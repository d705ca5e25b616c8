from django.apps import AppConfig


class CertificatesConfig(AppConfig):
    name = "audit_portal.certificates"
    label = "certificates"
