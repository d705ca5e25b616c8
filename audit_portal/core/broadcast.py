"""Messages to the pages' websockets through the channel layer (consumers: audit_portal/core/consumers.py).

Sending never raises: live updates are a convenience and the database row is the truth, so a channel layer that is
down costs the pages their live view, never the job, the merge or the alert that was being recorded.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def publish(message: dict, *groups: str) -> None:
    """Send ``message`` (its ``type`` names the consumers' handler: ``job.event`` → ``job_event``) to each group."""
    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        try:
            async_to_sync(layer.group_send)(group, message)
        except Exception as exc:  # noqa: BLE001 - see the module docstring
            log.warning("could not publish %s to %s: %s", message.get("type"), group, exc)
