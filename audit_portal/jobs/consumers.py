"""Websocket consumers for live job progress (the connection's shape: audit_portal/core/consumers.py).

``/ws/jobs/<id>/`` streams one job; ``/ws/projects/<slug>/feed/`` streams every job of a project. Each sends the
jobs' current state on connect and a ``{"type": "job", "job": …}`` message whenever one changes.
"""

from __future__ import annotations

from channels.db import database_sync_to_async

from audit_portal.core.consumers import ProjectScopedConsumer
from audit_portal.jobs.events import job_group, project_group
from audit_portal.jobs.models import Job


class _LiveJobsConsumer(ProjectScopedConsumer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: dict[int, dict] = {}  # last event sent per job, to push only what changed

    async def job_event(self, event):
        job = event["job"]
        self.seen[job["id"]] = job
        await self.send_json({"type": "job", "job": job})

    async def push_snapshot(self, initial=False):
        for event in await self.snapshot():
            if self.seen.get(event["id"]) != event:
                self.seen[event["id"]] = event
                await self.send_json({"type": "job", "job": event})


class JobConsumer(_LiveJobsConsumer):
    def authorise(self, principal):
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        job = Job.objects.filter(pk=self.job_id, project__in=principal.readable_projects()).first()
        return [job_group(job.pk)] if job is not None else None

    @database_sync_to_async
    def snapshot(self):
        job = Job.objects.filter(pk=self.job_id).first()
        return [job.as_event()] if job else []


class ProjectFeedConsumer(_LiveJobsConsumer):
    def authorise(self, principal):
        slug = self.scope["url_route"]["kwargs"]["slug"]
        project = principal.readable_projects().filter(slug=slug).first()
        if project is None:
            return None
        self.project_id = project.pk
        return [project_group(project.pk)]

    @database_sync_to_async
    def snapshot(self):
        return [j.as_event() for j in Job.objects.filter(project_id=self.project_id).order_by("-updated_at")[:20]]
