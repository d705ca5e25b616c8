from django.contrib import admin

from audit_portal.runs.models import Run, Upload


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "created_at", "updated_at")
    list_filter = ("project",)
    search_fields = ("name",)


@admin.register(Upload)
class UploadAdmin(admin.ModelAdmin):
    list_display = ("id", "original_name", "project", "stage", "size_bytes", "sha256", "created_at")
    list_filter = ("stage", "project", "compression")
    search_fields = ("original_name", "sha256")
    readonly_fields = ("sha256", "size_bytes", "storage_name", "validation", "created_at", "processed_at")
