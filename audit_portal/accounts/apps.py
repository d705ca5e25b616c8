from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "audit_portal.accounts"
    label = "accounts"
