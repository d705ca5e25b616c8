"""``/api/v1/`` routes."""

from django.urls import include, path

from audit_portal.accounts import api as accounts
from audit_portal.certificates import api as certificates
from audit_portal.dashboards import api as dashboards
from audit_portal.jobs import api as jobs
from audit_portal.runs import api as runs
from audit_portal.runs import chunked_api as upload_sessions

urlpatterns = [
    path("projects/", accounts.ProjectList.as_view(), name="project-list"),
    path("projects/<slug:slug>/", accounts.ProjectDetail.as_view(), name="project-detail"),
    path("projects/<slug:slug>/api-keys/", accounts.ApiKeyListCreate.as_view(), name="apikey-list"),
    path("projects/<slug:slug>/api-keys/<int:pk>/revoke/", accounts.ApiKeyRevoke.as_view(), name="apikey-revoke"),
    path("projects/<slug:slug>/uploads/", runs.UploadListCreate.as_view(), name="upload-list"),
    path("projects/<slug:slug>/runs/", dashboards.ProjectRunList.as_view(), name="run-list"),
    path("projects/<slug:slug>/runs.<str:fmt>", dashboards.ProjectRunExport.as_view(), name="run-export"),
    path("projects/<slug:slug>/jobs/", jobs.ProjectJobList.as_view(), name="project-job-list"),
    path("uploads/<int:pk>/", runs.UploadDetail.as_view(), name="upload-detail"),
    # resumable uploads in parts (audit_portal/runs/chunked.py)
    path(
        "projects/<slug:slug>/upload-sessions/",
        upload_sessions.UploadSessionCreate.as_view(),
        name="upload-session-create",
    ),
    path("upload-sessions/<uuid:pk>/", upload_sessions.UploadSessionDetail.as_view(), name="upload-session-detail"),
    path(
        "upload-sessions/<uuid:pk>/parts/<int:n>/",
        upload_sessions.UploadSessionPart.as_view(),
        name="upload-session-part",
    ),
    path(
        "upload-sessions/<uuid:pk>/complete/",
        upload_sessions.UploadSessionComplete.as_view(),
        name="upload-session-complete",
    ),
    path("runs/<int:pk>/", dashboards.RunDetail.as_view(), name="run-detail"),
    path("runs/<int:pk>/state/", runs.RunState.as_view(), name="run-state"),
    path("jobs/<int:pk>/", jobs.JobDetail.as_view(), name="job-detail"),
    path("jobs/<int:pk>/cancel/", jobs.JobCancel.as_view(), name="job-cancel"),
    path("runs/<int:pk>/certificate/", certificates.RunCertificateDetail.as_view(), name="run-certificate"),
    path("certificates/compare/", certificates.CertificateComparison.as_view(), name="certificate-compare"),
    path("certificates/<int:pk>/", certificates.CertificateDetail.as_view(), name="certificate-detail"),
    path("certificates/<int:pk>/sequences/", certificates.CertificateSequences.as_view(), name="certificate-sequences"),
    path("certificates/<int:pk>/figures/", certificates.CertificateFigures.as_view(), name="certificate-figures"),
    path("", include("audit_portal.fidelity.api_urls")),
    path("", include("audit_portal.kernels.api_urls")),
    path("", include("audit_portal.attestations.api_urls")),
    path("", include("audit_portal.training.api_urls")),
    path("", include("audit_portal.alerts.api_urls")),
    path("", include("audit_portal.live.api_urls")),
]
