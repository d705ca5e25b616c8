"""audit_portal.core.broadcast.publish: every group is sent the message, and a failing channel layer never raises
(the job, merge or alert being recorded must not fail because a page cannot be told)."""

import logging

from audit_portal.core import broadcast


class FlakyLayer:
    def __init__(self, failing: set[str]):
        self.failing, self.sent = failing, []

    async def group_send(self, group, message):
        if group in self.failing:
            raise ConnectionError("redis went away")
        self.sent.append((group, message))


def test_each_group_is_sent_the_message_even_when_one_fails(monkeypatch, caplog):
    layer = FlakyLayer(failing={"job.1"})
    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: layer)
    with caplog.at_level(logging.WARNING, logger="audit_portal.core.broadcast"):
        broadcast.publish({"type": "job.event", "job": {"id": 1}}, "job.1", "project.7")
    assert layer.sent == [("project.7", {"type": "job.event", "job": {"id": 1}})]
    assert "could not publish job.event to job.1: redis went away" in caplog.text


def test_without_a_channel_layer_nothing_is_sent(monkeypatch):
    calls = []
    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: None)
    monkeypatch.setattr(broadcast, "async_to_sync", lambda fn: calls.append(fn))
    broadcast.publish({"type": "run.live", "live": None}, "run.3")
    assert calls == []
