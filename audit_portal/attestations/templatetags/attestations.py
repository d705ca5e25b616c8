"""``{% attestation_panel kind obj %}``: a certificate page's verification state, the bundle download and the exact
commands that verify it offline against a pinned key set (without one the verifier answers UNPINNED)."""

from __future__ import annotations

from django import template
from django.urls import reverse

from audit_portal.attestations import selectors
from audit_portal.attestations.api import bundle_filename

register = template.Library()
PINNED_KEYS_FILE = "audit-portal-keys.json"


@register.inclusion_tag("attestations/panel.html", takes_context=True)
def attestation_panel(context, kind, obj):
    ctx = {"kind": kind, "obj": obj, "entry": None}
    if obj is None:
        return ctx
    entry = selectors.latest_entry(kind, obj.pk)
    if entry is None:
        return ctx
    report = selectors.verify_entry(entry)
    bundle_url = reverse("attestation-bundle", args=[kind, obj.pk])
    request = context.get("request")
    absolute = request.build_absolute_uri(bundle_url) if request is not None else bundle_url
    fname = bundle_filename(kind, obj.pk)
    files = " ".join(f"--file {name}" for name in selectors.audited_files(kind, obj)) or ""
    keys_url = reverse("well-known-keys")
    keys_absolute = request.build_absolute_uri(keys_url) if request is not None else keys_url
    ctx.update(
        entry=entry,
        report=report,
        checks=report.checks,
        ok=report.ok,
        bundle_url=bundle_url,
        detail_url=reverse("attestation-detail", args=[kind, obj.pk]),
        keys_url=keys_url,
        pin=f"curl -sf -o {PINNED_KEYS_FILE} {keys_absolute}   # once, then keep this file\n"
        f"python -m workers.verify --pin-keys {PINNED_KEYS_FILE}",
        download=f'curl -sf -H "Authorization: Bearer $TOKEN" -o {fname} {absolute}',
        command=f"python -m workers.verify {fname} {files}".strip(),
    )
    return ctx
