"""``/ws/runs/<id>/live/``: a run's live view as steps stream in, and its alert events.

On connect the current view is sent at once (``{"type": "live", "live": …}``, ``live`` null before any step), then
every merge (``run.live`` from audit_portal/live/services.py) and every alert that fires or re-arms for the run
(``{"type": "alert", "alert": …}``). With the in-memory channel layer (embedded mode) a worker in another process
cannot reach the group, so the view is also polled every PROGRESS_POLL_SECONDS."""
from __future__ import annotations

import asyncio
import contextlib

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from audit_portal.accounts.principal import Principal
from audit_portal.alerts.events import run_group
from audit_portal.live.models import LiveRun
from audit_portal.live.services import live_json
from audit_portal.runs.selectors import runs_for


class RunLiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        if not await self.authorise(Principal(user=user)):
            await self.close(code=4404)
            return
        self.group, self.sent_at, self.poller = run_group(self.run_id), None, None
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.push_snapshot(always=True)
        if settings.PROGRESS_POLL_SECONDS:
            self.poller = asyncio.ensure_future(self.poll())

    async def disconnect(self, code):
        if getattr(self, "poller", None):
            self.poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.poller
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    @database_sync_to_async
    def authorise(self, principal) -> bool:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        return runs_for(principal).filter(pk=self.run_id).exists()

    @database_sync_to_async
    def snapshot(self):
        live = LiveRun.objects.select_related("run").filter(run_id=self.run_id).first()
        return live_json(live) if live is not None else None

    async def push_snapshot(self, always=False):
        view = await self.snapshot()
        stamp = view and view["updated_at"]
        if always or stamp != self.sent_at:
            self.sent_at = stamp
            await self.send_json({"type": "live", "live": view})

    async def poll(self):
        while True:
            await asyncio.sleep(settings.PROGRESS_POLL_SECONDS)
            await self.push_snapshot()

    async def run_live(self, event):
        self.sent_at = event["live"]["updated_at"]
        await self.send_json({"type": "live", "live": event["live"]})

    async def alert_event(self, event):
        await self.send_json({"type": "alert", "alert": event["alert"]})
