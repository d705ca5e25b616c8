"""Run config and tags, checked in one place whether they come with a client's run start (``Run(config=…, tags=…)``),
with an upload (a form field of the single-request upload, a JSON field of a resumable upload's session) or in the
log itself (its records' ``run_config`` / ``run_tags``, docs/fcr.md#run-parameters). An upload's are checked before
anything is stored (a 400 naming the field) and kept on the upload; a log's are checked by the same functions when its
validation summary is recorded (an error naming the record: :func:`checked_log_params`). When the upload turns valid
and joins its run (services.record_validation), the run's config is updated with the log's keys and then the
upload's (the upload's fields win over its log), and its tags gain the log's and then the upload's, in order, without
duplicates. Registered with runs/extras.py as check-only fields, so the
multipart view refuses a bad one with the other extra fields; the values go to ``receive_upload``, which stores them
with the upload row (before its validation job can run)."""

from __future__ import annotations

import json

from audit_portal.core.errors import PortalError

CONFIG_MAX_KEYS = 256
CONFIG_MAX_BYTES = 64 * 1024
CONFIG_LIST_MAX = 64  # a value may be a short list of scalars (e.g. layer sizes)
CONFIG_MAX_DEPTH = 8  # nested sections (a Hydra or W&B config) are flattened to dotted keys, this deep at most
TAGS_MAX = 32
TAG_MAX_CHARS = 64

_SCALARS = (str, int, float, bool, type(None))


def _refusal(field: str, origin: str, why: str) -> PortalError:
    # origin: "run" (a client's run start), "upload" (a field of an upload) or "log" (a run log's records); the code
    # says which request was refused
    return PortalError(f"{field}: {why}", code=f"invalid_{origin}_{field}", extra={"field": field})


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


def _flattened(config: dict, origin: str, prefix: str = "", depth: int = 0) -> dict:
    """``{"optim": {"lr": 1e-6}}`` as ``{"optim.lr": 1e-6}``: the runs table, its search language and the params
    diff compare flat parameters, as MLflow's params are."""
    if depth > CONFIG_MAX_DEPTH:
        raise _refusal("config", origin, f"sections nested at most {CONFIG_MAX_DEPTH} deep")
    flat: dict = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        more = _flattened(value, origin, f"{name}.", depth + 1) if isinstance(value, dict) else {name: value}
        for k, v in more.items():
            if k in flat:
                raise _refusal("config", origin, f"the key {k!r} is given twice (once as a dotted key)")
            flat[k] = v
    return flat


def parse_config(raw, *, origin: str = "upload") -> dict | None:
    """A run's parameters: a JSON object (or its text, as a multipart form field sends it) of names to scalars or
    short lists of scalars, nested sections flattened to dotted keys; None when none was given. The one check for
    a client's run start and an upload alike (``origin`` names the request in the error code)."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str) and origin == "upload":  # a multipart form field carries the JSON as text
        if len(raw) > 4 * CONFIG_MAX_BYTES:
            raise _refusal("config", origin, f"at most {CONFIG_MAX_BYTES // 1024} KiB as JSON")
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            raise _refusal("config", origin, 'not valid JSON; send a JSON object such as {"lr": 1e-6}') from None
    if not isinstance(raw, dict):
        raise _refusal("config", origin, "a JSON object of parameter names to values")
    config = _flattened(raw, origin)
    if len(config) > CONFIG_MAX_KEYS:
        raise _refusal("config", origin, f"at most {CONFIG_MAX_KEYS} keys ({len(config)} given)")
    bad = [k for k, v in config.items() if not _config_value_ok(v)]
    if bad:
        raise _refusal(
            "config",
            origin,
            f"each value a string, number, boolean, null or a list of at most {CONFIG_LIST_MAX} of those "
            f"(not: {', '.join(sorted(bad)[:5])})",
        )
    if has_nul(config):
        raise _refusal("config", origin, "no U+0000 characters")
    try:
        size = len(json.dumps(config, allow_nan=False).encode())
    except ValueError:
        raise _refusal("config", origin, "no NaN or infinite numbers (they are not JSON)") from None
    if size > CONFIG_MAX_BYTES:
        raise _refusal("config", origin, f"at most {CONFIG_MAX_BYTES // 1024} KiB as JSON ({size} bytes given)")
    return config


def parse_tags(raw, *, origin: str = "upload") -> list[str] | None:
    """``raw``: a list of strings, its JSON text, or comma-separated text; None or "" when none was given.
    Duplicates are dropped (first one kept). The one check for a client's run start and an upload alike."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str) and origin == "upload":  # a multipart form field: JSON or comma-separated text
        text = raw.strip()
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except (ValueError, RecursionError):
                raise _refusal(
                    "tags", origin, "not valid JSON; send a JSON list of strings or comma-separated text"
                ) from None
        else:
            raw = [t.strip() for t in text.split(",") if t.strip()]
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise _refusal("tags", origin, "a list of strings (a JSON list, or comma-separated text)")
    tags = list(dict.fromkeys(raw))
    if len(tags) > TAGS_MAX:
        raise _refusal("tags", origin, f"at most {TAGS_MAX} tags ({len(tags)} given)")
    if not all(0 < len(t) <= TAG_MAX_CHARS and not has_nul(t) for t in tags):
        raise _refusal("tags", origin, f"each tag 1 to {TAG_MAX_CHARS} characters, no U+0000")
    return tags


