"""The one bounded line reader for ``fcr/1`` JSONL files, plain or gzip (docs/fcr.md#principles).

Every engine that reads an uploaded file line by line — the upload validator, ``certify_file``, the fidelity audit,
the routing audit, the importers, the portal's record lookup — reads it through :class:`LineReader`, and the upload
handler inflates a gzip upload as it arrives through :class:`PushInflater` (the same inflation, driven by pushed
chunks), so they share one policy (docs/fcr.md#reading-a-run-log):

* **Bounded lines.** A line longer than ``max_line_bytes`` (``AUDIT_MAX_LINE_BYTES``, default 64 MiB) is refused
  after reading at most that many bytes of it: :class:`FcrLimitError` names the line and the limit. Memory is one
  line at most, never the file.
* **Bounded decompression.** Gzip (detected from the magic bytes, not the name) is inflated in steps of at most
  1 MiB; once more than ``ratio_floor_bytes`` (1 MiB) came out, the reader stops with :class:`FcrLimitError` when
  the output exceeds ``max_inflate_ratio`` (``AUDIT_MAX_INFLATE_RATIO``, default 200; run logs compress 2–5×,
  gzip's own maximum is about 1030×) times the compressed bytes read, or ``max_inflated_bytes`` in all
  (``AUDIT_MAX_INFLATED_BYTES``, default 32 GiB). A gzip bomb costs the reader at most its ratio × what it read.
* **Linear time.** Lines are cut by ``readline(max_line_bytes + 1)`` over a buffered stream: every byte is copied a
  bounded number of times whatever the line lengths (no re-joining of a growing line per chunk).
* **One policy for truncated or malformed input.** Every complete line before a problem is yielded first; then
  :class:`FcrParseError` (truncated or corrupt compression) or :class:`FcrLimitError` (a limit) is raised with the
  1-based number of the line where reading stopped. Callers turn that into their own error form and stop. For a
  corrupt stream "before" means everything zlib inflates before the byte it refuses: ``decompress`` raises without
  returning its output of that call, so the failing read step is replayed a byte at a time (only on that path).
* **Progress by bytes.** :attr:`LineReader.position` is the number of file (compressed) bytes consumed so far, and
  ``on_bytes(position)`` is called after every compressed read, so progress moves even inside a long line.
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import orjson

GZIP_MAGIC = b"\x1f\x8b"
READ_BUFFER = 1 << 20
COMPRESSED_READ = 1 << 18
MiB, GiB = 1 << 20, 1 << 30


class FcrParseError(ValueError):
    """A record that cannot be read: carries the 1-based line number and the reason."""

    def __init__(self, line: int, reason: str, field: str | None = None):
        self.line = line
        self.reason = reason
        self.field = field
        where = f"line {line}" + (f", field {field}" if field else "")
        super().__init__(f"{where}: {reason}")


class FcrLimitError(FcrParseError):
    """Reading stopped at a configured limit (line length, decompression ratio or size); ``code`` says which."""

    def __init__(self, line: int, reason: str, code: str):
        super().__init__(line, reason)
        self.code = code  # "line_too_long" | "inflation_limit"


def _env_int(env, name: str, default: int) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(float(raw))
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, not {raw!r}")
    return value


@dataclass(frozen=True)
class ReadLimits:
    """Every limit a run log is read under, JSONL and Parquet alike (docs/fcr.md#reading-a-run-log): the readers
    take them from here, and :meth:`from_env` is where the deployment's settings come in.

    JSONL: ``max_line_bytes`` (one line), ``max_inflate_ratio`` / ``max_inflated_bytes`` (gzip; the ratio only
    past ``ratio_floor_bytes``). Parquet (:class:`workers.fcr.columnar.RunLog`): ``max_row_group_bytes`` (a row
    group's encoded size as its footer declares it) and ``max_decoded_bytes`` (what one row group may decode to in
    memory, checked before it is materialised)."""

    max_line_bytes: int = 64 * MiB
    max_inflate_ratio: int = 200
    max_inflated_bytes: int = 32 * GiB
    ratio_floor_bytes: int = 1 * MiB
    max_row_group_bytes: int = 512 * MiB
    max_decoded_bytes: int = 256 * MiB

    @classmethod
    def from_env(cls, env=None) -> "ReadLimits":
        env = os.environ if env is None else env
        d = cls()
        return cls(
            max_line_bytes=_env_int(env, "AUDIT_MAX_LINE_BYTES", d.max_line_bytes),
            max_inflate_ratio=_env_int(env, "AUDIT_MAX_INFLATE_RATIO", d.max_inflate_ratio),
            max_inflated_bytes=_env_int(env, "AUDIT_MAX_INFLATED_BYTES", d.max_inflated_bytes),
            ratio_floor_bytes=d.ratio_floor_bytes,
            max_row_group_bytes=_env_int(env, "FCR_PARQUET_MAX_ROW_GROUP_BYTES", d.max_row_group_bytes),
            max_decoded_bytes=_env_int(env, "FCR_PARQUET_MAX_DECODED_BYTES", d.max_decoded_bytes),
        )

    def inflation_problem(self, inflated: int, compressed: int) -> str | None:
        """Why ``inflated`` output bytes from ``compressed`` input bytes is past a limit, or None."""
        if inflated > self.max_inflated_bytes:
            return (
                f"decompressed data exceeds {human(self.max_inflated_bytes)} (AUDIT_MAX_INFLATED_BYTES); stopped "
                f"reading"
            )
        if inflated > self.ratio_floor_bytes and inflated > self.max_inflate_ratio * max(compressed, 1):
            return (
                f"the gzip stream inflates more than {self.max_inflate_ratio}:1 ({human(inflated)} from "
                f"{human(compressed)}; AUDIT_MAX_INFLATE_RATIO): refused as a decompression bomb"
            )
        return None

    def line_problem(self) -> str:
        return f"the line is longer than {human(self.max_line_bytes)} (AUDIT_MAX_LINE_BYTES); stopped reading"


def limits() -> ReadLimits:
    """The limits from the environment (read each time: tests and deployments set them per process)."""
    return ReadLimits.from_env()


def human(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


class _InflateError(Exception):
    def __init__(self, reason: str, limit: bool):
        super().__init__(reason)
        self.reason, self.limit = reason, limit

    def typed(self, line: int) -> FcrParseError:
        """The error callers see, on the line where reading stopped."""
        return FcrLimitError(line, self.reason, "inflation_limit") if self.limit else FcrParseError(line, self.reason)


class _Inflater(io.RawIOBase):
    """A raw stream of the decompressed bytes of a (multi-member) gzip file, at most ``len(buffer)`` bytes per
    step, refusing past the limits."""

    def __init__(self, raw, limits: ReadLimits, on_bytes):
        self.raw = raw
        self.limits = limits
        self.on_bytes = on_bytes
        self.consumed = 0  # file bytes read (progress)
        self.fed = 0  # of which inflated so far (the ratio's denominator)
        self.inflated = 0
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._pending = b""
        self._between_members = True  # a clean end of input is only allowed here
        self._finished = False
        self._salvaged = b""  # output recovered before a corrupt byte, served before the error is raised
        self._error: _InflateError | None = None

    def readable(self):
        return True

    def readinto(self, buf) -> int:
        out = self.step(len(buf))
        buf[: len(out)] = out
        return len(out)

    def step(self, max_len: int) -> bytes:
        """The next inflated bytes, at most ``max_len`` (b"" at the clean end of the input); raises
        :class:`_InflateError`. :class:`PushInflater` takes these pieces as they are, without a copy."""
        if self._salvaged:
            out, self._salvaged = self._salvaged[:max_len], self._salvaged[max_len:]
            return out
        if self._error is not None:
            raise self._error
        while True:
            if self._pending:
                data, self._pending = self._pending, b""
            else:
                if self._finished:
                    return b""
                data = self.raw.read(COMPRESSED_READ)
                self.consumed += len(data)
                if self.on_bytes is not None:
                    self.on_bytes(self.consumed)
                if not data:
                    if self._between_members:
                        self._finished = True
                        return b""
                    raise _InflateError("compressed stream is truncated (no end-of-stream marker)", False)
            self._between_members = False
            before = self._d.copy()  # 32 KiB of window: cheap beside inflating up to 1 MiB
            try:
                out = self._d.decompress(data, max_len)
            except zlib.error as exc:
                self._error = _InflateError(f"compressed stream is corrupt ({exc})", False)
                self._salvaged = self._salvage(before, data)
                return self.step(max_len)
            self._pending = self._d.unconsumed_tail
            if self._d.eof:  # end of a member: what follows is another member (or trailing bytes: corrupt)
                self._pending = self._d.unused_data
                self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._between_members = True
            self.fed += len(data) - len(self._pending)  # compressed bytes actually inflated (not the read-ahead)
            self.inflated += len(out)
            problem = self.limits.inflation_problem(self.inflated, self.fed)
            if problem:
                raise _InflateError(problem, True)
            if out:
                return out

    def _salvage(self, d, data: bytes) -> bytes:
        """What ``data`` inflates to before the byte zlib refuses. ``decompress`` raises without returning what it
        inflated of the same call (up to a whole read step, hundreds of complete lines), so the step is replayed
        one byte at a time on the state from before it; only a corrupt file pays for this."""
        out = bytearray()
        for k in range(len(data)):
            try:
                if d.eof:  # a member ended inside this step: the next one starts in its unused bytes
                    tail, d = d.unused_data, zlib.decompressobj(16 + zlib.MAX_WBITS)
                    out += d.decompress(tail)
                out += d.decompress(data[k : k + 1])
            except zlib.error:
                break
            problem = self.limits.inflation_problem(self.inflated + len(out), self.fed + k + 1)
            if problem:
                self._error = _InflateError(problem, True)
                break
        self.inflated += len(out)
        return bytes(out)


class LineReader:
    """``for line_no, line in LineReader(path): …`` — every line (blank ones too; each ends with ``\\n`` except
    perhaps the last), bounded as the module docstring says. Use as a context manager or iterate to the end (the
    file is closed when iteration ends or fails).

    ``start``/``end``/``first_line`` read one byte range of a *plain* JSONL file: the lines that start in
    ``[start, end)``, numbered from ``first_line``. ``start`` must be a line start (0 or just after a ``\\n``), as the
    ranges of :func:`workers.fcr.chunks.chunk_ranges` are; a gzip stream cannot be entered in the middle, so for gzip
    only the whole file (``start=0``, ``end`` None or the file size) is accepted."""

    def __init__(
        self,
        path,
        *,
        limits: ReadLimits | None = None,
        on_bytes: Callable[[int], None] | None = None,
        start: int = 0,
        end: int | None = None,
        first_line: int = 1,
    ):
        self.limits = limits or ReadLimits.from_env()
        self.size = os.path.getsize(path)
        self.raw = open(path, "rb")
        self.compressed = self.raw.peek(2)[:2] == GZIP_MAGIC
        self.end = self.size if end is None else min(end, self.size)
        self._inflater = None
        if self.compressed:
            if start != 0 or self.end != self.size:
                self.raw.close()
                raise ValueError("a gzip file is read whole: a byte range needs a plain JSONL file")
            self._inflater = _Inflater(self.raw, self.limits, on_bytes)
            self._fh = io.BufferedReader(self._inflater, buffer_size=READ_BUFFER)
        else:
            self._fh = self.raw
            if start:
                self.raw.seek(start - 1)
                if self.raw.read(1) != b"\n":  # a range that starts mid-line would count a fragment as a line
                    self.raw.close()
                    raise ValueError(f"byte {start} is not the start of a line")
        self.line_no = first_line - 1
        self.offset = start  # byte offset of the next line in the (decompressed) stream

    @property
    def position(self) -> int:
        """File bytes consumed so far (compressed bytes for gzip)."""
        if self._inflater is not None:
            return self._inflater.consumed
        return self.raw.tell() if not self.raw.closed else self.end

    @property
    def inflated(self) -> int:
        return self._inflater.inflated if self._inflater is not None else self.position

    def close(self) -> None:
        self.raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        cap = self.limits.max_line_bytes
        stop = self.end if not self.compressed else float("inf")  # gzip: offsets are in the inflated stream
        try:
            for line in iter(partial(self._fh.readline, cap + 1), b""):
                self.line_no += 1
                if len(line) > cap and (len(line) > cap + 1 or not line.endswith(b"\n")):
                    raise FcrLimitError(self.line_no, self.limits.line_problem(), "line_too_long")
                self.offset += len(line)
                yield self.line_no, line
                if self.offset >= stop:  # the end of a byte range (a line that starts before it is read whole)
                    break
        except _InflateError as exc:
            raise exc.typed(self.line_no + 1) from None
        except OSError as exc:
            raise FcrParseError(self.line_no + 1, f"the file cannot be read ({exc})") from None
        finally:
            self.close()


def open_binary(path):
    """Open ``path`` for binary reading, transparently decompressing gzip — with the decompression limits (a bomb
    raises :class:`FcrLimitError` from ``read``). Line-oriented readers use :class:`LineReader`."""
    raw = open(path, "rb")
    if raw.peek(2)[:2] != GZIP_MAGIC:
        return raw
    return io.BufferedReader(_LimitedInflater(raw, ReadLimits.from_env(), None), buffer_size=READ_BUFFER)


class _LimitedInflater(_Inflater):
    def readinto(self, buf):
        try:
            return super().readinto(buf)
        except _InflateError as exc:
            if exc.limit:
                raise exc.typed(0) from None
            raise EOFError(exc.reason) from None

    def close(self):
        self.raw.close()
        super().close()


def iter_lines(
    path, *, limits: ReadLimits | None = None, start: int = 0, end: int | None = None, first_line: int = 1
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw_line)`` for every non-blank line (of the byte range ``[start, end)``, see
    :class:`LineReader`). Every complete line before a truncated or corrupt gzip stream or a limit is yielded; then
    :class:`FcrParseError` / :class:`FcrLimitError` names the line."""
    for line_no, line in LineReader(path, limits=limits, start=start, end=end, first_line=first_line):
        if not line.isspace():
            yield line_no, line


def iter_records(path, *, start: int = 0, end: int | None = None, first_line: int = 1) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` parsed with orjson; a line that is not a JSON object raises. ``start``,
    ``end``, ``first_line``: one byte range of a plain JSONL file (:func:`workers.fcr.chunks.chunk_ranges`)."""
    for line_no, line in iter_lines(path, start=start, end=end, first_line=first_line):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise FcrParseError(line_no, f"not valid JSON ({exc})") from exc
        if not isinstance(record, dict):
            raise FcrParseError(line_no, f"expected a JSON object, got {type(record).__name__}")
        yield line_no, record


class _Starved(Exception):
    """The pushed bytes ran out before the end of the input: wait for the next :meth:`PushInflater.feed`."""


class _Pushed:
    """The compressed bytes pushed so far, read by the pull inflater; only the unread rest is kept."""

    def __init__(self):
        self.data, self.pos, self.ended = b"", 0, False

    def push(self, data: bytes) -> None:
        self.data, self.pos = self.data[self.pos :] + data, 0

    def read(self, n: int) -> bytes:
        if self.pos >= len(self.data):
            if self.ended:
                return b""
            raise _Starved
        out = self.data[self.pos : self.pos + n]
        self.pos += len(out)
        return out


class PushInflater:
    """The same bounded gzip inflation as :class:`LineReader` (limits, multi-member, the lines before a corrupt byte,
    truncation), driven by pushed chunks: an upload is inflated as it arrives, without a second pass over the stored
    file. ``feed(data)`` and, at the end, ``finish()`` yield the inflated bytes (at most ``step`` at a time), then
    raise :class:`FcrParseError` / :class:`FcrLimitError` with line 0: the caller, who counts lines, names it."""

    def __init__(self, limits: ReadLimits | None = None, step: int = READ_BUFFER):
        self._input = _Pushed()
        self._inflater = _Inflater(self._input, limits or ReadLimits.from_env(), None)
        self._step = step

    @property
    def consumed(self) -> int:
        return self._inflater.consumed

    @property
    def inflated(self) -> int:
        return self._inflater.inflated

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._input.push(data)
        return self._drain()

    def finish(self) -> Iterator[bytes]:
        self._input.ended = True
        return self._drain()

    def _drain(self) -> Iterator[bytes]:
        while True:
            try:
                out = self._inflater.step(self._step)
            except _Starved:
                return
            except _InflateError as exc:
                raise exc.typed(0) from None
            if not out:
                return
            yield out
