from __future__ import annotations

import gzip
import io
from pathlib import Path

import orjson
import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from audit_portal.accounts.models import Role
from audit_portal.accounts.services import add_member, create_project, issue_api_key
from workers.fcr.synth import SynthConfig, iter_run


@pytest.fixture
def owner(db):
    return get_user_model().objects.create_user("olivia", password="pw-olivia-123")


@pytest.fixture
def project(owner):
    return create_project(name="Alpha", owner=owner)


@pytest.fixture
def other_project(db):
    stranger = get_user_model().objects.create_user("sam", password="pw-sam-123")
    return create_project(name="Bravo", owner=stranger)


@pytest.fixture
def member_of():
    def make(project, role=Role.MEMBER, username=None):
        user = get_user_model().objects.create_user(username or f"{role}-{project.slug}", password="pw-123456")
        add_member(project=project, user=user, role=role)
        return user

    return make


@pytest.fixture
def submit_token(project, owner):
    return issue_api_key(project=project, name="ci", scopes=["read", "submit"], created_by=owner).token


@pytest.fixture
def api(submit_token):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {submit_token}")
    return client


def records(trajectories=6, seed=1, **kw):
    return list(iter_run(SynthConfig(trajectories=trajectories, seed=seed, response_len=(8, 24), **kw)))


def jsonl(recs) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in recs)


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


def as_file(data: bytes, name="run.jsonl"):
    f = io.BytesIO(data)
    f.name = name
    return f


def upload_url(project) -> str:
    return f"/api/v1/projects/{project.slug}/uploads/"


def stored_files(settings) -> list[Path]:
    root = Path(settings.ARTIFACT_ROOT)
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
