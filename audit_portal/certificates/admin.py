from django.contrib import admin

from audit_portal.certificates.models import RunCertificate


@admin.register(RunCertificate)
class RunCertificateAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "project",
        "run",
        "upload",
        "state",
        "sequences",
        "tokens",
        "eps_hat",
        "best_bound",
        "created_at",
    )
    list_filter = ("state", "project")
    readonly_fields = [f.name for f in RunCertificate._meta.fields]
