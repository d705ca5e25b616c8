from importlib import import_module

from django.apps import AppConfig


class AttestationsConfig(AppConfig):
    name = "audit_portal.attestations"
    verbose_name = "Signed certificates and the transparency log"

    def ready(self):
        from audit_portal.attestations import consistency  # noqa: F401  (registers the log's consistency check)

        _let_sqlite_flush_empty_the_log()


def _let_sqlite_flush_empty_the_log() -> None:
    """``flush`` (manage.py flush, and the test suite between transactional tests) empties every table. On
    PostgreSQL it TRUNCATEs, which row triggers do not see; on SQLite it DELETEs, which the append-only triggers
    refuse. Give SQLite's flush the same effect as PostgreSQL's: drop the log's triggers, empty the tables, create the
    triggers again — all in flush's one transaction. Row-by-row UPDATE and DELETE stay refused."""
    from django.db.backends.sqlite3.base import DatabaseWrapper

    DatabaseOperations = DatabaseWrapper.ops_class

    if getattr(DatabaseOperations.sql_flush, "_keeps_log_triggers", False):
        return
    triggers = import_module("audit_portal.attestations.migrations.0002_append_only_triggers")
    original = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        sql = original(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        if not sql or not set(triggers.TABLES) & set(tables):
            return sql
        return [*triggers.SQLITE_BACKWARD, *sql, *triggers.SQLITE_FORWARD]

    sql_flush._keeps_log_triggers = True
    DatabaseOperations.sql_flush = sql_flush
