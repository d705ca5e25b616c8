"""Resumable uploads in parts, the way object stores and tus do it (README, *REST API for CI*):

1. ``create_session``: the client declares the file's size and, when it can, its SHA-256 (optional: a browser cannot
   hash a multi-GB file before sending it); the server preallocates one sparse file in ``artifacts/incoming/`` and
   answers the part size and count.
2. ``store_part``: part *n* (0-based) is bytes ``[n × part_size, min((n+1) × part_size, size))``, sent in any order,
   any number of times (a retry rewrites the same bytes in the same place: idempotent). Its length must be exact; an
   optional SHA-256 of the part is checked before it is recorded. A part is streamed from the request to its place
   in the file in 1 MiB pieces, never held whole.
3. ``session`` (GET): which parts are stored, so an interrupted upload resumes with the missing ones.
4. ``complete``: every part must be stored; the whole file is hashed and, when a SHA-256 was declared, must match it
   (otherwise 400 ``digest_mismatch``, the session stays open for the parts to be sent again), then it goes through
   the same intake as a single-request upload (pre-flight, duplicate check by the computed digest, storage,
   validation job). Without a declared digest, each part's ``X-Part-SHA256`` is what catches a corrupted part.
5. ``expire_idle_sessions``: an open session with no part stored for ``UPLOAD_SESSION_IDLE_SECONDS`` (24 h) is
   abandoned; the periodic maintenance task (``pipelines.maintenance.reap_stale_jobs``, every minute) deletes it and its
   preallocated file, so abandoned uploads neither hold disk nor count against the project's open sessions.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit_portal.core.errors import PortalError, UploadTooLarge
from audit_portal.runs import declarations, services
from audit_portal.runs.models import UploadSession
from audit_portal.runs.upload_handler import hashed_file_from_path, incoming_dir

PART_BYTES = int(os.environ.get("UPLOAD_PART_BYTES", 16 << 20))
MAX_OPEN_SESSIONS = 10  # per project: each holds a preallocated file in incoming/ until completed
STEP = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class InvalidUploadSession(PortalError):
    default_code = "invalid_upload_session"


def session_path(session: UploadSession) -> Path:
    return incoming_dir() / f"session-{session.pk.hex}.part"


def create_session(*, project, size, sha256, name, created_by: str, config=None, tags=None) -> UploadSession:
    """``config``/``tags``: as with a single-request upload (runs/declarations.py), checked now, kept on the session
    and handed to the intake at completion."""
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise InvalidUploadSession("size: the file's size in bytes, a whole number above 0.", extra={"field": "size"})
    if size > settings.UPLOAD_MAX_BYTES:
        raise UploadTooLarge(f"The file exceeds the upload limit of {settings.UPLOAD_MAX_BYTES} bytes.")
    if sha256 is not None and (not isinstance(sha256, str) or not _SHA256.match(sha256.lower())):
        raise InvalidUploadSession(
            "sha256: the file's SHA-256 as 64 hexadecimal digits (or leave it out).", extra={"field": "sha256"}
        )
    if name is not None and not isinstance(name, str):
        raise InvalidUploadSession("name: the file's name, a string.", extra={"field": "name"})
    config, tags = declarations.parse_config(config), declarations.parse_tags(tags)
    if UploadSession.objects.filter(project=project, state=UploadSession.State.OPEN).count() >= MAX_OPEN_SESSIONS:
        raise InvalidUploadSession(
            f"A project has at most {MAX_OPEN_SESSIONS} open upload sessions; complete one first.",
            code="too_many_upload_sessions",
        )
    session = UploadSession(
        id=uuid.uuid4(),
        project=project,
        name=(name or "upload.jsonl")[:255],
        size_bytes=size,
        sha256=(sha256 or "").lower(),
        part_size=PART_BYTES,
        created_by=created_by[:150],
        config=config or {},
        tags=tags or [],
    )
    with open(session_path(session), "wb") as fh:
        fh.truncate(size)  # sparse: disk is used as parts arrive
    session.save()
    return session


def store_part(session: UploadSession, n: int, stream, length: int | None, part_sha256: str | None) -> UploadSession:
    """Write part ``n`` from ``stream`` (a file-like ``read``) at its place; returns the session with it recorded."""
    if session.state != UploadSession.State.OPEN:
        raise InvalidUploadSession("This upload session is completed; start a new one.", code="upload_session_closed")
    if not 0 <= n < session.part_count:
        raise InvalidUploadSession(
            f"Part {n} does not exist: parts are numbered 0 to {session.part_count - 1}.", code="no_such_part"
        )
    want = session.part_length(n)
    if length != want:
        raise InvalidUploadSession(
            f"Part {n} is {want} bytes; the request declares {length}.", code="wrong_part_length"
        )
    digest = hashlib.sha256()
    data = bytearray()
    got = 0
    while got < want:
        piece = stream.read(min(STEP, want - got))
        if not piece:
            break
        digest.update(piece)
        data += piece
        got += len(piece)
        if len(data) >= STEP or got == want:
            _write_at(session, n * session.part_size + got - len(data), bytes(data))
            data.clear()
    if got != want:
        raise InvalidUploadSession(
            f"Part {n} ended after {got} of {want} bytes; send it again.", code="wrong_part_length"
        )
    if part_sha256 and digest.hexdigest() != part_sha256.lower():
        raise InvalidUploadSession(
            f"Part {n}'s SHA-256 is {digest.hexdigest()}, not {part_sha256}; send it again.",
            code="part_digest_mismatch",
        )
    with transaction.atomic():
        session = UploadSession.objects.select_for_update().filter(pk=session.pk).first()
        if session is None:  # expired (abandoned) while this part was being sent
            raise _expired()
        if n not in session.parts_received:
            session.parts_received = sorted({*session.parts_received, n})
            session.save(update_fields=["parts_received", "updated_at"])
    return session


def _expired() -> InvalidUploadSession:
    return InvalidUploadSession(
        "This upload session expired (no part for a long time) and was deleted; start a new one.",
        code="upload_session_expired",
    )


def _write_at(session: UploadSession, offset: int, data: bytes) -> None:
    try:
        fd = os.open(session_path(session), os.O_WRONLY)
    except FileNotFoundError:  # the session expired and its file was deleted
        raise _expired() from None
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def complete(session: UploadSession, submitted_by: str):
    """The assembled file through the single-request intake; returns ``(upload, created)``. The intake takes the file
    whatever its verdict, so the session is closed after it: a refused file (pre-flight) is refused for good."""
    session = UploadSession.objects.get(pk=session.pk)
    if session.state == UploadSession.State.COMPLETED:
        if session.upload is not None:
            return session.upload, False  # a retried completion: the same answer
        raise InvalidUploadSession(
            "This upload session was completed and its file refused; start a new one.", code="upload_session_closed"
        )
    missing = sorted(set(range(session.part_count)) - set(session.parts_received))
    if missing:
        raise InvalidUploadSession(
            f"{len(missing)} part(s) not stored yet: {missing[:20]}.",
            code="parts_missing",
            extra={"missing": missing[:1000]},
        )
    uploaded = hashed_file_from_path(session_path(session))
    if session.sha256 and uploaded.sha256 != session.sha256:  # "": none declared, the computed digest stands
        uploaded.close()
        raise InvalidUploadSession(
            f"The assembled file's SHA-256 is {uploaded.sha256}, not the declared "
            f"{session.sha256}; send the parts again (or start over).",
            code="digest_mismatch",
        )
    uploaded.name = session.name
    try:
        upload, created = services.receive_upload(
            project=session.project,
            uploaded=uploaded,
            submitted_by=submitted_by,
            config=session.config,
            tags=session.tags,
        )
    except PortalError:
        UploadSession.objects.filter(pk=session.pk).update(state=UploadSession.State.COMPLETED)
        raise
    UploadSession.objects.filter(pk=session.pk).update(state=UploadSession.State.COMPLETED, upload=upload.original)
    return upload, created


def expire_idle_sessions(now=None) -> dict:
    """Delete every open session with no part stored (nor created) for ``UPLOAD_SESSION_IDLE_SECONDS``, with its
    preallocated file in ``incoming/``. Completed sessions stay (their file went to the intake; a retried completion
    still gets its answer). Each session is re-checked under a row lock, so a part that arrives meanwhile keeps it.
    Returns ``{"expired": [session ids], "files_removed": n}``."""
    now = now or timezone.now()
    idle_before = now - timedelta(seconds=settings.UPLOAD_SESSION_IDLE_SECONDS)
    idle = UploadSession.objects.filter(state=UploadSession.State.OPEN, updated_at__lt=idle_before)
    expired, removed = [], 0
    for pk in idle.values_list("pk", flat=True):
        with transaction.atomic():
            session = idle.select_for_update(skip_locked=True).filter(pk=pk).first()
            if session is None:  # a part arrived, or it was completed, meanwhile
                continue
            path = session_path(session)
            session.delete()
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
        expired.append(str(pk))
    return {"expired": expired, "files_removed": removed}
