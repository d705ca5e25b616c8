from django.http import JsonResponse
from django.shortcuts import render


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse({"error": {"code": "not_found", "message": "Not found."}}, status=404)
    return render(request, "404.html", status=404)
