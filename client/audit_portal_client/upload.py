"""A large run log as a resumable upload in parts (the portal's upload sessions, docs/portal.md):

1. the file's SHA-256 is computed by reading it once in 1 MiB pieces (bounded memory);
2. a session is created with its size, digest and name (``POST /projects/<slug>/upload-sessions/``), and its id is
   remembered in a small JSON file in the client's state folder, keyed by the portal, project, path, size, mtime and
   digest;
3. each part the portal has not stored yet is read (one part in memory at a time), sent with its own SHA-256
   (``PUT /upload-sessions/<id>/parts/<n>/``) and retried with exponential backoff on network errors, 5xx, 429 and a
   part that arrived damaged;
4. ``POST /upload-sessions/<id>/complete/`` answers like a single-request upload (201 new, 200 the same bytes).

A run of the same upload after an interruption finds the remembered session, asks the portal which parts it has
(``GET /upload-sessions/<id>/``) and sends only the others. Errors carry the portal's JSON message
(:class:`~audit_portal_client.client.PortalError`); what a later try may fix is
:class:`~audit_portal_client.client.PortalUnavailable`, and the session is kept for it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

from audit_portal_client.outcomes import PortalError, PortalUnavailable

log = logging.getLogger("audit_portal_client.upload")

PARTS_ABOVE = 64 << 20  # files larger than this go in parts (Client.upload's parts_above)
READ_STEP = 1 << 20
RETRIES = 5  # a part (or the completion) is tried 6 times: 0.5, 1, 2, 4, 8 s apart
BACKOFF = 0.5


def state_dir() -> Path:
    """Where remembered sessions live: ``AUDIT_PORTAL_STATE`` or ``~/.cache/audit-portal/uploads``."""
    return Path(os.environ.get("AUDIT_PORTAL_STATE", Path.home() / ".cache" / "audit-portal")) / "uploads"


def file_sha256(path: Path, progress=None) -> str:
    """The file's SHA-256, read in 1 MiB pieces; ``progress(bytes_read, size)`` as it goes."""
    digest, done, size = hashlib.sha256(), 0, path.stat().st_size
    with open(path, "rb") as fh:
        while piece := fh.read(READ_STEP):
            digest.update(piece)
            done += len(piece)
            if progress is not None:
                progress(done, size)
    return digest.hexdigest()


class _Remembered:
    """The JSON file that remembers one file's open session."""

    def __init__(self, folder: Path, url: str, project: str, path: Path, size: int, mtime_ns: int, sha256: str):
        self.key = {
            "url": url,
            "project": project,
            "path": str(path.resolve()),
            "size": size,
            "mtime_ns": mtime_ns,
            "sha256": sha256,
        }
        name = hashlib.sha256(json.dumps(self.key, sort_keys=True).encode()).hexdigest()[:32]
        self.file = folder / f"{name}.json"

    def load(self) -> str | None:
        try:
            data = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != self.key or not isinstance(data.get("session"), str):
            return None
        return data["session"]

    def save(self, session_id: str) -> None:
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"key": self.key, "session": session_id}))
            os.replace(tmp, self.file)
        except OSError as exc:  # no state folder: the upload works, it just cannot resume
            log.warning("cannot remember upload session %s in %s: %s", session_id, self.file, exc)

    def forget(self) -> None:
        try:
            self.file.unlink()
        except OSError:
            pass


def _code(exc) -> str:
    err = (getattr(exc, "payload", None) or {}).get("error")
    return err.get("code", "") if isinstance(err, dict) else ""


def upload_in_parts(
    client,
    project: str,
    path,
    *,
    progress=None,
    hash_progress=None,
    state: Path | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    sleep=None,
    declared: dict | None = None,
) -> dict:
    """Upload ``path`` to ``project`` through an upload session (see the module); returns the upload object.
    ``progress(bytes_stored, size)`` after each part (the parts a resumed session already has count as stored),
    ``hash_progress(bytes_read, size)`` while the digest is computed. ``state``: the folder of remembered sessions.
    ``declared``: the run's ``config``/``tags`` sent with a new session (a resumed one keeps those it started with).
    Raises ``SessionsFull`` when the project has too many unfinished sessions (the caller may send one request)."""

    attempt = _retrying(
        RETRIES if retries is None else retries, BACKOFF if backoff is None else backoff, sleep or time.sleep
    )
    path = Path(path)
    st = path.stat()
    size = st.st_size
    sha256 = file_sha256(path, hash_progress)
    memo = _Remembered(
        state if state is not None else state_dir(), client.url, project, path, size, st.st_mtime_ns, sha256
    )

    session, completed = _resumed(client, memo, size, sha256, attempt)
    if completed is not None:
        return completed
    if session is None:
        session = _started(client, memo, project, path, size, sha256, attempt, declared or {})

    parts = session["id"], session["part_size"], session["part_count"]  # the session's layout, fixed at its start
    sid = parts[0]
    for _ in range(2):  # a second round when the completion names parts the portal lost
        _send_missing_parts(client, path, size, parts, session.get("parts_received"), progress, attempt)
        try:
            return _complete(client, memo, sid, attempt)
        except PortalError as exc:
            if _code(exc) != "parts_missing":
                raise
            session = attempt("upload session", lambda: client._request("GET", f"/upload-sessions/{sid}/"))
    raise PortalUnavailable(f"upload session {sid}: the portal still misses parts after they were sent again")


