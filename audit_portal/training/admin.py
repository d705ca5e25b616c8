from django.contrib import admin

from audit_portal.training.models import TrainingAudit


@admin.register(TrainingAudit)
class TrainingAuditAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "project",
        "rollout_numerics",
        "device_requested",
        "device_used",
        "created_at",
        "completed_at",
    )
    list_filter = ("device_used",)
    readonly_fields = [f.name for f in TrainingAudit._meta.fields]
