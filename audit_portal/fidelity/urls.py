"""Pages of the fidelity app (mounted at the site root by audit_portal/urls.py)."""

from django.urls import path

from audit_portal.fidelity import views

app_name = "fidelity"
urlpatterns = [
    path("p/<slug:slug>/runs/<int:pk>/fidelity/", views.run_fidelity, name="run"),
    path("p/<slug:slug>/fidelity/calls/<int:pk>/", views.call_page, name="call"),
    path("p/<slug:slug>/fidelity/tokenizers/", views.tokenizers_page, name="tokenizers"),
]
