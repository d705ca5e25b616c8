from django.contrib import admin

from audit_portal.kernels.models import Contract, ContractCalibration, Implementation, Submission, Verdict


@admin.register(Contract)
class ContractAdmin(admin.ModelAdmin):
    list_display = ("contract_id", "version", "contract_class", "family", "sha256", "loaded_at")
    list_filter = ("family",)
    search_fields = ("contract_id", "title")

    # a loaded version is immutable (load_contracts refuses edits in place); the admin must not edit it either
    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ContractCalibration)
class ContractCalibrationAdmin(admin.ModelAdmin):
    list_display = ("contract", "status", "job", "created_at", "finished_at")
    list_filter = ("status",)
    readonly_fields = ("result", "problems")


@admin.register(Implementation)
class ImplementationAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "kind", "import_path", "code_sha256", "created_at")
    list_filter = ("kind", "project")
    search_fields = ("name", "import_path", "code_sha256")
    readonly_fields = ("code_sha256", "storage_name", "fingerprint")


class VerdictInline(admin.TabularInline):
    model = Verdict
    fields = ("contract", "verdict", "statistic", "bound", "margin", "margin_infinite", "reason")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Submission)
class SubmissionAdmin(admin.ModelAdmin):
    list_display = ("id", "implementation", "project", "device", "job", "submitted_by", "created_at", "finished_at")
    list_filter = ("device", "project")
    readonly_fields = ("plan", "grade", "environment")
    inlines = [VerdictInline]
