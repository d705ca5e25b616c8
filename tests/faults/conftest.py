"""Fault tests reuse the portal fixtures (project, API key client, synthetic run logs)."""

from portal.conftest import api, member_of, other_project, owner, project, submit_token  # noqa: F401 - the portal fixtures, reused by name
