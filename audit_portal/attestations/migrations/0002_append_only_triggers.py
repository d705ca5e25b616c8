"""The transparency log is append-only in the database itself: UPDATE and DELETE on the log entries and the
checkpoints are refused by triggers, on PostgreSQL (a PL/pgSQL function raising ``insufficient_privilege``) and on
SQLite, the embedded mode (``RAISE(ABORT, …)``). TRUNCATE is not refused: it is what the test suite's flush uses
(production should deny the application's role the TRUNCATE privilege and table ownership)."""

from django.db import migrations

TABLES = ("attestations_logentry", "attestations_checkpoint")

PG_FORWARD = [
    """CREATE OR REPLACE FUNCTION attestations_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the transparency log is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql""",
    *[
        f"""CREATE TRIGGER {t}_append_only BEFORE UPDATE OR DELETE ON {t}
    FOR EACH ROW EXECUTE FUNCTION attestations_refuse_change()"""
        for t in TABLES
    ],
]
PG_BACKWARD = [
    *[f"DROP TRIGGER IF EXISTS {t}_append_only ON {t}" for t in TABLES],
    "DROP FUNCTION IF EXISTS attestations_refuse_change()",
]

SQLITE_FORWARD = [
    f"""CREATE TRIGGER {t}_no_{op.lower()} BEFORE {op} ON {t}
BEGIN SELECT RAISE(ABORT, 'the transparency log is append-only: {op} on {t} refused'); END"""
    for t in TABLES
    for op in ("UPDATE", "DELETE")
]
SQLITE_BACKWARD = [f"DROP TRIGGER IF EXISTS {t}_no_{op.lower()}" for t in TABLES for op in ("UPDATE", "DELETE")]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        with schema_editor.connection.cursor() as cursor:  # no parameters: the '%' of RAISE stays literal
            for sql in statements_by_vendor.get(schema_editor.connection.vendor, []):
                cursor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("attestations", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": PG_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": PG_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        ),
    ]
