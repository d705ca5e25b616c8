"""Pages of the training app (mounted at the site root by audit_portal/urls.py)."""

from django.urls import path

from audit_portal.training import views

app_name = "training"
urlpatterns = [
    path("p/<slug:slug>/training/", views.audit_list, name="list"),
    path("p/<slug:slug>/training/<int:pk>/", views.audit_detail, name="detail"),
]
