"""Every read is scoped: a key or user of project A cannot see or touch project B's objects."""

import pytest
from rest_framework.test import APIClient

from audit_portal.accounts.models import Role
from audit_portal.accounts.services import issue_api_key
from audit_portal.jobs.models import Job
from audit_portal.runs.models import Run, Upload

from ..conftest import as_file, jsonl, records, upload_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def foreign_objects(other_project):
    client = APIClient()
    owner = other_project.memberships.get().user
    client.force_authenticate(owner)
    response = client.post(upload_url(other_project), {"file": as_file(jsonl(records(seed=9)))}, format="multipart")
    assert response.status_code == 201
    upload = Upload.objects.get(pk=response.json()["id"])
    run = Run.objects.create(project=other_project, name="their-run")
    job = Job.objects.get(subject_id=upload.pk)
    return upload, run, job


def test_a_key_for_project_a_gets_404_on_project_b(api, project, other_project, foreign_objects):
    upload, run, job = foreign_objects
    for url in [
        f"/api/v1/projects/{other_project.slug}/",
        upload_url(other_project),
        f"/api/v1/projects/{other_project.slug}/runs/",
        f"/api/v1/projects/{other_project.slug}/jobs/",
        f"/api/v1/uploads/{upload.pk}/",
        f"/api/v1/runs/{run.pk}/",
        f"/api/v1/jobs/{job.pk}/",
    ]:
        response = api.get(url)
        assert response.status_code == 404, url
        assert response.json()["error"]["code"] == "not_found"
    assert api.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 404
    posted = api.post(upload_url(other_project), {"file": as_file(jsonl(records(seed=3)))}, format="multipart")
    assert posted.status_code == 404
    assert Upload.objects.filter(project=project).count() == 0


def test_project_list_shows_only_the_keys_project(api, project, other_project):
    slugs = [p["slug"] for p in api.get("/api/v1/projects/").json()["results"]]
    assert slugs == [project.slug]


def test_a_user_sees_only_projects_they_belong_to(client, project, other_project, member_of, foreign_objects):
    upload, run, job = foreign_objects
    client.force_login(member_of(project, Role.VIEWER))
    assert client.get(f"/p/{other_project.slug}/").status_code == 404
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert client.get(f"/p/{other_project.slug}/uploads/{upload.pk}/").status_code == 404
    assert client.get(f"/p/{project.slug}/").status_code == 200


@pytest.mark.parametrize("role,expected", [(Role.VIEWER, 403), (Role.MEMBER, 201), (Role.OWNER, 201)])
def test_upload_needs_the_submit_role(client, project, member_of, role, expected):
    api = APIClient()
    api.force_authenticate(member_of(project, role, username=f"u-{role}"))
    response = api.post(upload_url(project), {"file": as_file(jsonl(records()))}, format="multipart")
    assert response.status_code == expected
    if expected == 403:
        assert response.json()["error"]["code"] == "permission_denied" and Upload.objects.count() == 0


def test_a_read_only_key_cannot_upload_or_cancel(project, owner):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issue_api_key(project=project, name='ro', scopes=['read']).token}")
    assert client.get(upload_url(project)).status_code == 200
    response = client.post(upload_url(project), {"file": as_file(jsonl(records()))}, format="multipart")
    assert response.status_code == 403 and Upload.objects.count() == 0
