"""The one shape of every websocket the portal serves: a signed-in user's view onto channel groups they may read.

A connection without a session is closed with 4401, one for something the user may not read (or that does not
exist: the two are not told apart) with 4404. An accepted connection joins the subclass's groups and is sent the
current state at once, so a page that connects late or reconnects is never stale. With the in-memory channel layer
(embedded mode) a worker in another process cannot reach the groups, so a consumer that has state to show also
re-reads it every PROGRESS_POLL_SECONDS and sends what changed.

A subclass says which groups a principal may join (``authorise``, run in a thread: it reads the database) and, if it
has state to show, how to send it (``push_snapshot``); its group message handlers are its own.
"""

from __future__ import annotations

import asyncio
import contextlib

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from audit_portal.accounts.principal import Principal

UNAUTHENTICATED, NOT_FOUND = 4401, 4404


class ProjectScopedConsumer(AsyncJsonWebsocketConsumer):
    has_snapshot = True  # False: the page is server-rendered and a (re)connect needs nothing sent

    def authorise(self, principal: Principal) -> list[str] | None:
        """The channel groups this principal may join for the URL in ``self.scope``; None when it may not read it."""
        raise NotImplementedError

    async def push_snapshot(self, initial: bool = False) -> None:
        """Send the current state: everything when ``initial``, else only what changed since the last send."""

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=UNAUTHENTICATED)
            return
        joined = await database_sync_to_async(self.authorise)(Principal(user=user))
        if joined is None:
            await self.close(code=NOT_FOUND)
            return
        self.joined, self.poller = joined, None
        for group in joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        if self.has_snapshot:
            await self.push_snapshot(initial=True)
            if settings.PROGRESS_POLL_SECONDS:
                self.poller = asyncio.ensure_future(self._poll())

    async def disconnect(self, code):
        if getattr(self, "poller", None):
            self.poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.poller
        for group in getattr(self, "joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _poll(self):
        while True:
            await asyncio.sleep(settings.PROGRESS_POLL_SECONDS)
            await self.push_snapshot()
