"""Streams multipart file uploads straight into the artifact store's ``incoming/`` folder, computing
SHA-256 and enforcing the size limit on the fly: a 5 GB upload never sits in memory, and an oversize one
is cut off as soon as it crosses the limit. (The upload view also refuses a too-large ``Content-Length``
before reading the body at all.)"""

from __future__ import annotations

import errno
import hashlib
import os
import uuid
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopUpload

from audit_portal.core.api_errors import UPLOAD_PARTS_ATTR
from workers.fcr.reader import GZIP_MAGIC, FcrParseError, PushInflater, ReadLimits, limits as read_limits

MULTIPART_OVERHEAD = 64 * 1024
HEAD_BYTES = 4 * 1024 * 1024  # decompressed prefix kept for the synchronous pre-flight check


class StreamProbe:
    """Follows an upload as it arrives — decompressing gzip (multi-member too) through the engines' own bounded
    inflation (:class:`workers.fcr.reader.PushInflater`, steps of at most 1 MiB) — keeping the first HEAD_BYTES,
    counting lines, and stopping at the first problem the engines would stop at, on the same line: a truncated or
    corrupt stream (after the complete lines before it), a stream inflating past the ratio/size cap, or a line longer
    than the line cap; ``error`` is ``"line N: reason"`` and ``code`` says which. Work and memory per chunk are
    bounded whatever the compression ratio, and nothing more is inflated once a limit is hit."""

    STEP = 1 << 20

    def __init__(self, compressed: bool, limits: ReadLimits | None = None):
        self.limits = limits or read_limits()
        self._inflate = PushInflater(self.limits, self.STEP) if compressed else None
        self.compressed = compressed
        self.head = b""
        self.error: str | None = None
        self.code: str | None = None
        self._plain = 0  # bytes of a plain upload
        self.lines = 0  # complete lines seen
        self._line_len = 0  # bytes of the current, unterminated line

    @property
    def inflated(self) -> int:
        return self._inflate.inflated if self._inflate is not None else self._plain

    @property
    def head_is_whole(self) -> bool:
        return self.error is None and self.inflated <= HEAD_BYTES and len(self.head) == self.inflated

    def feed(self, data: bytes) -> None:
        if self.error is not None:
            return
        if self._inflate is None:
            self._plain += len(data)
            self._text(data)
            return
        self._take(self._inflate.feed(data))

    def _take(self, pieces) -> None:
        try:
            for out in pieces:
                self._text(out)
                if self.error is not None:
                    return
        except FcrParseError as exc:  # the engines' reason, on the line where they stop
            self._fail(f"line {self.lines + 1}: {exc.reason}", getattr(exc, "code", "corrupt_compression"))

    def _text(self, out: bytes) -> None:
        if self.error is not None:
            return
        if len(self.head) < HEAD_BYTES:
            self.head += out[: HEAD_BYTES - len(self.head)]
        cap = self.limits.max_line_bytes
        first = out.find(b"\n")
        if first < 0:
            self._line_len += len(out)
        else:
            longest = self._line_len + first
            if len(out) > cap:  # only then can a whole line inside this piece be over the cap
                longest = max(longest, max(map(len, out[first + 1 :].split(b"\n")[:-1]), default=0))
            if longest > cap:
                inner = out[first + 1 :].split(b"\n")
                at = 1 if self._line_len + first > cap else 2 + next(i for i, x in enumerate(inner) if len(x) > cap)
                self._fail_line(self.lines + at)
                return
            self.lines += out.count(b"\n")
            self._line_len = len(out) - out.rfind(b"\n") - 1
        if self._line_len > cap:
            self._fail_line(self.lines + 1)

    def _fail_line(self, line: int) -> None:
        self._fail(f"line {line}: {self.limits.line_problem()}", "line_too_long")

    def _fail(self, message: str, code: str) -> None:
        self.error, self.code = message, code

    def finish(self) -> None:
        if self.error is None and self._inflate is not None:
            self._take(self._inflate.finish())


def incoming_dir() -> Path:
    path = Path(settings.ARTIFACT_ROOT) / "incoming"
    path.mkdir(parents=True, exist_ok=True)
    return path


