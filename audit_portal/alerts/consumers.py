"""``/ws/projects/<slug>/alerts/``: the alerts page hears every event of the project's rules as it is raised
(``{"type": "alert", "alert": …}``; static/js/alerts.js adds the row and flips the rule's state for that run). The page
itself is server-rendered, so a (re)connect needs no snapshot; with the in-memory channel layer (embedded mode) events
from worker processes do not arrive and the page shows them on reload. The connection's shape:
audit_portal/core/consumers.py."""

from __future__ import annotations

from audit_portal.alerts.events import alerts_group
from audit_portal.core.consumers import ProjectScopedConsumer


class ProjectAlertsConsumer(ProjectScopedConsumer):
    has_snapshot = False

    def authorise(self, principal):
        slug = self.scope["url_route"]["kwargs"]["slug"]
        project_id = principal.readable_projects().filter(slug=slug).values_list("pk", flat=True).first()
        return [alerts_group(project_id)] if project_id is not None else None

    async def alert_event(self, event):
        await self.send_json({"type": "alert", "alert": event["alert"]})
