"""REST routes of the kernels app (mounted under /api/v1/ by audit_portal/api_urls.py)."""
urlpatterns: list = []
