from django.urls import path

from audit_portal.alerts.consumers import ProjectAlertsConsumer
from audit_portal.jobs.consumers import JobConsumer, ProjectFeedConsumer
from audit_portal.live.consumers import RunLiveConsumer

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", JobConsumer.as_asgi()),
    path("ws/projects/<slug:slug>/feed/", ProjectFeedConsumer.as_asgi()),
    path("ws/runs/<int:run_id>/live/", RunLiveConsumer.as_asgi()),  # a growing run and its alerts
    path("ws/projects/<slug:slug>/alerts/", ProjectAlertsConsumer.as_asgi()),  # the alerts page
]
