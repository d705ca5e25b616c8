"""Server-side tables for the portal's pages: the project's runs table (one row per run, its latest certificate's
numbers and its latest fidelity audit's coverage; sortable, filterable by ranges, searchable, paginated, exportable)
and the sequences of a certificate (the API's filters, paginated, exportable).

Query parameters are checked here: a value that is not what its column takes is a :class:`TableInputError` naming
the parameter, the value and what it takes; the pages show it (status 400) and exports answer it as JSON.
Exports stream (CSV or a JSON array) row by row from a server-side cursor, so memory stays flat however many rows.
"""

from __future__ import annotations

import csv
import io
import math
import re
from datetime import timedelta
from dataclasses import dataclass

import orjson
from django.db.models import (
    BigIntegerField,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    IntegerField,
    OuterRef,
    Subquery,
)
from django.db.models.fields.json import KeyTransform
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce
from django.http import StreamingHttpResponse

from audit_portal.certificates.models import RunCertificate, StepAggregate
from audit_portal.dashboards import search
from audit_portal.fidelity.models import FidelityReport
from audit_portal.live.models import LiveRun
from workers.certify.verdict import LABELS


class TableInputError(ValueError):
    """A query parameter a table cannot take; the message names it."""


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    numeric: bool = True
    glossary: str = ""  # anchor on the glossary page
    help: str = ""  # one line, shown as the header's title and in the glossary
    percent: bool = False


RUN_COLUMNS = [
    Column("name", "Run", numeric=False, help="the run's name (the run_id of its records)"),
    Column(
        "verdict",
        "Verdict",
        numeric=False,
        glossary="verdict",
        help="whether the latest certificate proves the run within its error budget, and if not, why",
    ),
    Column(
        "eps_hat",
        "ε̂ max token TV",
        glossary="eps-hat",
        help="the largest certified per-token total-variation distance between rollout and trainer; lower is better",
    ),
    Column(
        "delta_hat",
        "δ̂ max token KL",
        glossary="delta-hat",
        help="the largest per-token KL divergence, when both distributions were logged; lower is better",
    ),
    Column(
        "acceptance",
        "Acceptance",
        glossary="acceptance",
        percent=True,
        help="share of sequences whose every token is certified inside the threshold; higher is better",
    ),
    Column(
        "best_bound",
        "Best bound B*",
        glossary="best-bound",
        help="the tightest of the surrogate-error bounds at the reference length; lower is better",
    ),
    Column(
        "coverage",
        "Coverage",
        glossary="coverage",
        percent=True,
        help="share of policy tokens the fidelity audit could verify; higher is better",
    ),
    Column("tokens", "Tokens", help="tokens certified"),
    Column("steps", "Steps", help="training steps in the log"),
    Column(
        "status",
        "Status",
        numeric=False,
        help="what the trainer client declared: running, finished or failed (blank: a plain upload)",
    ),
    Column(
        "duration",
        "Duration",
        numeric=False,
        help="time from the run's creation to its last update (the client's last state change or segment)",
    ),
    Column("tags", "Tags", numeric=False, help="labels the upload or the trainer client gave the run"),
    Column("created", "Created", numeric=False, help="when the run first appeared"),
]
RUN_COLUMN_KEYS = [c.key for c in RUN_COLUMNS]
SORT_KEYS = [k for k in RUN_COLUMN_KEYS if k != "tags"]
EXPORT_RUN_COLUMNS = ["id", "certificate_id", *RUN_COLUMN_KEYS, "config", "verdict_sentence"]
# shown when the query string names no ``cols`` (the column picker; status, duration and params.* are opt-in)
DEFAULT_VISIBLE = [
    "name",
    "verdict",
    "eps_hat",
    "delta_hat",
    "acceptance",
    "best_bound",
    "coverage",
    "tokens",
    "steps",
    "tags",
    "created",
]
PARAM_KEY = re.compile(
    r"^[A-Za-z0-9_\-.]{1,64}$"
)  # config keys (flattened: dotted) offered as ``params.<key>`` columns, sort keys
MAX_PARAM_COLUMNS = 40
VERDICTS = list(LABELS)
RANGE_COLUMNS = [c for c in RUN_COLUMNS if c.numeric]
DEFAULT_RUN_SORT = "-created"


