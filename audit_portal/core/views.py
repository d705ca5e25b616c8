from django.shortcuts import render

from audit_portal.core.api_errors import json_error


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return json_error("not_found", "Not found.", 404)
    return render(request, "404.html", status=404)
