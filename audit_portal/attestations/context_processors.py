"""The failed-log-check banner on every page (templates/includes/log_integrity_banner.html)."""

from __future__ import annotations

from audit_portal.attestations.models import LogCheck


def banner(request):
    """Context processor: ``log_integrity`` = the latest check when it found the log not consistent, else None."""
    try:
        latest = LogCheck.objects.order_by("-checked_at", "-id").first()
    except Exception:  # noqa: BLE001 - a page must render even before migrate
        return {"log_integrity": None}
    return {"log_integrity": latest if latest is not None and not latest.ok else None}
