from django.urls import path

from audit_portal.jobs.consumers import JobConsumer, ProjectFeedConsumer

websocket_urlpatterns = [
    path("ws/jobs/<int:job_id>/", JobConsumer.as_asgi()),
    path("ws/projects/<slug:slug>/feed/", ProjectFeedConsumer.as_asgi()),
]