class HashedUploadedFile(UploadedFile):
    """A completed upload on disk in the artifact store, with its digest and size."""

    def __init__(
        self,
        path: Path,
        name: str,
        content_type: str,
        size: int,
        sha256: str,
        *,
        compression: str,
        head: bytes,
        head_is_whole: bool,
        stream_error: str | None,
        stream_error_code: str | None = None,
    ):
        super().__init__(open(path, "rb"), name=name, content_type=content_type, size=size)
        self.path = path
        self.sha256 = sha256
        self.compression = compression  # "gzip" or "none", from the magic bytes
        self.head = head  # first (decompressed) bytes, for the pre-flight check
        self.head_is_whole = head_is_whole  # the head holds the entire (decompressed) content
        self.stream_error = stream_error  # truncated or corrupt compression, or a read limit, if any
        self.stream_error_code = stream_error_code  # corrupt_compression | inflation_limit | line_too_long

    def temporary_file_path(self) -> str:
        return str(self.path)

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class HashingUploadHandler(FileUploadHandler):
    chunk_size = 1 << 20

    def new_file(self, *args, **kwargs):
        super().new_file(*args, **kwargs)
        self.path = incoming_dir() / f"{uuid.uuid4().hex}.part"
        # removed at the end of the request if still here (core/api_errors.py): a parser error leaves no orphan
        parts = getattr(self.request, UPLOAD_PARTS_ATTR, None)
        if parts is None:
            parts = []
            setattr(self.request, UPLOAD_PARTS_ATTR, parts)
        parts.append(self.path)
        self.fh = open(self.path, "wb")
        self.digest = hashlib.sha256()
        self.size = 0
        self.probe: StreamProbe | None = None
        self.request.upload_storage_full = False

    def receive_data_chunk(self, raw_data, start):
        self.size += len(raw_data)
        if self.size > settings.UPLOAD_MAX_BYTES:
            self.request.upload_too_large = True
            self._discard()
            raise StopUpload(connection_reset=True)
        if self.probe is None:
            self.probe = StreamProbe(compressed=raw_data[:2] == GZIP_MAGIC)
        self.probe.feed(raw_data)
        self.digest.update(raw_data)
        try:
            self.fh.write(raw_data)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            self.request.upload_storage_full = True
            self._discard()
            raise StopUpload(connection_reset=True) from exc
        return None

    def file_complete(self, file_size):
        try:
            self.fh.flush()
            os.fsync(self.fh.fileno())
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            self.request.upload_storage_full = True
            self._discard()
            return None
        self.fh.close()
        return _hashed(
            self.path,
            self.file_name,
            self.content_type,
            self.size,
            self.digest.hexdigest(),
            self.probe or StreamProbe(compressed=False),
        )

    def upload_interrupted(self):
        self._discard()

    def _discard(self):
        fh = getattr(self, "fh", None)
        if fh is not None and not fh.closed:
            fh.close()
        path = getattr(self, "path", None)
        if path is not None:
            Path(path).unlink(missing_ok=True)


def _hashed(path, name, content_type, size, sha256, probe: StreamProbe) -> HashedUploadedFile:
    probe.finish()
    return HashedUploadedFile(
        path,
        name,
        content_type,
        size,
        sha256,
        compression="gzip" if probe.compressed else "none",
        head=probe.head,
        head_is_whole=probe.head_is_whole,
        stream_error=probe.error,
        stream_error_code=probe.code,
    )


def hashed_file_from_path(path: Path, content_type: str = "application/octet-stream") -> HashedUploadedFile:
    """Treat a file already in ``incoming/`` as an upload (the demo seeder and server-side imports use
    this, so they go through exactly the checks and storage of a browser or API upload)."""
    digest, size, probe = hashlib.sha256(), 0, None
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            if probe is None:
                probe = StreamProbe(compressed=chunk[:2] == GZIP_MAGIC)
            probe.feed(chunk)
            digest.update(chunk)
            size += len(chunk)
    return _hashed(path, path.name, content_type, size, digest.hexdigest(), probe or StreamProbe(compressed=False))
