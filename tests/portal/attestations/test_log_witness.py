"""The transparency log against whoever owns the database: the application's role can only SELECT and INSERT the log
(PostgreSQL: TRUNCATE, ALTER, DISABLE TRIGGER, UPDATE, DELETE refused), and a rewrite by the owner — triggers
disabled, an entry changed, every checkpoint re-signed with the (stolen) signing key, so the database agrees with
itself — is caught by the checkpoints witnessed outside the database, naming the entry, in ``verify_log``,
``check_consistency``, the certificate's verification state and the offline verifier."""

from __future__ import annotations

import base64
import json
import uuid

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from audit_portal.attestations import keys, selectors, witness
from audit_portal.attestations.models import LogEntry
from audit_portal.jobs import consistency
from workers.verify import checkpoint as vcheckpoint
from workers.verify import jcs, merkle, sign_statement, verify_bundle

from ..conftest import records
from .test_attestations import signing_key_dir  # noqa: F401 - autouse: a signing key of the test's own
from ..certificates.test_certificates import certified

# the witness is written when an append commits: these tests commit
pytestmark = pytest.mark.django_db(transaction=True)
LOG_TABLES = ("attestations_logentry", "attestations_checkpoint")


def _as_owner_disable_triggers(cursor, enable=False):
    if connection.vendor == "postgresql":
        for t in LOG_TABLES:
            cursor.execute(f"ALTER TABLE {t} {'ENABLE' if enable else 'DISABLE'} TRIGGER USER")
    else:
        from importlib import import_module

        triggers = import_module("audit_portal.attestations.migrations.0002_append_only_triggers")
        for sql in triggers.SQLITE_FORWARD if enable else triggers.SQLITE_BACKWARD:
            cursor.execute(sql)


def _rewrite_entry_and_resign_everything(index: int):
    """What the database owner with the stolen signing key does: a different statement at ``index``, then every
    checkpoint deleted and signed again over the rewritten leaves."""
    stolen = keys.load_private_key()
    kid = keys.vkeys.key_id(stolen.public_key())
    entry = LogEntry.objects.get(index=index)
    stmt = json.loads(base64.b64decode(json.loads(entry.envelope)["payload"]))
    stmt["predicate"]["summary"]["eps_hat"] = 0.0  # a better-looking certificate
    leaf = jcs.canonical(sign_statement(stmt, stolen, kid))
    with connection.cursor() as cursor:
        _as_owner_disable_triggers(cursor)
        cursor.execute(
            'UPDATE attestations_logentry SET envelope = %s, leaf_hash = %s WHERE "index" = %s',
            [leaf.decode(), merkle.leaf_hash(leaf).hex(), index],
        )
        cursor.execute("DELETE FROM attestations_checkpoint")
        hashes = selectors.leaf_hashes()
        for size in range(1, len(hashes) + 1):
            root = merkle.root(hashes[:size])
            env = jcs.canonical(
                vcheckpoint.sign("audit-portal transparency log", size, root, "2026-01-01T00:00:00Z", stolen, kid)
            )
            cursor.execute(
                "INSERT INTO attestations_checkpoint (tree_size, root_hash, envelope, key_id, created_at) "
                "VALUES (%s, %s, %s, %s, CURRENT_TIMESTAMP)",
                [size, root.hex(), env.decode(), kid],
            )
        _as_owner_disable_triggers(cursor, enable=True)


def test_a_rewrite_by_the_database_owner_is_caught_by_the_witness_naming_the_entry(api, project, settings, tmp_path):
    certs = [certified(api, project, records(trajectories=3, seed=s))[0] for s in (1, 2, 3)]
    n = LogEntry.objects.count()
    # entry 0 introduces the signing key; one witnessed checkpoint per append, outside the database
    assert n == 4 and len(witness.witnessed()) == 4
    assert LogEntry.objects.get(index=0).subject_kind == "signing_key"
    result = selectors.verify_log()
    assert result.ok and result.witnessed_checked == 4 and not result.warnings, result
    pinned = witness.latest()

    _rewrite_entry_and_resign_everything(2)  # the second certificate

    result = selectors.verify_log()
    db_only = [p for p in result.problems if not p.startswith("witness:")]
    assert db_only == []  # the database agrees with itself: every signature and root checks out
    assert any("entry 2 was rewritten" in p for p in result.problems), result.problems
    report = consistency.check(rehash=False)
    assert not report.ok and any(
        "transparency log: witness:" in p and "entry 2 was rewritten" in p for p in report.problems
    ), report.problems
    # the certificate's page state: its bundle still verifies by signature and inclusion, not by consistency
    detail = api.get(f"/api/v1/attestations/run_certificate/{certs[2].pk}/?files=0").json()
    states = {c["name"]: c["state"] for c in detail["checks"]}
    assert states["signature"] == states["inclusion"] == "ok" and states["consistency"] == "failed", detail
    # and a user who pinned the witnessed checkpoint sees it offline too
    bundle = selectors.bundle(LogEntry.objects.get(index=3), consistency_from=4)
    out = verify_bundle(bundle, keys=bundle["keys"], since=pinned)
    assert out.verdict == "NOT VERIFIED" and [c.name for c in out.failed] == ["consistency"]


