"""Writes for accounts: projects, memberships and API keys."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from audit_portal.accounts.models import ApiKey, Membership, Project, Role, Scope

KEY_PREFIX = "ap_"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def create_project(*, name: str, owner, slug: str | None = None, description: str = "") -> Project:
    base = slug or slugify(name)[:60] or "project"
    candidate, n = base, 1
    while Project.objects.filter(slug=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    project = Project.objects.create(name=name, slug=candidate, description=description)
    Membership.objects.create(user=owner, project=project, role=Role.OWNER)
    return project


def add_member(*, project: Project, user, role: str = Role.MEMBER) -> Membership:
    membership, _ = Membership.objects.update_or_create(user=user, project=project, defaults={"role": role})
    return membership


@dataclass(frozen=True)
class IssuedKey:
    key: ApiKey
    token: str  # shown to the user once, never stored


def issue_api_key(*, project: Project, name: str, scopes: list[str], created_by=None, expires_at=None) -> IssuedKey:
    valid = {s.value for s in Scope}
    unknown = [s for s in scopes if s not in valid]
    if unknown or not scopes:
        raise ValueError(f"scopes must be a non-empty subset of {sorted(valid)}; got {scopes}")
    prefix = secrets.token_hex(4)
    secret = secrets.token_urlsafe(32)
    token = f"{KEY_PREFIX}{prefix}_{secret}"
    key = ApiKey.objects.create(
        project=project,
        name=name,
        prefix=prefix,
        secret_sha256=hash_secret(token),
        scopes=sorted(set(scopes)),
        created_by=created_by,
        expires_at=expires_at,
    )
    return IssuedKey(key=key, token=token)


def revoke_api_key(key: ApiKey) -> ApiKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


def authenticate_token(token: str) -> ApiKey | None:
    """The active key matching ``token``, or None. Compares digests in constant time."""
    if not token.startswith(KEY_PREFIX):
        return None
    prefix = token[len(KEY_PREFIX) :].split("_", 1)[0]
    key = ApiKey.objects.select_related("project").filter(prefix=prefix).first()
    if key is None or not secrets.compare_digest(key.secret_sha256, hash_secret(token)):
        return None
    if not key.is_active:
        return None
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key
