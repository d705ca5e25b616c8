from django.contrib import admin

from audit_portal.jobs.models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "kind", "state", "progress", "attempts", "created_at", "finished_at")
    list_filter = ("state", "kind", "queue", "project")
    search_fields = ("title", "error", "message")
    readonly_fields = ("created_at", "started_at", "heartbeat_at", "finished_at", "updated_at")