def test_removed_entries_and_a_lagging_witness_are_reported(api, project, settings):
    certified(api, project, records(trajectories=3))
    certified(api, project, records(trajectories=3, seed=9))
    root = settings.AUDIT_LOG_WITNESS_DIR
    settings.AUDIT_LOG_WITNESS_DIR = ""
    certified(api, project, records(trajectories=3, seed=4))  # not witnessed: the witness was off
    settings.AUDIT_LOG_WITNESS_DIR = root
    result = selectors.verify_log()
    assert result.ok and any(
        "latest witnessed checkpoint is of tree size 3, the log has 4" in w for w in result.warnings
    ), result
    assert any("lags" in w for w in consistency.check(rehash=False).warnings)
    with connection.cursor() as cursor:  # the owner empties the log
        _as_owner_disable_triggers(cursor)
        cursor.execute("DELETE FROM attestations_checkpoint")
        cursor.execute("DELETE FROM attestations_logentry")
        _as_owner_disable_triggers(cursor, enable=True)
    result = selectors.verify_log()
    assert not result.ok and any(
        "larger than the log in the database (0 entries): entries were removed" in p for p in result.problems
    ), result.problems


def test_the_witness_never_replaces_a_checkpoint_and_keeps_a_fork(tmp_path, settings):
    settings.AUDIT_LOG_WITNESS_DIR = str(tmp_path / "w")
    key = keys.vkeys.generate()
    entry = keys.vkeys.key_entry(key.public_key())
    a = jcs.canonical(vcheckpoint.sign("o", 1, b"\1" * 32, "t", key, entry["key_id"]))
    b = jcs.canonical(vcheckpoint.sign("o", 1, b"\2" * 32, "t", key, entry["key_id"]))
    witness.publish(a, 1, entry)
    witness.publish(a, 1, entry)  # the same again: nothing changes
    witness.publish(b, 1, entry)  # a different checkpoint of the same size
    files = sorted(p.name for p in (tmp_path / "w" / "checkpoints").iterdir())
    assert len(files) == 2 and "000000000001.json" in files and files[0].startswith("000000000001.conflict-")
    assert (tmp_path / "w" / "checkpoints" / "000000000001.json").read_bytes() == a
    problems = []
    witness.check([b"\1" * 32], {"keys": []}, problems.append, problems.append)
    assert any("fork" in p for p in problems)


def test_the_application_role_can_only_insert_and_select_the_log(db):
    if connection.vendor != "postgresql":
        pytest.skip("database roles are PostgreSQL's; on SQLite setup_db_roles explains what it cannot guarantee")
    suffix = uuid.uuid4().hex[:8]
    owner, app = f"ap_test_owner_{suffix}", f"ap_test_app_{suffix}"
    me = connection.settings_dict["USER"] or "postgres"
    try:
        call_command("setup_db_roles", owner=owner, app=app)
        params = {**connection.get_connection_params()}
        params.update(user=app, password=None)
        params.pop("cursor_factory", None)
        params.pop("context", None)
        with psycopg.connect(**{k: v for k, v in params.items() if v is not None}, autocommit=True) as conn:
            conn.execute("SELECT count(*) FROM attestations_logentry").fetchone()
            conn.execute(
                'INSERT INTO attestations_logentry ("index", leaf_hash, envelope, predicate_type, '
                "subject_kind, subject_id, key_id, created_at) VALUES (0, 'x', '{}', 'p', 'run_certificate', "
                "1, 'k', now())"
            )
            refused = {}
            for sql in (
                "UPDATE attestations_logentry SET leaf_hash = 'y'",
                "DELETE FROM attestations_logentry",
                "TRUNCATE attestations_logentry",
                "TRUNCATE attestations_checkpoint",
                "ALTER TABLE attestations_logentry DISABLE TRIGGER USER",
                "ALTER TABLE attestations_checkpoint DISABLE TRIGGER ALL",
                "DROP TRIGGER attestations_logentry_append_only ON attestations_logentry",
                "ALTER TABLE attestations_logentry OWNER TO " + app,
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
                    conn.execute(sql)
                refused[sql] = str(err.value).splitlines()[0]
            assert all(("permission denied" in r or "must be owner" in r) for r in refused.values()), refused
        # the owner role is still able to migrate (owns the tables); the application keeps its other privileges
        with connection.cursor() as cur:
            cur.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'attestations_logentry'")
            assert cur.fetchone()[0] == owner
            cur.execute(
                "SELECT has_table_privilege(%s, 'jobs_job', 'UPDATE'), "
                "has_table_privilege(%s, 'attestations_logentry', 'UPDATE')",
                [app, app],
            )
            assert cur.fetchone() == (True, False)
    finally:
        with connection.cursor() as cur:
            for role in (owner, app):
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
                if cur.fetchone():
                    cur.execute(f"REASSIGN OWNED BY {role} TO {connection.ops.quote_name(me)}")
                    cur.execute(f"DROP OWNED BY {role}")
                    cur.execute(f"DROP ROLE {role}")