def _retrying(retries: int, backoff: float, sleep):
    """``attempt(what, fn)``: ``fn()`` retried with backoff on what a retry may fix; the last failure is raised."""

    def attempt(what: str, fn):
        for i in range(retries + 1):
            try:
                return fn()
            except PortalUnavailable as exc:
                failure = exc
            except PortalError as exc:
                if _code(exc) != "part_digest_mismatch":
                    raise
                failure = exc
            if i < retries:
                log.info("%s: %s; trying again in %.1f s", what, failure, backoff * 2**i)
                sleep(backoff * 2**i)
        raise failure

    return attempt


def _resumed(client, memo: _Remembered, size: int, sha256: str, attempt) -> tuple[dict | None, dict | None]:
    """The remembered session of this file: (the open session to go on with, None), or (None, the upload) when it
    was completed but its answer lost, or (None, None) when there is none to go on with (then it is forgotten)."""

    known = memo.load()
    if known is None:
        return None, None
    try:
        got = attempt("upload session", lambda: client._request("GET", f"/upload-sessions/{known}/"))
    except PortalError as exc:
        if exc.status != 404:
            raise
        got = None  # gone: start over
    if got is None or got.get("size_bytes") != size or got.get("sha256") not in ("", sha256):
        memo.forget()
        return None, None
    if got.get("state") != "open":  # completed, but its answer was lost: completing again gives the same answer
        return None, _complete(client, memo, known, attempt)
    log.info("resuming upload session %s: %d of %d parts stored", known, len(got["parts_received"]), got["part_count"])
    return got, None


def _started(
    client, memo: _Remembered, project: str, path: Path, size: int, sha256: str, attempt, declared: dict
) -> dict:
    """A new upload session for the file, remembered for a later resume."""

    try:
        session = attempt(
            "start an upload session",
            lambda: client._request(
                "POST",
                f"/projects/{project}/upload-sessions/",
                json={"size": size, "sha256": sha256, "name": path.name, **declared},
            ),
        )
    except PortalError as exc:
        if _code(exc) == "too_many_upload_sessions":
            raise SessionsFull(str(exc)) from exc
        raise
    memo.save(session["id"])
    log.info(
        "upload session %s: %s, %d bytes in %d parts of %d",
        session["id"],
        path.name,
        size,
        session["part_count"],
        session["part_size"],
    )
    return session


def _send_missing_parts(client, path: Path, size: int, parts: tuple, received, progress, attempt) -> None:
    """PUT every part of the session ``parts`` = (id, part size, part count) not in ``received``, reporting
    ``progress(bytes_stored, size)``."""
    sid, part_size, count = parts

    def part_len(n: int) -> int:
        return min(part_size, size - n * part_size)

    received = set(received or [])
    stored = sum(part_len(n) for n in received)
    if progress is not None:
        progress(stored, size)
    last_logged = -1
    with open(path, "rb") as fh:
        for n in range(count):
            if n in received:
                continue
            fh.seek(n * part_size)
            data = fh.read(part_len(n))
            headers = {
                "Content-Type": "application/octet-stream",
                "X-Part-SHA256": hashlib.sha256(data).hexdigest(),
            }
            attempt(
                f"part {n}",
                lambda: client._request("PUT", f"/upload-sessions/{sid}/parts/{n}/", data=data, headers=headers),
            )
            stored += len(data)
            if progress is not None:
                progress(stored, size)
            pct = 100 * stored // size
            log.debug("upload session %s: part %d stored (%d%%)", sid, n, pct)
            if pct // 10 != last_logged:
                last_logged = pct // 10
                log.info("upload session %s: %d of %d bytes stored (%d%%)", sid, stored, size, pct)


def _complete(client, memo: _Remembered, sid: str, attempt) -> dict:
    try:
        up = attempt("complete the upload", lambda: client._request("POST", f"/upload-sessions/{sid}/complete/"))
    except PortalError as exc:
        if _code(exc) != "parts_missing":  # refused for good (digest_mismatch, closed, invalid): start over next time
            memo.forget()
        raise
    memo.forget()
    log.info("upload session %s completed: upload %s (%s)", sid, up.get("id"), up.get("stage"))
    return up


class SessionsFull(Exception):
    """The project has too many unfinished upload sessions (``too_many_upload_sessions``)."""
