from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from audit_portal.accounts.forms import ThrottledAuthenticationForm


def healthz(request):
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="auth/login.html",
            redirect_authenticated_user=True,
            authentication_form=ThrottledAuthenticationForm,
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("audit_portal.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # the split view serves its start-up script as a file: no inline script (Content-Security-Policy). Swagger UI
    # alone: ReDoc's page loaded fonts and a logo from other origins.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("", include("audit_portal.dashboards.urls")),
    path("", include("audit_portal.fidelity.urls")),
    path("", include("audit_portal.kernels.urls")),
    path("", include("audit_portal.attestations.urls")),
    path("", include("audit_portal.training.urls")),
    path("", include("audit_portal.alerts.urls")),
]

handler404 = "audit_portal.core.views.not_found"
handler500 = "audit_portal.core.views.server_error"
