"""The artifact store's one path rule, shared by every app (uploads, kernel modules, traces, figures, masks).

Storage names are relative (``uploads/ab/<sha256>.jsonl.gz``, ``kernels/ab/<sha256>.py``, ...) so the rows
stay valid when ``ARTIFACT_ROOT`` moves; this is the only place that joins a name onto the root.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings


def artifact_path(storage_name: str) -> Path:
    return Path(settings.ARTIFACT_ROOT) / storage_name
