"""ASGI entry point: HTTP through Django, websockets through Channels (session-authenticated).

Oversize uploads are refused from their ``Content-Length`` before any byte of the body is read
(Django's ASGI handler would otherwise spool the whole body to disk first)."""

import os

import orjson
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "audit_portal.settings")
# Django runs each request's sync code in a thread of its own under ASGI, so a persistent database connection is
# never reused and stays open per thread: 64 concurrent clients exhausted 200 PostgreSQL connections (bench/load.py).
# Connect per request (Django's advice for ASGI); put PgBouncer in front of PostgreSQL at scale (docs/deploy.md).
os.environ.setdefault("DB_CONN_MAX_AGE", "0")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the app registry)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402 - after get_asgi_application(): needs the app registry
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402 - after get_asgi_application(): needs the app registry
from django.conf import settings  # noqa: E402 - after get_asgi_application(): needs the app registry

from audit_portal.core.api_errors import error_body  # noqa: E402 - after get_asgi_application(): needs the app registry
from audit_portal.routing import websocket_urlpatterns  # noqa: E402 - after get_asgi_application(): needs the app registry
from audit_portal.runs.upload_handler import MULTIPART_OVERHEAD  # noqa: E402 - after get_asgi_application(): needs the app registry


def refuse_oversize_uploads(app):
    async def guard(scope, receive, send):
        if scope["type"] == "http" and scope.get("method") == "POST":
            length = dict(scope.get("headers") or []).get(b"content-length")
            if length and length.isdigit() and int(length) > settings.UPLOAD_MAX_BYTES + MULTIPART_OVERHEAD:
                body = orjson.dumps(
                    error_body(
                        "upload_too_large",
                        f"The request body exceeds the upload limit of {settings.UPLOAD_MAX_BYTES} bytes.",
                    )
                )
                await send(
                    {
                        "type": "http.response.start",
                        "status": 413,
                        "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guard


application = ProtocolTypeRouter(
    {
        "http": refuse_oversize_uploads(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