def runs_table(runs_qs):
    """``runs_qs`` (already scoped to what the caller may read) with each run's latest complete certificate and
    latest complete fidelity report, as the columns' keys."""
    latest = RunCertificate.objects.filter(run=OuterRef("pk"), state=RunCertificate.State.COMPLETE).order_by(
        "-created_at", "-id"
    )
    cert = lambda field: Subquery(latest.values(field)[:1])  # one subquery per column
    report = FidelityReport.objects.filter(run=OuterRef("pk"), state="complete").order_by("-created_at", "-id")
    steps = (
        StepAggregate.objects.filter(certificate=OuterRef("certificate_id"))
        .order_by()
        .values("certificate")
        .annotate(n=Count("id"))
        .values("n")
    )
    # A run streamed by a trainer client (its segments merged into a live view) is certified as that view: the
    # latest upload's certificate would be its last segment only (docs/client.md#background-upload-spool-retries)
    views = LiveRun.objects.filter(run=OuterRef("pk"))
    live = lambda path, field: Subquery(views.annotate(v=Cast(KT(f"certificate__{path}"), field)).values("v")[:1])
    return (
        runs_qs.select_related(None)
        .annotate(
            certificate_id=cert("pk"),
            verdict=Coalesce(Subquery(views.exclude(verdict="").values("verdict")[:1]), cert("verdict")),
            verdict_detail=Coalesce(
                Subquery(views.exclude(verdict="").values("verdict_detail")[:1]), cert("verdict_detail")
            ),
            verdict_sentence=Coalesce(
                Subquery(views.exclude(verdict="").values("verdict_detail__sentence")[:1]),
                Subquery(latest.values("verdict_detail__sentence")[:1]),
            ),
            eps_hat=Coalesce(live("summary__eps_hat", FloatField()), cert("eps_hat")),
            delta_hat=Coalesce(live("summary__delta_hat", FloatField()), cert("delta_hat")),
            acceptance=Coalesce(live("summary__acceptance_rate", FloatField()), cert("acceptance_rate")),
            best_bound=Coalesce(live("bounds__best", FloatField()), cert("best_bound")),
            tokens=Coalesce(live("summary__tokens", BigIntegerField()), cert("tokens")),
            coverage=Subquery(report.values("verifiable_fraction")[:1]),
            created=F("created_at"),
            status=F("state"),
            duration=ExpressionWrapper(F("updated_at") - F("created_at"), output_field=DurationField()),
        )
        .annotate(
            steps=Coalesce(
                Subquery(
                    views.annotate(
                        v=Func(F("steps"), function="jsonb_array_length", output_field=IntegerField())
                    ).values("v")[:1]
                ),
                Subquery(steps[:1]),
            )
        )
    )


