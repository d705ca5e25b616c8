from rest_framework.pagination import CursorPagination


class CreatedCursorPagination(CursorPagination):
    """Stable cursor pagination, newest first; page size capped so no query is unbounded."""

    ordering = ("-created_at", "-id")
    page_size_query_param = "page_size"
    max_page_size = 500
