from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "audit_portal.training"
    label = "training"
