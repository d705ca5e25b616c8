"""Pages of the alerts app (mounted at the site root by audit_portal/urls.py)."""

from django.urls import path

from audit_portal.alerts import views

app_name = "alerts"
urlpatterns = [
    path("p/<slug:slug>/alerts/", views.alerts_page, name="page"),
    path("p/<slug:slug>/alerts/<int:pk>/edit/", views.edit_rule, name="edit"),
    path("p/<slug:slug>/alerts/<int:pk>/secret/", views.rotate_secret, name="secret"),
    path("p/<slug:slug>/alerts/<int:pk>/delete/", views.delete_rule, name="delete"),
]
