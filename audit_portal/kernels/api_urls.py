"""REST routes of the kernels app (mounted under /api/v1/ by audit_portal/api_urls.py)."""

from django.urls import path

from audit_portal.kernels import api

urlpatterns = [
    path("contracts/", api.ContractList.as_view(), name="contract-list"),
    # contract ids contain slashes ("C-PRC-01/aten.mm/f32.f32->f32"): a path converter, trailing slash kept
    path("contracts/<path:contract_id>/", api.ContractDetail.as_view(), name="contract-detail"),
    path(
        "projects/<slug:slug>/kernel-submissions/",
        api.ProjectSubmissionListCreate.as_view(),
        name="kernel-submission-list",
    ),
    path("projects/<slug:slug>/kernels/matrix/", api.ProjectMatrix.as_view(), name="kernel-matrix"),
    path("kernel-submissions/diff/", api.SubmissionDiff.as_view(), name="kernel-submission-diff"),
    path("kernel-submissions/<int:pk>/", api.SubmissionDetail.as_view(), name="kernel-submission-detail"),
    path("implementations/<int:pk>/status/", api.ImplementationStatus.as_view(), name="implementation-status"),
    path("implementations/<int:pk>/badge.svg", api.ImplementationBadge.as_view(), name="implementation-badge"),
    path(
        "implementations/<int:pk>/public-badge/",
        api.ImplementationPublicBadge.as_view(),
        name="implementation-public-badge",
    ),
]
