"""Websocket consumers for live job progress.

``/ws/jobs/<id>/`` streams one job; ``/ws/projects/<slug>/feed/`` streams every job of a project. On
connect the current state is sent at once, so a page that reconnects (or connected late) is never stale.
With the in-memory channel layer (embedded mode) a worker in another process cannot reach the group, so
the consumer also polls the rows every PROGRESS_POLL_SECONDS and pushes what changed.
"""
from __future__ import annotations

import asyncio
import contextlib

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from audit_portal.accounts.principal import Principal
from audit_portal.jobs.events import job_group, project_group
from audit_portal.jobs.models import Job


class _LiveJobsConsumer(AsyncJsonWebsocketConsumer):
    groups_to_join: list[str]

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        allowed = await self.authorise(Principal(user=user))
        if not allowed:
            await self.close(code=4404)
            return
        self.seen: dict[int, dict] = {}  # last event sent per job, to push only what changed
        self.poller = None
        for group in self.groups_to_join:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.push_snapshot()
        if settings.PROGRESS_POLL_SECONDS:
            self.poller = asyncio.ensure_future(self.poll())

    async def disconnect(self, code):
        if getattr(self, "poller", None):
            self.poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.poller
        for group in getattr(self, "groups_to_join", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def job_event(self, event):
        job = event["job"]
        self.seen[job["id"]] = job
        await self.send_json({"type": "job", "job": job})

    async def push_snapshot(self):
        for event in await self.snapshot():
            if self.seen.get(event["id"]) != event:
                self.seen[event["id"]] = event
                await self.send_json({"type": "job", "job": event})

    async def poll(self):
        while True:
            await asyncio.sleep(settings.PROGRESS_POLL_SECONDS)
            await self.push_snapshot()


class JobConsumer(_LiveJobsConsumer):
    @database_sync_to_async
    def authorise(self, principal):
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        job = Job.objects.filter(pk=self.job_id, project__in=principal.readable_projects()).first()
        if job is None:
            return False
        self.groups_to_join = [job_group(job.pk)]
        return True

    @database_sync_to_async
    def snapshot(self):
        job = Job.objects.filter(pk=self.job_id).first()
        return [job.as_event()] if job else []


class ProjectFeedConsumer(_LiveJobsConsumer):
    @database_sync_to_async
    def authorise(self, principal):
        slug = self.scope["url_route"]["kwargs"]["slug"]
        project = principal.readable_projects().filter(slug=slug).first()
        if project is None:
            return False
        self.project_id = project.pk
        self.groups_to_join = [project_group(project.pk)]
        return True

    @database_sync_to_async
    def snapshot(self):
        return [j.as_event() for j in Job.objects.filter(project_id=self.project_id).order_by("-updated_at")[:20]]
