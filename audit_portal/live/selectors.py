"""Reads for live runs. The run is one the caller may read (runs.selectors.get_run found it)."""

from __future__ import annotations

from audit_portal.live.models import LiveRun
from audit_portal.live.services import live_json


def live_view(run) -> dict | None:
    live = LiveRun.objects.select_related("run").filter(run=run).first()
    return live_json(live) if live is not None and live.certificate else None
