"""Signing keys enter through the log: a key event (introduction, rotation, retirement; workers/verify/keylog.py) is
a log entry of kind ``signing_key``, and the signing-key table is a projection of those entries written by a trigger
— on PostgreSQL a ``SECURITY DEFINER`` function that ``setup_db_roles`` gives to the owner role, so the application
role (SELECT only on the key table) never writes it. The trigger does not check signatures: the key set anyone
verifies with is derived from the log, and ``verify_log`` reports every row here that the log does not back.
SQLite has no roles; there the application writes the projection (``keys.project_sqlite``)."""

from django.db import migrations, models

PG_FORWARD = [
    """CREATE OR REPLACE FUNCTION attestations_project_key_event() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE p jsonb;
BEGIN
    BEGIN
        p := convert_from(decode((NEW.envelope::jsonb)->>'payload', 'base64'), 'UTF8')::jsonb -> 'predicate';
        IF p->>'event' IN ('introduce', 'rotate') THEN
            UPDATE attestations_signingkey SET status = 'retired', retired_at = NEW.created_at
                WHERE status = 'active' AND key_id <> p->>'key_id';
            INSERT INTO attestations_signingkey (key_id, algorithm, public_key, status, created_at, retired_at)
                VALUES (p->>'key_id', 'ed25519', p->>'public_key', 'active', NEW.created_at, NULL)
                ON CONFLICT (key_id) DO NOTHING;
        ELSIF p->>'event' = 'retire' THEN
            UPDATE attestations_signingkey SET status = 'retired', retired_at = NEW.created_at
                WHERE key_id = p->>'key_id';
        END IF;
    EXCEPTION WHEN others THEN
        NULL;  -- a malformed event projects nothing; verify_log names it
    END;
    RETURN NULL;
END;
$$""",
    """CREATE TRIGGER attestations_logentry_key_events AFTER INSERT ON attestations_logentry
    FOR EACH ROW WHEN (NEW.subject_kind = 'signing_key') EXECUTE FUNCTION attestations_project_key_event()""",
]
PG_BACKWARD = [
    "DROP TRIGGER IF EXISTS attestations_logentry_key_events ON attestations_logentry",
    "DROP FUNCTION IF EXISTS attestations_project_key_event()",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        with schema_editor.connection.cursor() as cursor:
            for sql in statements_by_vendor.get(schema_editor.connection.vendor, []):
                cursor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("attestations", "0002_append_only_triggers")]

    operations = [
        migrations.AlterField(
            model_name="logentry",
            name="subject_kind",
            field=models.CharField(
                choices=[
                    ("run_certificate", "Run certificate"),
                    ("fidelity_report", "Fidelity report"),
                    ("kernel_submission", "Kernel conformance result"),
                    ("signing_key", "Signing key event"),
                ],
                max_length=32,
            ),
        ),
        migrations.RunPython(_run({"postgresql": PG_FORWARD}), _run({"postgresql": PG_BACKWARD})),
    ]
