"""``/ws/projects/<slug>/alerts/``: the alerts page hears every event of the project's rules as it is raised
(``{"type": "alert", "alert": …}``; static/js/alerts.js adds the row and flips the rule's state for that run). The page
itself is server-rendered, so a (re)connect needs no snapshot; with the in-memory channel layer (embedded mode) events
from worker processes do not arrive and the page shows them on reload."""
from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from audit_portal.accounts.principal import Principal
from audit_portal.alerts.events import alerts_group


class ProjectAlertsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        project_id = await self.project_id(Principal(user=user))
        if project_id is None:
            await self.close(code=4404)
            return
        self.group = alerts_group(project_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    @database_sync_to_async
    def project_id(self, principal):
        slug = self.scope["url_route"]["kwargs"]["slug"]
        return principal.readable_projects().filter(slug=slug).values_list("pk", flat=True).first()

    async def alert_event(self, event):
        await self.send_json({"type": "alert", "alert": event["alert"]})
