"""The scheduled log check (celery beat task ``check_transparency_log``, pipelines/maintenance.py): an entry rewritten by the
database owner with the stolen key — the database agreeing with itself — is found by the next check, which raises
the alert once (a signed POST to every alert rule's webhook) and puts a banner on every page until the log verifies
again; ``trust_roots`` prints the fingerprints to pin."""

from __future__ import annotations

import io

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command

from audit_portal import task_names
from audit_portal.alerts import log_integrity, webhooks
from audit_portal.alerts.models import AlertRule
from audit_portal.attestations import keys
from audit_portal.attestations.models import LogCheck
from pipelines import check_transparency_log

from ..conftest import records
from .test_attestations import signing_key_dir  # noqa: F401 - autouse: a signing key of the test's own
from ..certificates.test_certificates import certified
from .test_log_witness import _rewrite_entry_and_resign_everything

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rewritten_entry_is_found_by_the_scheduled_check_with_an_alert_and_a_banner(
    api, project, client, owner, monkeypatch
):
    schedule = django_settings.CELERY_BEAT_SCHEDULE["check-transparency-log"]
    assert schedule["task"] == task_names.CHECK_TRANSPARENCY_LOG and schedule["schedule"] <= 300
    posted = []
    monkeypatch.setattr(
        webhooks,
        "post",
        lambda url, body, **kw: posted.append((url, body, kw["event_id"]))
        or webhooks.Outcome(True, 200, "", False, "", 0.0),
    )
    AlertRule.objects.create(
        project=project,
        name="budget",
        kind="budget",
        threshold=1.0,
        webhook_url="https://alerts.example/hook",
        secret="s" * 32,
    )
    for seed in (1, 2):
        certified(api, project, records(trajectories=3, seed=seed))
    assert check_transparency_log() == {"ok": True, "tree_size": 3, "problems": 0}
    client.force_login(owner)
    assert "log-integrity-banner" not in client.get(f"/p/{project.slug}/").content.decode()
    assert posted == []

    _rewrite_entry_and_resign_everything(1)

    result = check_transparency_log()
    assert result["ok"] is False and result["problems"] >= 1
    latest = LogCheck.objects.first()
    assert any("entry 1 was rewritten" in p for p in latest.problems), latest.problems
    assert len(posted) == 1 and posted[0][0] == "https://alerts.example/hook" and b"log_integrity.fired" in posted[0][1]
    for url in (f"/p/{project.slug}/", "/"):
        page = client.get(url, follow=True).content.decode()
        assert "log-integrity-banner" in page and "Transparency log check failed" in page, url
    check_transparency_log()  # still broken: no second alert
    assert len(posted) == 1


def test_trust_roots_prints_the_fingerprints_to_pin(api, project, settings, tmp_path):
    certified(api, project, records(trajectories=3))
    from workers.verify import keys as K, note

    witness_key = note.verifier_key("w.example", K.generate().public_key(), note.ALG_COSIGNATURE_V1)
    settings.AUDIT_LOG_WITNESS_KEYS = [witness_key]
    out = io.StringIO()
    call_command("trust_roots", keys_out=str(tmp_path / "keys.json"), stdout=out)
    text = out.getvalue()
    active = keys.key_history().active
    assert f"key {active}  active  introduced at log index 0" in text
    assert "note key " + keys.key_set()["keys"][0]["note_key"] in text
    assert f"--witness {witness_key} --min-witnesses K" in text
    assert (tmp_path / "keys.json").is_file()
    assert log_integrity.check_and_alert().ok
    settings.AUDIT_LOG_WITNESS_KEYS = ["w.example+01020304+BAAA"]  # a malformed key is a warning, not a crash
    row = log_integrity.check_and_alert()
    assert row.ok and any("AUDIT_LOG_WITNESS_KEYS" in w for w in row.warnings)
