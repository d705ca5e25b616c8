"""Streams multipart file uploads straight into the artifact store's ``incoming/`` folder, computing
SHA-256 and enforcing the size limit on the fly: a 5 GB upload never sits in memory, and an oversize one
is cut off as soon as it crosses the limit. (The upload view also refuses a too-large ``Content-Length``
before reading the body at all.)"""
from __future__ import annotations

import errno
import hashlib
import os
import uuid
import zlib
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopUpload

MULTIPART_OVERHEAD = 64 * 1024
HEAD_BYTES = 4 * 1024 * 1024  # decompressed prefix kept for the synchronous pre-flight check
GZIP_MAGIC = b"\x1f\x8b"


class GzipProbe:
    """Decompresses a gzip stream as it arrives, keeping the first HEAD_BYTES and noticing truncation or
    corruption (a truncated stream never reaches the end-of-stream marker). Handles multi-member files."""

    def __init__(self):
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.head = b""
        self.error: str | None = None

    def feed(self, data: bytes) -> None:
        while data and self.error is None:
            try:
                out = self._d.decompress(data)
            except zlib.error as exc:
                self.error = f"gzip stream is corrupt ({exc})"
                return
            if len(self.head) < HEAD_BYTES:
                self.head += out[: HEAD_BYTES - len(self.head)]
            data = self._d.unused_data if self._d.eof else b""
            if self._d.eof and data:
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def finish(self) -> None:
        if self.error is None and not self._d.eof:
            self.error = "gzip stream is truncated (no end-of-stream marker)"


def incoming_dir() -> Path:
    path = Path(settings.ARTIFACT_ROOT) / "incoming"
    path.mkdir(parents=True, exist_ok=True)
    return path


class HashedUploadedFile(UploadedFile):
    """A completed upload on disk in the artifact store, with its digest and size."""

    def __init__(self, path: Path, name: str, content_type: str, size: int, sha256: str, *, compression: str,
                 head: bytes, head_is_whole: bool, stream_error: str | None):
        super().__init__(open(path, "rb"), name=name, content_type=content_type, size=size)
        self.path = path
        self.sha256 = sha256
        self.compression = compression  # "gzip" or "none", from the magic bytes
        self.head = head  # first (decompressed) bytes, for the pre-flight check
        self.head_is_whole = head_is_whole  # the head holds the entire (decompressed) content
        self.stream_error = stream_error  # truncated or corrupt compression, if any

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
        self.fh = open(self.path, "wb")
        self.digest = hashlib.sha256()
        self.size = 0
        self.head = b""
        self.gzip: GzipProbe | None = None
        self.request.upload_storage_full = False

    def receive_data_chunk(self, raw_data, start):
        self.size += len(raw_data)
        if self.size > settings.UPLOAD_MAX_BYTES:
            self.request.upload_too_large = True
            self._discard()
            raise StopUpload(connection_reset=True)
        if self.size == len(raw_data) and raw_data[:2] == GZIP_MAGIC:
            self.gzip = GzipProbe()
        if self.gzip is not None:
            self.gzip.feed(raw_data)
        elif len(self.head) < HEAD_BYTES:
            self.head += raw_data[: HEAD_BYTES - len(self.head)]
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
        if self.gzip is not None:
            self.gzip.finish()
            head, whole, error, compression = self.gzip.head, len(self.gzip.head) < HEAD_BYTES, self.gzip.error, "gzip"
        else:
            head, whole, error, compression = self.head, self.size <= HEAD_BYTES, None, "none"
        return HashedUploadedFile(
            self.path, self.file_name, self.content_type, self.size, self.digest.hexdigest(),
            compression=compression, head=head, head_is_whole=whole, stream_error=error,
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


def hashed_file_from_path(path: Path, content_type: str = "application/octet-stream") -> HashedUploadedFile:
    """Treat a file already in ``incoming/`` as an upload (the demo seeder and server-side imports use
    this, so they go through exactly the checks and storage of a browser or API upload)."""
    digest, size, probe, head = hashlib.sha256(), 0, None, b""
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            if size == 0 and chunk[:2] == GZIP_MAGIC:
                probe = GzipProbe()
            if probe is not None:
                probe.feed(chunk)
            elif len(head) < HEAD_BYTES:
                head += chunk[: HEAD_BYTES - len(head)]
            digest.update(chunk)
            size += len(chunk)
    if probe is not None:
        probe.finish()
        return HashedUploadedFile(path, path.name, content_type, size, digest.hexdigest(), compression="gzip",
                                  head=probe.head, head_is_whole=len(probe.head) < HEAD_BYTES, stream_error=probe.error)
    return HashedUploadedFile(path, path.name, content_type, size, digest.hexdigest(), compression="none",
                              head=head, head_is_whole=size <= HEAD_BYTES, stream_error=None)
