from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "audit_portal.dashboards"
    label = "dashboards"