def _number(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise TableInputError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise TableInputError(f"{name} must be a finite number, got {raw!r}")
    return value


def filter_runs(qs, params) -> tuple[object, dict]:
    """Apply ``q`` (the search language of dashboards/search.py; plain text: name contains), ``min_<col>`` / ``max_<col>`` (inclusive ranges; percentages as fractions or
    as ``12%``) and ``sort`` (a column key, ``-`` for descending; missing values last). Returns the queryset and
    the filters as applied (for the form)."""
    applied: dict = {"q": (params.get("q") or "").strip()}
    try:
        qs = search.apply(qs, applied["q"])
    except search.SearchError as exc:
        raise TableInputError(str(exc)) from None
    verdict = (params.get("verdict") or "").strip()
    if verdict:
        if verdict not in VERDICTS:
            raise TableInputError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
        applied["verdict"] = verdict
        qs = qs.filter(verdict=verdict)
    for col in RANGE_COLUMNS:
        for side, lookup in (("min", "gte"), ("max", "lte")):
            name = f"{side}_{col.key}"
            raw = (params.get(name) or "").strip()
            if not raw:
                continue
            value = _number(name, raw[:-1]) / 100 if raw.endswith("%") else _number(name, raw)
            applied[name] = raw
            qs = qs.filter(**{f"{col.key}__{lookup}": value})
    sort = (params.get("sort") or DEFAULT_RUN_SORT).strip()
    key = sort.lstrip("-")
    if key.startswith("params.") and PARAM_KEY.match(key[7:]):
        expr = KeyTransform(key[7:], "config")
    elif key in SORT_KEYS:
        expr = F(key)
    else:
        raise TableInputError(
            f"sort must be one of {', '.join(SORT_KEYS)} or params.<config key> (with - for descending), got {sort!r}"
        )
    order = expr.desc(nulls_last=True) if sort.startswith("-") else expr.asc(nulls_last=True)
    applied["sort"] = sort
    return qs.order_by(order, "-id"), applied


def param_keys(rows) -> list[str]:
    """The top-level config keys seen on ``rows`` (the page's runs), sorted; keys that could not be a column
    (odd characters, too long) are left out."""
    keys = {k for r in rows for k in (getattr(r, "config", None) or {}) if isinstance(k, str) and PARAM_KEY.match(k)}
    return sorted(keys)[:MAX_PARAM_COLUMNS]


def param_column(key: str) -> Column:
    return Column(f"params.{key}", f"params.{key}", numeric=False, help=f"the run's config value {key!r}")


def visible_columns(params, param_cols: list[Column]) -> list[Column]:
    """The columns the picker chose (``cols``, repeated or comma-separated), in the table's order; unknown keys are
    refused by name. ``name`` always shows (it links the run)."""
    raw = (
        [c.strip() for v in params.getlist("cols") for c in v.split(",") if c.strip()]
        if hasattr(params, "getlist")
        else []
    )
    every = [*RUN_COLUMNS, *param_cols]
    if not raw:
        return [c for c in every if c.key in DEFAULT_VISIBLE]
    known = {c.key for c in every}
    for key in raw:
        if key not in known and not (key.startswith("params.") and PARAM_KEY.match(key[7:])):
            raise TableInputError(
                f"cols: no column {key!r}; the columns are {', '.join(RUN_COLUMN_KEYS)} and params.<config key>"
            )
    return [c for c in every if c.key in raw or c.key == "name"]


def export_rows(rows, columns: list[str], fmt: str, filename: str) -> StreamingHttpResponse:
    """Stream ``rows`` (dicts or objects with the ``columns`` as keys/attributes) as CSV or a JSON array."""

    def value(row, key):
        v = row.get(key) if isinstance(row, dict) else getattr(row, key, None)
        if isinstance(v, timedelta):
            return v.total_seconds()
        if fmt == "csv" and isinstance(v, (list, dict)):
            return orjson.dumps(v).decode()
        return v.isoformat() if hasattr(v, "isoformat") else v

    if fmt == "csv":

        def lines():
            buf = io.StringIO()
            writer = csv.writer(buf)
            writer.writerow(columns)
            for row in rows:
                writer.writerow(["" if value(row, k) is None else value(row, k) for k in columns])
                if buf.tell() > 64 * 1024:
                    yield buf.getvalue()
                    buf.seek(0)
                    buf.truncate()
            yield buf.getvalue()

        response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    elif fmt == "json":

        def chunks():
            yield b"["
            first = True
            for row in rows:
                yield (b"" if first else b",\n") + orjson.dumps({k: value(row, k) for k in columns})
                first = False
            yield b"]\n"

        response = StreamingHttpResponse(chunks(), content_type="application/json")
    else:
        raise TableInputError(f"format must be csv or json, got {fmt!r}")
    response["Content-Disposition"] = f'attachment; filename="{filename}.{fmt}"'
    return response


# --------------------------------------------------------------------------------------------- sequences
SEQUENCE_STATUSES = ["CERT_IN", "CERT_OUT", "UNDETERMINED", "HEURISTIC", "DATA_ERROR"]
SEQUENCE_COLUMNS = [
    "line",
    "call_id",
    "trajectory_id",
    "step",
    "length",
    "status",
    "accept",
    "eps_hat",
    "delta_hat",
    "a_y",
    "reason",
]


def sequence_filters(params) -> dict:
    """The API's sequence filters (``status``, ``step``, ``accepted``), checked the same way: the page's query
    string is the API's, so its "the same rows through the API" link returns the same rows."""
    out: dict = {}
    status = (params.get("status") or "").strip()
    if status:
        if status not in SEQUENCE_STATUSES:
            raise TableInputError(f"status must be one of {', '.join(SEQUENCE_STATUSES)}, got {status!r}")
        out["status"] = status
    step = (params.get("step") or "").strip()
    if step:
        if not step.lstrip("-").isdigit():
            raise TableInputError(f"step must be an integer, got {step!r}")
        out["step"] = int(step)
    accepted = (params.get("accepted") or "").strip()
    if accepted:
        if accepted not in ("true", "false"):
            raise TableInputError(f"accepted must be true or false, got {accepted!r}")
        out["accepted"] = accepted == "true"
    return out
