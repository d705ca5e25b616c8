"""``manage.py ensure_database``: make sure the configured PostgreSQL database exists before ``migrate``.

scripts/up runs it first, so that ``DATABASE_URL=postgres://…/new_name scripts/up`` on a server that answers but
lacks that database creates it (as ``createdb`` would) instead of failing in ``migrate`` with a traceback; a server
that does not answer, or refuses the credentials, ends in one line saying so. SQLite (the embedded mode) needs
nothing: the file is created on first use.
"""

from __future__ import annotations

import psycopg
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from psycopg import sql


def ensure_database(params: dict, name: str) -> bool:
    """Create database ``name`` on the server of the psycopg connection ``params`` if it is missing (True when it
    was created); CommandError with the server's reason when the server cannot be used."""
    params = {**params, "dbname": name, "connect_timeout": 5}
    try:
        psycopg.connect(**params).close()
        return False
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc):
            raise CommandError(f"cannot reach the database in DATABASE_URL: {str(exc).strip()}") from None
    try:
        with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        raise CommandError(f"database {name!r} does not exist and could not be created: {str(exc).strip()}") from None
    return True


class Command(BaseCommand):
    help = "Create the configured PostgreSQL database if the server answers but the database is missing."

    def handle(self, *args, **options):
        if connection.vendor != "postgresql":
            return
        name = connection.settings_dict["NAME"]
        if ensure_database(connection.get_connection_params(), name):
            self.stdout.write(f"created database {name}")
