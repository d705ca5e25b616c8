"""Run config and tags given with an upload (a form field of the single-request upload, a JSON field of a resumable
upload's session). Each is checked before anything is stored (a 400 naming the field) and kept on the upload; when the
upload turns valid and joins its run (services.record_validation), the run's config is updated with its keys and its
tags gain the upload's, in order, without duplicates. Registered with runs/extras.py as check-only fields, so the
multipart view refuses a bad one with the other extra fields; the values go to ``receive_upload``, which stores them
with the upload row (before its validation job can run)."""

from __future__ import annotations

import json

from audit_portal.core.errors import PortalError

CONFIG_MAX_KEYS = 64
CONFIG_MAX_BYTES = 16 * 1024
CONFIG_LIST_MAX = 64  # a value may be a short list of scalars (e.g. layer sizes)
TAGS_MAX = 32
TAG_MAX_CHARS = 64

_SCALARS = (str, int, float, bool, type(None))


def _bad_config(why: str) -> PortalError:
    return PortalError(f"config: {why}", code="invalid_upload_config", extra={"field": "config"})


def _bad_tags(why: str) -> PortalError:
    return PortalError(f"tags: {why}", code="invalid_upload_tags", extra={"field": "tags"})


def has_nul(value) -> bool:
    # PostgreSQL's jsonb holds no U+0000: refused up front as a 400, never a database error
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False


def _config_value_ok(value) -> bool:
    if isinstance(value, list):
        return len(value) <= CONFIG_LIST_MAX and all(isinstance(v, _SCALARS) for v in value)
    return isinstance(value, _SCALARS)


def parse_config(raw) -> dict | None:
    """``raw``: a JSON object, or its text (a multipart form field); None or "" when none was given."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise _bad_config('not valid JSON; send a JSON object such as {"lr": 1e-6}') from None
    if not isinstance(raw, dict):
        raise _bad_config("a JSON object of parameter names to values")
    if len(raw) > CONFIG_MAX_KEYS:
        raise _bad_config(f"at most {CONFIG_MAX_KEYS} keys ({len(raw)} given)")
    bad = [k for k, v in raw.items() if not _config_value_ok(v)]
    if bad:
        raise _bad_config(
            f"each value a string, number, boolean, null or a list of at most {CONFIG_LIST_MAX} of those "
            f"(not: {', '.join(sorted(bad)[:5])})"
        )
    if has_nul(raw):
        raise _bad_config("no U+0000 characters")
    try:
        size = len(json.dumps(raw, allow_nan=False).encode())
    except ValueError:
        raise _bad_config("no NaN or infinite numbers (they are not JSON)") from None
    if size > CONFIG_MAX_BYTES:
        raise _bad_config(f"at most {CONFIG_MAX_BYTES // 1024} KiB as JSON ({size} bytes given)")
    return raw


def parse_tags(raw) -> list[str] | None:
    """``raw``: a list of strings, its JSON text, or comma-separated text; None or "" when none was given.
    Duplicates are dropped (first one kept)."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except ValueError:
                raise _bad_tags("not valid JSON; send a JSON list of strings or comma-separated text") from None
        else:
            raw = [t.strip() for t in text.split(",") if t.strip()]
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise _bad_tags("a list of strings (a JSON list, or comma-separated text)")
    tags = list(dict.fromkeys(raw))
    if len(tags) > TAGS_MAX:
        raise _bad_tags(f"at most {TAGS_MAX} tags ({len(tags)} given)")
    if not all(0 < len(t) <= TAG_MAX_CHARS and not has_nul(t) for t in tags):
        raise _bad_tags(f"each tag 1 to {TAG_MAX_CHARS} characters, no U+0000")
    return tags


def merged_tags(current: list, more: list) -> list:
    """``current`` then those of ``more`` not already there, in order."""
    return list(dict.fromkeys([*current, *more]))


def apply_to_run(run, uploads) -> None:
    """Merge the config and tags of ``uploads`` (in order: later keys win) into ``run``, under a row lock so two
    uploads joining the same run at once both land. Idempotent: applying the same upload twice changes nothing."""
    from audit_portal.runs.models import Run

    given = [u for u in uploads if u.config or u.tags]
    if not given:
        return
    locked = Run.objects.select_for_update().get(pk=run.pk)
    config, tags = dict(locked.config or {}), list(locked.tags or [])
    for upload in given:
        config.update(upload.config or {})
        tags = merged_tags(tags, upload.tags or [])
    if config != locked.config or tags != locked.tags:
        Run.objects.filter(pk=run.pk).update(config=config, tags=tags)
        run.config, run.tags = config, tags
