"""Signing keys under the log's protection, tried as an attacker: with the application role's credentials (what a
compromised web or worker host holds) the key table is read-only — INSERT, UPDATE, DELETE, TRUNCATE refused — and a
forged key event appended to the log is named by ``verify_log`` and ``check_consistency``; a key written into the key
table any other way (the owner, a restored backup) fails the verifier and the consistency check, naming it; and a
deployed key the log did not introduce cannot sign."""

from __future__ import annotations

import contextlib
import io
import uuid

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from audit_portal.attestations import keys, selectors, services
from audit_portal.attestations.models import LogEntry, SigningKey
from audit_portal.jobs import consistency
from workers.verify import keylog, keys as K

from ..conftest import records
from .test_attestations import signing_key_dir  # noqa: F401 - autouse: a signing key of the test's own
from ..certificates.test_certificates import certified

pytestmark = pytest.mark.django_db(transaction=True)


@contextlib.contextmanager
def app_role_connection():
    """A connection with the application role's privileges, after ``setup_db_roles`` (PostgreSQL only)."""
    if connection.vendor != "postgresql":
        pytest.skip("database roles are PostgreSQL's; on SQLite setup_db_roles explains what it cannot guarantee")
    suffix = uuid.uuid4().hex[:8]
    owner, app = f"ap_test_owner_{suffix}", f"ap_test_app_{suffix}"
    me = connection.settings_dict["USER"] or "postgres"
    try:
        call_command("setup_db_roles", owner=owner, app=app, stdout=open("/dev/null", "w"))
        params = {**connection.get_connection_params()}
        params.update(user=app, password=None)
        for k in ("cursor_factory", "context"):
            params.pop(k, None)
        with psycopg.connect(**{k: v for k, v in params.items() if v is not None}, autocommit=True) as conn:
            yield conn
    finally:
        with connection.cursor() as cur:
            for role in (owner, app):
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
                if cur.fetchone():
                    cur.execute(f"REASSIGN OWNED BY {role} TO {connection.ops.quote_name(me)}")
                    cur.execute(f"DROP OWNED BY {role}")
                    cur.execute(f"DROP ROLE {role}")


def _problems_name(key_id: str) -> None:
    result = selectors.verify_log()
    assert not result.ok and any(key_id in p for p in result.problems), result.problems
    report = consistency.check(rehash=False)
    assert not report.ok and any(key_id in p for p in report.problems), report.problems
    out = io.StringIO()
    with pytest.raises(CommandError, match="consistency problem"):  # manage.py exits 1
        call_command("check_consistency", "--no-rehash", stdout=out)
    assert key_id in out.getvalue()


def test_the_application_role_cannot_write_the_key_table(api, project):
    certified(api, project, records(trajectories=3))
    real = SigningKey.objects.get(status="active")
    evil = K.key_entry(K.generate().public_key())
    with app_role_connection() as conn:
        assert conn.execute("SELECT count(*) FROM attestations_signingkey").fetchone()[0] == 1
        for sql, params in (
            (
                "INSERT INTO attestations_signingkey (key_id, algorithm, public_key, status, created_at) "
                "VALUES (%s, 'ed25519', %s, 'active', now())",
                [evil["key_id"], evil["public_key"]],
            ),
            ("UPDATE attestations_signingkey SET public_key = %s", [evil["public_key"]]),
            ("UPDATE attestations_signingkey SET status = 'retired'", None),
            ("DELETE FROM attestations_signingkey", None),
            ("TRUNCATE attestations_signingkey", None),
            ("ALTER TABLE attestations_signingkey OWNER TO CURRENT_USER", None),
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
                conn.execute(sql, params)
            assert "permission denied" in str(err.value) or "must be owner" in str(err.value), sql
    assert list(SigningKey.objects.values_list("key_id", "public_key", "status")) == [
        (real.key_id, real.public_key, "active")
    ]
    assert selectors.verify_log().ok


def test_a_key_event_forged_through_the_application_role_is_named(api, project):
    certified(api, project, records(trajectories=3))
    evil = K.generate()
    evil_id = K.key_id(evil.public_key())
    active = keys.key_history().active
    # what the app role can do: INSERT a log entry — a rotation to its own key, but without the active private key
    forged = keylog.sign_event("rotate", evil.public_key(), evil, previous_key_id=active, time="2026-01-01T00:00:00Z")
    leaf = services.jcs.canonical(forged)
    index = LogEntry.objects.count()
    with app_role_connection() as conn:
        conn.execute(
            'INSERT INTO attestations_logentry ("index", leaf_hash, envelope, predicate_type, subject_kind, '
            "subject_id, key_id, created_at) VALUES (%s, %s, %s, %s, 'signing_key', 0, %s, now())",
            [index, services.merkle.leaf_hash(leaf).hex(), leaf.decode(), keylog.KEY_PREDICATE, evil_id],
        )
    # the key table's projection followed the (unverified) event; the key set derived from the log did not
    assert SigningKey.objects.filter(key_id=evil_id).exists()
    assert evil_id not in {k["key_id"] for k in keys.key_set()["keys"]}
    _problems_name(evil_id)
    result = selectors.verify_log()
    assert any(f"entry {index}" in p and "not signed by key" in p for p in result.problems), result.problems
    # signing goes on with the log's real key (the forged entry changed nothing the signer trusts)
    assert keys.key_history().active == active


def test_a_key_written_into_the_table_any_other_way_fails_the_verifier_and_the_check(api, project):
    certificate, _ = certified(api, project, records(trajectories=3))
    assert selectors.verify_log().ok
    evil = K.key_entry(K.generate().public_key())
    with connection.cursor() as cur:  # the owner (or a restored backup) writes the table directly
        cur.execute(
            "INSERT INTO attestations_signingkey (key_id, algorithm, public_key, status, created_at) "
            "VALUES (%s, 'ed25519', %s, 'retired', now())",
            [evil["key_id"], evil["public_key"]],
        )
    _problems_name(evil["key_id"])
    detail = api.get(f"/api/v1/attestations/run_certificate/{certificate.pk}/?files=0").json()
    states = {c["name"]: c for c in detail["checks"]}
    assert states["keys"]["state"] == "failed" and evil["key_id"] in states["keys"]["message"], detail
    assert detail["ok"] is False


def test_a_deployed_key_the_log_did_not_introduce_cannot_sign(api, project, settings, tmp_path):
    certified(api, project, records(trajectories=3))
    other = tmp_path / "other.pem"
    other.write_bytes(K.private_pem(K.generate()))
    settings.AUDIT_SIGNING_KEY_FILE = str(other)
    with pytest.raises(AssertionError, match="never introduced through the log"):
        certified(api, project, records(trajectories=3, seed=3))
    # rotating to it needs the log's active key: with it configured, the rotation is an entry it signs
    settings.AUDIT_SIGNING_KEY_FILE = ""
    old, new = services.rotate_signing_key(str(other))
    settings.AUDIT_SIGNING_KEY_FILE = str(other)
    certified(api, project, records(trajectories=3, seed=4))
    history = keys.key_history(events_only=False)
    assert history.problems == [] and history.active == new and history.keys[old]["status"] == "retired"
    assert selectors.verify_log().ok
