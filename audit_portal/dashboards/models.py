"""What the pages remember for a user: saved views of the runs table."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class SavedView(models.Model):
    """A named runs-table query (search, verdict, value ranges, sort, columns) one user keeps in one project. Only
    its author sees, applies and deletes it; ``query`` is the table's own query string (only its known keys)."""

    project = models.ForeignKey("accounts.Project", on_delete=models.CASCADE, related_name="saved_views")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views")
    name = models.CharField(max_length=80)
    query = models.CharField(max_length=2000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "owner", "name"], name="saved_view_unique_name_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.project_id})"
