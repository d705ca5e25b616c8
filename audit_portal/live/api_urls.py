"""REST routes of the live app (mounted under /api/v1/ by audit_portal/api_urls.py)."""

from django.urls import path

from audit_portal.live import api

urlpatterns = [path("runs/<int:pk>/live/", api.RunLive.as_view(), name="run-live")]
