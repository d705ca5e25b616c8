"""Who is asking: a signed-in user (roles through memberships) or a project API key (scopes).

Every selector takes a Principal, so every read is scoped to what the caller may see.
"""

from __future__ import annotations

from dataclasses import dataclass

from audit_portal.accounts.models import ApiKey, Membership, Project, Role, Scope

SUBMIT_ROLES = {Role.OWNER, Role.MEMBER}


@dataclass(frozen=True)
class Principal:
    user: object | None = None
    api_key: ApiKey | None = None

    @classmethod
    def from_request(cls, request) -> "Principal":
        auth = getattr(request, "auth", None)
        if isinstance(auth, ApiKey):
            return cls(api_key=auth)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return cls(user=user)
        return cls()

    @property
    def is_anonymous(self) -> bool:
        return self.user is None and self.api_key is None

    def readable_projects(self):
        if self.api_key is not None:
            if not self.api_key.has_scope(Scope.READ) and not self.api_key.has_scope(Scope.SUBMIT):
                return Project.objects.none()
            return Project.objects.filter(pk=self.api_key.project_id)
        if self.user is None:
            return Project.objects.none()
        if getattr(self.user, "is_superuser", False):
            return Project.objects.all()
        return Project.objects.filter(memberships__user=self.user)

    def role_in(self, project: Project) -> str | None:
        if self.user is None:
            return None
        if getattr(self.user, "is_superuser", False):
            return Role.OWNER
        membership = Membership.objects.filter(user=self.user, project=project).only("role").first()
        return membership.role if membership else None

    def can_read(self, project: Project) -> bool:
        return self.readable_projects().filter(pk=project.pk).exists()

    def can_submit(self, project: Project) -> bool:
        if self.api_key is not None:
            return self.api_key.project_id == project.pk and self.api_key.has_scope(Scope.SUBMIT)
        return self.role_in(project) in SUBMIT_ROLES

    def can_manage(self, project: Project) -> bool:
        return self.api_key is None and self.role_in(project) == Role.OWNER

    @property
    def label(self) -> str:
        if self.api_key is not None:
            return f"key:{self.api_key.prefix}"
        return getattr(self.user, "username", "anonymous")
