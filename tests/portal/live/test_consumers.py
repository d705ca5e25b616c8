"""Live progress over Channels: a subscriber gets the current state at once, then every change."""

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from audit_portal.accounts.models import Role
from audit_portal.jobs import services
from audit_portal.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)


def communicator(path, user):
    com = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    com.scope["user"] = user
    return com


@pytest.fixture
def job(project):
    return services.create_job(project=project, kind="test", task_name="x", title="demo job", enqueue=False)


def test_job_socket_sends_snapshot_then_progress_then_final_state(job, owner, settings):
    settings.PROGRESS_POLL_SECONDS = 0  # only pushed events, no polling fallback

    async def scenario():
        com = communicator(f"/ws/jobs/{job.pk}/", owner)
        connected, _ = await com.connect()
        assert connected
        first = await com.receive_json_from(timeout=5)
        assert first["job"]["id"] == job.pk and first["job"]["state"] == "queued"
        claimed = await database_sync_to_async(services.start_job)(job.pk)
        assert (await com.receive_json_from(timeout=5))["job"]["state"] == "running"
        await database_sync_to_async(services.report_progress)(claimed, 0.25, "a quarter")
        event = (await com.receive_json_from(timeout=5))["job"]
        assert event["progress"] == 0.25 and event["message"] == "a quarter"
        await database_sync_to_async(services.finish_job)(claimed, {"ok": True})
        final = (await com.receive_json_from(timeout=5))["job"]
        assert final["state"] == "succeeded" and final["result"] == {"ok": True}
        await com.disconnect()

    async_to_sync(scenario)()


def test_project_feed_streams_every_job_of_the_project(project, owner, settings):
    settings.PROGRESS_POLL_SECONDS = 0

    async def scenario():
        com = communicator(f"/ws/projects/{project.slug}/feed/", owner)
        assert (await com.connect())[0]
        assert await com.receive_nothing(timeout=0.2)
        created = await database_sync_to_async(services.create_job)(
            project=project, kind="test", task_name="x", title="new", enqueue=False
        )
        event = (await com.receive_json_from(timeout=5))["job"]
        assert event["id"] == created.pk and event["title"] == "new"
        await com.disconnect()

    async_to_sync(scenario)()


def test_polling_fallback_reports_changes_made_by_another_process(job, owner, settings):
    """Embedded mode: the in-memory layer cannot hear other processes, so the consumer polls rows."""
    settings.PROGRESS_POLL_SECONDS = 0.05

    async def scenario():
        com = communicator(f"/ws/jobs/{job.pk}/", owner)
        assert (await com.connect())[0]
        await com.receive_json_from(timeout=5)
        from audit_portal.jobs.models import Job

        # a write that publishes nothing, as a worker in another process would look from here
        await database_sync_to_async(Job.objects.filter(pk=job.pk).update)(state="failed", error="boom")
        event = (await com.receive_json_from(timeout=5))["job"]
        assert event["state"] == "failed" and event["error"] == "boom"
        await com.disconnect()

    async_to_sync(scenario)()


def test_strangers_and_anonymous_users_are_refused(job, other_project, member_of):
    stranger = member_of(other_project, Role.OWNER, username="stranger")

    async def scenario():
        for path, user, code in [
            (f"/ws/jobs/{job.pk}/", stranger, 4404),
            (f"/ws/jobs/{job.pk}/", AnonymousUser(), 4401),
            ("/ws/projects/alpha/feed/", stranger, 4404),
        ]:
            com = communicator(path, user)
            assert (await com.connect()) == (False, code)
            await com.disconnect()  # let the refused consumer finish before the loop closes

    async_to_sync(scenario)()
