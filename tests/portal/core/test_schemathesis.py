"""Property-based API testing with schemathesis: every operation of the OpenAPI schema served at /api/schema/ is
called with generated requests through the WSGI application (no network), authenticated with a real submit-scoped
API key of a project that holds real uploads, certificates, fidelity reports and kernel submissions (the
authorisation matrix's world). No response may be a server error, and every response — errors included — must
match the schema: documented status code, content type and body.

Bounded and deterministic: ``derandomize`` and a fixed number of examples per operation."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from django.core.signals import request_finished, request_started
from django.db import close_old_connections

from audit_portal.wsgi import application

from ..accounts.test_authz_matrix import World, _world_artifacts, world  # noqa: F401 - fixtures: the seeded projects

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.xdist_group("authz-matrix")]

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Which seeded object a path's ``{id}`` names (the longest matching prefix wins).
PK_OBJECT = {
    "/api/v1/uploads/": "upload",
    "/api/v1/runs/": "run",
    "/api/v1/jobs/": "job",
    "/api/v1/jobs/{id}/cancel/": "queued_job",
    "/api/v1/certificates/": "certificate",
    "/api/v1/fidelity/reports/": "report",
    "/api/v1/fidelity/calls/": "call",
    "/api/v1/kernel-submissions/": "submission",
    "/api/v1/implementations/": "implementation",
    "/api/v1/projects/{slug}/api-keys/": "victim_key",
    "/api/v1/alert-rules/": "alert_rule",
}


@pytest.fixture(autouse=True)
def _keep_the_test_transaction():
    """Requests go straight into the WSGI handler, which (unlike Django's test client) would close the database
    connection — and with it the test's transaction — after each response."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


def seed_path(case, world: World) -> None:  # noqa: F811 - the fixture, asked for by name
    """Point generated path parameters at the seeded project and, for every other example, at a real object (the
    rest keep their generated ids: unknown and out-of-range ids must be clean 404s too)."""
    params = case.path_parameters or {}
    if "slug" in params:
        params["slug"] = world.own.slug
    if "id" in params and isinstance(params["id"], int) and params["id"] % 2 == 0:
        prefix = max((p for p in PK_OBJECT if case.path.startswith(p)), key=len, default=None)
        if prefix is not None:
            params["id"] = getattr(world.own, PK_OBJECT[prefix])


# One pytest item per operation, each with its own node id: schemathesis' own ``@schema.parametrize()`` gives all
# operations the same node id, and pytest-xdist then ran only one of them.
OPERATIONS = [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_api_conforms_to_its_schema(operation, world, settings):  # noqa: F811 - the fixture, asked for by name
    settings.UPLOAD_THROTTLE_RATE = "100000/min"  # generated writes exercise the endpoints, not the rate limit

    @given(case=operation.as_strategy())
    @hypothesis_settings(
        max_examples=10, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    def conforms(case):
        seed_path(case, world)
        response = case.call(headers={"Authorization": f"Bearer {world.tokens['key_submit']}"})
        case.validate_response(response, checks=CHECKS)

    conforms()


def test_a_json_body_that_is_not_an_object_is_a_400(world):  # noqa: F811  (found by the schemathesis run)
    from django.core.cache import cache
    from django.test import Client

    cache.clear()  # a fresh rate-limit budget for the key
    client = Client(HTTP_AUTHORIZATION=f"Bearer {world.tokens['key_submit']}")
    for body in ("[null, null]", '"pkg.kernels"', "42"):
        response = client.post(
            f"/api/v1/projects/{world.own.slug}/kernel-submissions/", body, content_type="application/json"
        )
        assert response.status_code == 400, (body, response.content)
        assert response.json()["error"]["code"] == "invalid_body"


def test_the_schema_documents_the_error_envelope():
    spec = schema.raw_schema
    assert "Error" in spec["components"]["schemas"]
    upload = spec["paths"]["/api/v1/projects/{slug}/uploads/"]["post"]["responses"]
    assert {"400", "401", "403", "404", "413", "415", "429", "507"} <= set(upload)
    assert upload["413"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    upload_schema = spec["components"]["schemas"]["Upload"]["properties"]
    assert upload_schema["duplicate_of"].get("nullable") and upload_schema["run"].get("nullable")
