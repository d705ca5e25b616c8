"""``manage.py setup_db_roles --owner audit_owner --app audit_app``: two PostgreSQL roles, so that the application
cannot rewrite the transparency log.

Run it (after ``migrate``) with a connection that may create roles and change owners (a superuser, or the database
owner with CREATEROLE). It is idempotent; run it again after every ``migrate`` that adds tables:

* the **owner** role (``--owner``) owns the database's schema, tables, sequences and the triggers' function: it runs
  ``migrate``; nothing else should connect with it;
* the **application** role (``--app``) is what web and workers connect with (``DATABASE_URL``). It gets SELECT,
  INSERT, UPDATE, DELETE on every table, except the log's two tables (``attestations_logentry``,
  ``attestations_checkpoint``), where it gets only SELECT and INSERT. Not owning them, it can neither ALTER them
  nor DISABLE their TRIGGERs, and it holds no TRUNCATE — so it cannot rewrite the log, whatever the application does.
  On the signing-key table (``attestations_signingkey``) it gets only SELECT: the table is written by a
  ``SECURITY DEFINER`` trigger function owned by the owner role, from the key events appended to the log
  (migration 0003); a key enters only through the log, signed by the active key.

On SQLite there are no roles: the append-only triggers refuse UPDATE and DELETE to the application, but anyone who
can write the database file can drop them. The command says so and exits 0; the witness (``AUDIT_LOG_WITNESS_DIR``)
is then the only protection against a rewrite.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

LOG_TABLES = ("attestations_logentry", "attestations_checkpoint")
KEY_TABLES = ("attestations_signingkey",)  # a projection of the log's key events, written by the owner's trigger
OWNER_FUNCTIONS = ("attestations_refuse_change", "attestations_project_key_event")
SQLITE_NOTE = (
    "SQLite has no database roles: the append-only triggers refuse UPDATE and DELETE on the log to the "
    "application, but whoever can write the database file can drop them or edit the file. Nothing stops "
    "a rewrite there; the checkpoints published to AUDIT_LOG_WITNESS_DIR (kept where that person cannot "
    "write) are what detects one (manage.py check_consistency)."
)


def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum() or name[:1].isdigit():
        raise CommandError(f"role name {name!r}: use letters, digits and underscores")
    return connection.ops.quote_name(name)


class Command(BaseCommand):
    help = "Create the owner and application database roles; the application may only INSERT and SELECT the log."

    def add_arguments(self, parser):
        parser.add_argument("--owner", default="audit_owner", help="role that owns the schema (runs migrate)")
        parser.add_argument("--app", default="audit_app", help="role web and workers connect with")
        parser.add_argument("--owner-password", default=None)
        parser.add_argument("--app-password", default=None)

    def handle(self, *args, owner, app, owner_password, app_password, **options):
        if connection.vendor == "sqlite":
            self.stdout.write(SQLITE_NOTE)
            return
        if connection.vendor != "postgresql":
            raise CommandError(f"setup_db_roles supports PostgreSQL (and explains SQLite), not {connection.vendor}")
        if owner == app:
            raise CommandError("the owner and the application role must differ")
        o, a = _ident(owner), _ident(app)
        with transaction.atomic(), connection.cursor() as cur:
            for role, password in ((owner, owner_password), (app, app_password)):
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
                verb = "ALTER" if cur.fetchone() else "CREATE"
                cur.execute(
                    f"{verb} ROLE {_ident(role)} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"
                    + (" PASSWORD %s" if password else ""),
                    [password] if password else None,
                )
            db = connection.ops.quote_name(connection.settings_dict["NAME"])
            cur.execute(f"GRANT CONNECT ON DATABASE {db} TO {a}")
            cur.execute(f"ALTER SCHEMA public OWNER TO {o}")
            cur.execute(f"GRANT USAGE ON SCHEMA public TO {a}")
            cur.execute(f"REVOKE CREATE ON SCHEMA public FROM {a}")
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            tables = [r[0] for r in cur.fetchall()]
            for table in tables:  # owned sequences (identity/serial) follow their table
                cur.execute(f"ALTER TABLE {connection.ops.quote_name(table)} OWNER TO {o}")
            cur.execute(
                "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'public' AND p.proname = ANY(%s)",
                [list(OWNER_FUNCTIONS)],
            )
            for (fn,) in cur.fetchall():
                cur.execute(f"ALTER FUNCTION {fn} OWNER TO {o}")
            cur.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {a}")
            cur.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {a}")
            cur.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {a}")
            log_tables = [t for t in LOG_TABLES if t in tables]
            for table in log_tables:
                cur.execute(
                    f"REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON {connection.ops.quote_name(table)} "
                    f"FROM {a}"
                )
            key_tables = [t for t in KEY_TABLES if t in tables]
            for table in key_tables:
                cur.execute(
                    f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON "
                    f"{connection.ops.quote_name(table)} FROM {a}"
                )
            # tables a later migrate creates (as the owner) are usable by the application; run this command again
            # after it so that new log tables, if any, lose UPDATE/DELETE as well
            cur.execute(
                f"ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA public "
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {a}"
            )
            cur.execute(
                f"ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {a}"
            )
        self.stdout.write(
            f"owner role {owner}: owns {len(tables)} tables (runs migrate)\n"
            f"application role {app}: SELECT/INSERT/UPDATE/DELETE, but only SELECT and INSERT on "
            f"{', '.join(log_tables)} (no UPDATE, DELETE, TRUNCATE, ALTER or DISABLE TRIGGER), only SELECT on "
            f"{', '.join(key_tables)} (written by the owner's trigger from the log's key events)"
        )
