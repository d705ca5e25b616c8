"""Pages of the kernels app (mounted at the site root by audit_portal/urls.py)."""
from django.urls import path

app_name = "kernels"
urlpatterns: list = []
