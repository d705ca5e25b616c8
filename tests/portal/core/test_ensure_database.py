"""``manage.py ensure_database`` (run by scripts/up before migrate): a missing database on a server that answers is
created; an existing one is left alone; a server that does not answer is one clear error, not a traceback."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from django.core.management.base import CommandError
from django.db import connection

from audit_portal.core.management.commands.ensure_database import ensure_database

pytestmark = pytest.mark.django_db


@pytest.fixture
def server():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only (the embedded SQLite file needs no creating)")
    return connection.get_connection_params()


def test_missing_database_is_created_once(server):
    name = f"ap_ensure_{uuid.uuid4().hex[:10]}"
    try:
        assert ensure_database(server, name) is True
        with psycopg.connect(**{**server, "dbname": name}) as conn:
            assert conn.execute("select current_database()").fetchone()[0] == name
        assert ensure_database(server, name) is False  # already there: nothing to do
    finally:
        with psycopg.connect(**{**server, "dbname": "postgres"}, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def test_a_server_that_does_not_answer_is_one_clear_error(server):
    with pytest.raises(CommandError, match="cannot reach the database in DATABASE_URL: .*refused"):
        ensure_database({**server, "host": "127.0.0.1", "port": 1}, "whatever")
