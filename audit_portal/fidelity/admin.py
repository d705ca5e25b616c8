from django.contrib import admin

from audit_portal.fidelity.models import FidelityReport, RegisteredTokenizer


@admin.register(FidelityReport)
class FidelityReportAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "project",
        "run",
        "upload",
        "state",
        "verdict",
        "closed_failure_violations",
        "calls_total",
        "verifiable_fraction",
        "created_at",
    )
    list_filter = ("state", "verdict", "project")
    readonly_fields = [f.name for f in FidelityReport._meta.fields]


@admin.register(RegisteredTokenizer)
class RegisteredTokenizerAdmin(admin.ModelAdmin):
    list_display = ("id", "project", "name", "kind", "sha256", "vocab_size", "created_at")
    list_filter = ("kind", "project")
    readonly_fields = [f.name for f in RegisteredTokenizer._meta.fields]
