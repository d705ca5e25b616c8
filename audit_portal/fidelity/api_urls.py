"""REST routes of the fidelity app (mounted under /api/v1/ by audit_portal/api_urls.py)."""

from django.urls import path

from audit_portal.fidelity import api

urlpatterns = [
    path("fidelity/reports/<int:pk>/", api.ReportDetail.as_view(), name="fidelity-report"),
    path("fidelity/reports/<int:pk>/calls/", api.ReportCalls.as_view(), name="fidelity-report-calls"),
    path("fidelity/reports/<int:pk>/masks/", api.MaskDownload.as_view(), name="fidelity-report-masks"),
    path("fidelity/calls/<int:pk>/", api.CallDetail.as_view(), name="fidelity-call"),
    path("runs/<int:pk>/fidelity/", api.RunReportDetail.as_view(), name="run-fidelity"),
    path("uploads/<int:pk>/fidelity/", api.UploadReportDetail.as_view(), name="upload-fidelity"),
    path("projects/<slug:slug>/tokenizers/", api.TokenizerListCreate.as_view(), name="fidelity-tokenizers"),
]
