"""What each kind of signed subject is: its model and the files it audited.

The app that owns a subject (a run certificate, a fidelity report, a kernel submission) registers it from its
``AppConfig.ready``, so this app — which those apps call to sign — never imports them back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from audit_portal.core.storage import artifact_path

_KINDS: dict[str, tuple[type, Callable[[object], dict]]] = {}


def register(kind: str, *, model, files: Callable[[object], dict]) -> None:
    """``files(obj)``: name → path in the artifact store of the files ``obj``'s statement names as subjects."""
    _KINDS[kind] = (model, files)


def subject_object(kind: str, subject_id: int):
    model, _ = _KINDS[kind]
    return model.objects.filter(pk=subject_id).first()


def audited_files(kind: str, obj) -> dict[str, Path]:
    """name → path in the artifact store of what the certificate's subjects are (the files that were audited)."""
    if obj is None:
        return {}
    _, files = _KINDS[kind]
    return files(obj)


def uploaded_log(result) -> dict[str, Path]:
    """The run log a per-upload result (a certificate, a fidelity report) was computed from."""
    upload = result.upload.original
    if not upload.storage_name:
        return {}
    return {result.upload.original_name or f"upload-{result.upload.pk}": artifact_path(upload.storage_name)}
