from rest_framework.pagination import CursorPagination


class CreatedCursorPagination(CursorPagination):
    """Stable cursor pagination, newest first; page size capped so no query is unbounded."""

    ordering = ("-created_at", "-id")
    page_size_query_param = "page_size"
    max_page_size = 500


class ByLinePagination(CursorPagination):
    """Rows of one result in input-line order (a certificate's sequences, a fidelity report's calls): a cursor
    keeps paging stable while a job is still appending rows."""

    ordering = ("line", "id")
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000
