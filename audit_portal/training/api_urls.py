"""REST routes of the training app (mounted under /api/v1/ by audit_portal/api_urls.py)."""

from django.urls import path

from audit_portal.training import api

urlpatterns = [
    path(
        "projects/<slug:slug>/training-audits/",
        api.ProjectTrainingAuditListCreate.as_view(),
        name="training-audit-list",
    ),
    path("training-audits/<int:pk>/", api.TrainingAuditDetail.as_view(), name="training-audit-detail"),
    path("training-audits/<int:pk>/tokens/", api.TrainingAuditTokens.as_view(), name="training-audit-tokens"),
]
