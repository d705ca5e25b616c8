"""``/ws/runs/<id>/live/``: a run's live view as steps stream in, and its alert events.

On connect the current view is sent at once (``{"type": "live", "live": …}``, ``live`` null before any step), then
every merge (``run.live`` from audit_portal/live/services.py) and every alert that fires or re-arms for the run
(``{"type": "alert", "alert": …}``). The connection's shape (sign-in, scope, polling under the in-memory channel
layer): audit_portal/core/consumers.py."""

from __future__ import annotations

from channels.db import database_sync_to_async

from audit_portal.alerts.events import run_group
from audit_portal.core.consumers import ProjectScopedConsumer
from audit_portal.live.models import LiveRun
from audit_portal.live.services import live_json
from audit_portal.runs.selectors import runs_for


class RunLiveConsumer(ProjectScopedConsumer):
    sent_at = None  # the updated_at of the view last sent, to send a polled view only when it changed

    def authorise(self, principal):
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        return [run_group(self.run_id)] if runs_for(principal).filter(pk=self.run_id).exists() else None

    @database_sync_to_async
    def snapshot(self):
        live = LiveRun.objects.select_related("run").filter(run_id=self.run_id).first()
        return live_json(live) if live is not None else None

    async def push_snapshot(self, initial=False):
        view = await self.snapshot()
        stamp = view and view["updated_at"]
        if initial or stamp != self.sent_at:
            self.sent_at = stamp
            await self.send_json({"type": "live", "live": view})

    async def run_live(self, event):
        self.sent_at = event["live"]["updated_at"]
        await self.send_json({"type": "live", "live": event["live"]})

    async def alert_event(self, event):
        await self.send_json({"type": "alert", "alert": event["alert"]})
