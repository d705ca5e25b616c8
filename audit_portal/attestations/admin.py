from django.contrib import admin

from audit_portal.attestations.models import Checkpoint, LogEntry, SigningKey


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(SigningKey)
class SigningKeyAdmin(ReadOnly):
    list_display = ["key_id", "algorithm", "status", "created_at", "retired_at"]


@admin.register(LogEntry)
class LogEntryAdmin(ReadOnly):
    list_display = ["index", "subject_kind", "subject_id", "project_id", "key_id", "created_at"]
    list_filter = ["subject_kind"]


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnly):
    list_display = ["tree_size", "root_hash", "key_id", "created_at"]
