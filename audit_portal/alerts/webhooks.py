"""Webhook delivery, stdlib only (no Django: the caller passes the settings): URL checks, HMAC signing, one POST.

Server-side request forgery. A rule's URL is typed by a project member, and the worker that posts to it sits inside
the deployment's network, so by default a URL whose host resolves to anything but a public (globally routable)
address is refused — loopback, RFC 1918, link-local (cloud metadata at 169.254.169.254), CGNAT, unique-local,
multicast, reserved. The check runs when the rule is saved and again at every delivery, and the POST connects to the
very address that was checked (no second DNS lookup an attacker's resolver could answer differently: DNS rebinding).
Redirects are never followed. ``ALERT_WEBHOOK_ALLOW_PRIVATE=1`` lifts the address check for deployments whose
receivers are internal (and for the tests' local receiver); the scheme check stays.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2000
RESPONSE_KEEP_BYTES = 2048  # what of the receiver's answer the delivery log keeps
SIGNATURE_HEADER = "X-Audit-Portal-Signature"
TIMESTAMP_HEADER = "X-Audit-Portal-Timestamp"
EVENT_HEADER = "X-Audit-Portal-Event"


class UnsafeWebhookURL(ValueError):
    """The URL is not one the portal will post to (the message says why)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # path and query, as sent in the request line
    address: str  # the checked IP the request connects to


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status: int | None
    error: str  # empty when ok
    retry: bool  # worth trying again (network error, 5xx, 408, 429)
    response: str  # the start of the receiver's answer
    seconds: float


def _blocked(ip: str) -> str | None:
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if addr.is_multicast or not addr.is_global:
        return f"{addr} is not a public address"
    return None


def resolve(url: str, *, allow_private: bool) -> Target:
    """Check ``url`` and resolve its host to the address a delivery will connect to; raises UnsafeWebhookURL."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        raise UnsafeWebhookURL(f"the URL must be 1 to {MAX_URL_LENGTH} characters")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise UnsafeWebhookURL("the URL must not contain spaces or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise UnsafeWebhookURL("only http:// and https:// URLs are accepted")
    if parts.username is not None or parts.password is not None:
        raise UnsafeWebhookURL("credentials in the URL are not accepted (the payload is signed instead)")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise UnsafeWebhookURL(f"bad port: {exc}") from None
    host = parts.hostname
    if not host:
        raise UnsafeWebhookURL("the URL has no host")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeWebhookURL(f"the host {host!r} does not resolve: {exc}") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not allow_private:
        for ip in addresses:  # every answer, not only the first: a later lookup could pick another
            reason = _blocked(ip)
            if reason:
                raise UnsafeWebhookURL(
                    f"{host} resolves to {reason} (set ALERT_WEBHOOK_ALLOW_PRIVATE=1 to allow internal receivers)"
                )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, host, port, path, addresses[0])


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256(secret, "<timestamp>." + body): the timestamp is signed too, so a receiver
    that refuses old timestamps cannot be replayed an old delivery."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: str, body: bytes, header: str, *, tolerance: float = 300.0, now=None) -> bool:
    """What a receiver does (docs/alerts.md has the same in a few lines): constant-time compare, recent timestamp."""
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - ts) > tolerance:
        return False
    return hmac.compare_digest(signature(secret, ts, body), header or "")


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, target: Target, timeout: float):
        super().__init__(target.host, target.port, timeout=timeout)
        self._address = target.address

    def connect(self):
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, target: Target, timeout: float):
        super().__init__(target.host, target.port, timeout=timeout, context=ssl.create_default_context())
        self._address = target.address

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # certificate checked for the host


def post(
    url: str, body: bytes, *, secret: str, event_id: str, timeout: float, allow_private: bool, now=None
) -> Outcome:
    """One signed POST of ``body``. ``timeout`` bounds the connect and each read; redirects are not followed."""
    t0 = time.monotonic()
    try:
        target = resolve(url, allow_private=allow_private)
    except UnsafeWebhookURL as exc:
        return Outcome(False, None, f"refused: {exc}", False, "", 0.0)
    ts = int(time.time() if now is None else now)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "audit-portal-alerts/1",
        TIMESTAMP_HEADER: str(ts),
        SIGNATURE_HEADER: signature(secret, ts, body),
        EVENT_HEADER: event_id,
    }
    conn = (_PinnedHTTPS if target.scheme == "https" else _PinnedHTTP)(target, timeout)
    try:
        conn.request("POST", target.path, body=body, headers=headers)
        resp = conn.getresponse()
        answer = resp.read(RESPONSE_KEEP_BYTES).decode("utf-8", "replace")
        status = resp.status
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(False, None, f"{type(exc).__name__}: {exc}"[:500], True, "", time.monotonic() - t0)
    finally:
        conn.close()
    seconds = time.monotonic() - t0
    if 200 <= status < 300:
        return Outcome(True, status, "", False, answer, seconds)
    retry = status >= 500 or status in (408, 425, 429)
    return Outcome(False, status, f"HTTP {status}", retry, answer, seconds)
