from django.http import HttpResponseServerError
from django.shortcuts import render

from audit_portal.core.api_errors import json_error


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return json_error("not_found", "Not found.", 404)
    return render(request, "404.html", status=404)


def server_error(request):
    """500: JSON under /api/ (a client never parses an HTML page), else the plain page (templates/500.html draws
    without any context, since whatever failed may have been the context)."""
    if request.path.startswith("/api/"):
        return json_error("server_error", "The server could not answer this request; the error is in its log.", 500)
    from django.template import loader

    return HttpResponseServerError(loader.get_template("500.html").render())
