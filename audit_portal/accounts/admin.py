from django.contrib import admin

from audit_portal.accounts.models import ApiKey, Membership, Project


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "created_at")
    search_fields = ("name", "slug")
    inlines = [MembershipInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "prefix", "scopes", "created_at", "revoked_at", "last_used_at")
    list_filter = ("project",)
    readonly_fields = ("prefix", "secret_sha256", "created_at", "last_used_at")
