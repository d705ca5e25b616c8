"""Text that came from a submitted kernel, made fit for logs and verdicts (docs/contracts.md, "Threat model").

A kernel's prints, exception messages and file names reach the worker's log and the verdict's reason. They are
escaped (no terminal control sequence, no carriage return rewriting a log line, no forged line without the
``[kernel]`` prefix), capped, and stripped of the host's absolute paths: a verdict names the files it is about by
their base name, and says nothing of where the worker keeps them."""

from __future__ import annotations

import re

# absolute paths of the worker's filesystem; the sandbox's own (/opt/lib, /opt/app) are what the candidate saw
_PATH = re.compile(r"(?<![\w.~/-])(/(?!opt/lib/|opt/app/)(?:[\w.+@%-]+/)+)([\w.+@%-]*)")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape(text: str, keep_newlines: bool = False) -> str:
    """Control characters (ANSI escapes, carriage returns, bidi overrides...) as ``\\xNN`` / ``\\uNNNN``."""

    def sub(m):
        c = m.group(0)
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    if not keep_newlines:
        text = text.replace("\n", "\\n")
    return _CONTROL.sub(sub, text)


def strip_host_paths(text: str) -> str:
    """``/srv/audit/var/uploads/ab12/kernel.py`` -> ``…/kernel.py``."""
    return _PATH.sub(lambda m: "…/" + m.group(2), text)


def clean(text, limit: int = 2000) -> str:
    """For a verdict's reason or a finding's detail: escaped, without host paths, at most ``limit`` characters."""
    text = strip_host_paths(escape(str(text)))
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"


def log_lines(chunk: str, partial: str = "") -> tuple[str, str]:
    """The complete lines of ``partial + chunk`` as log lines (each escaped, prefixed ``[kernel] ``), and the
    incomplete rest to carry over."""
    text = partial + chunk
    *lines, rest = text.split("\n")
    return "".join(f"[kernel] {escape(line)}\n" for line in lines), rest