def merged_tags(current: list, more: list) -> list:
    """``current`` then those of ``more`` not already there, in order."""
    return list(dict.fromkeys([*current, *more]))


_LOG_FIELDS = (("run_config", parse_config), ("run_tags", parse_tags))


def checked_log_params(summary: dict) -> dict:
    """The validator's summary with the run parameters its log declared (``run_params``: per run, the first
    ``run_config`` / ``run_tags`` and the record that gave it; docs/fcr.md#run-parameters) checked as an upload's
    fields are. Each bad one becomes an error naming that record, so the upload is invalid and joins no run."""
    found = []
    for fields in (summary.get("run_params") or {}).values():
        for field, parse in _LOG_FIELDS:
            first = fields.get(field)
            if first is None:
                continue
            try:
                parse(first["value"], origin="log")
            except PortalError as exc:
                reason = str(exc.detail).split(": ", 1)[-1]
                found.append(
                    {
                        "line": first["line"],
                        "call_id": first["call_id"],
                        "field": field,
                        "reason": reason,
                        "severity": "error",
                    }
                )
    if not found:
        return summary
    errors = sorted([*summary.get("errors", []), *found], key=lambda e: e.get("line") or 0)
    return {**summary, "valid": False, "errors": errors, "error_count": int(summary.get("error_count", 0)) + len(found)}


def log_params_of(summary: dict, run_name: str) -> tuple[dict, list]:
    """The config (flattened, as an upload's) and tags the log declared for the run ``run_name``; empty when none.
    Call on a summary :func:`checked_log_params` found no error in."""
    fields = (summary.get("run_params") or {}).get(run_name) or {}
    config = parse_config((fields.get("run_config") or {}).get("value"), origin="log")
    return config or {}, parse_tags((fields.get("run_tags") or {}).get("value"), origin="log") or []


def apply_to_run(run, uploads, *, log_config: dict | None = None, log_tags: list | None = None) -> None:
    """Merge into ``run`` the config and tags its log declared (``log_*``), then those of ``uploads`` (in order):
    later keys win, so an upload's own fields override its log's. Under a row lock so two uploads joining the same
    run at once both land. Idempotent: applying the same upload twice changes nothing."""
    from audit_portal.runs.models import Run

    given = [u for u in uploads if u.config or u.tags]
    if not given and not log_config and not log_tags:
        return
    locked = Run.objects.select_for_update().get(pk=run.pk)
    config = {**(locked.config or {}), **(log_config or {})}
    tags = merged_tags(list(locked.tags or []), log_tags or [])
    for upload in given:
        config.update(upload.config or {})
        tags = merged_tags(tags, upload.tags or [])
    if config != locked.config or tags != locked.tags:
        Run.objects.filter(pk=run.pk).update(config=config, tags=tags)
        run.config, run.tags = config, tags
