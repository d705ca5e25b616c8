"""REST routes of the alerts app (mounted under /api/v1/ by audit_portal/api_urls.py)."""

from django.urls import path

from audit_portal.alerts import api

urlpatterns = [
    path("projects/<slug:slug>/alert-rules/", api.ProjectAlertRuleListCreate.as_view(), name="alert-rule-list"),
    path("alert-rules/<int:pk>/", api.AlertRuleDetail.as_view(), name="alert-rule-detail"),
    path("alert-rules/<int:pk>/secret/", api.AlertRuleSecret.as_view(), name="alert-rule-secret"),
    path("runs/<int:pk>/alerts/", api.RunAlerts.as_view(), name="run-alerts"),
]
