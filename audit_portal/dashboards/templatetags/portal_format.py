"""Number formatting for the portal's tables: one way to show a cell, whatever page it is on."""

from __future__ import annotations

import json
import re

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from workers.certify.verdict import LABELS

register = template.Library()


@register.filter
def percent(value, digits: int = 1) -> str:
    """0.8123 → "81.2%"; None → "—"."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter
def cell(row, column) -> str:
    """The value of ``column`` (a dashboards.tables.Column) in ``row``, formatted for the table."""
    if column.key.startswith("params."):  # a top-level config key (dashboards.tables.param_column)
        config = getattr(row, "config", None) or {}
        if column.key[7:] not in config:
            return "—"
        value = config[column.key[7:]]
        return value if isinstance(value, str) else json.dumps(value)
    value = getattr(row, column.key, None)
    if column.key == "tags":
        return format_html_join(" ", '<span class="badge" data-tag="{}">{}</span>', ((t, t) for t in value or []))
    if value is None or value == "":
        return "—"
    if column.key == "duration":
        return duration(value)
    if column.percent:
        return percent(value)
    if column.key == "verdict":  # the code's plain label, in a badge coloured by the code (runs.html)
        return format_html(
            '<span class="badge verdict-{}" title="{}">{}</span>',
            value,
            (getattr(row, "verdict_detail", None) or {}).get("sentence", ""),
            LABELS.get(value, value),
        )
    if column.key == "created":
        return timezone.localtime(value).strftime("%Y-%m-%d %H:%M")
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def duration(value) -> str:
    """A timedelta as 45 s, 12 min 5 s, 3 h 04 min or 2 d 5 h."""
    seconds = max(0, int(value.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if hasattr(mapping, "get") else None


# Section references in engine text: "(docs/intervals.md#kl-bounds)" now, "(spec §5.3)" in messages stored before the
# mathematics moved into docs/ — both are for readers of the JSON, not of a page.
_SPEC_REFERENCE = re.compile(
    r"\s*\((?:see )?spec(?:/[\w.]+)? ?§[\d.]+(?:, ?§[\d.]+)*\)|\s*spec(?:/[\w.]+)? ?§[\d.]+"
    r"|\s*\(docs/[\w./-]+\.md(?:#[\w-]+)?(?:, ?docs/[\w./-]+\.md(?:#[\w-]+)?)*\)"
)


# engine options named in caveats, in words
_ENGINE_WORDS = [
    (
        "; pass caps=False if it is not.",
        "; if it is not, certify again with that assumption switched off (the certify option caps).",
    ),
    ("pass caps=False if it is not", "if it is not, certify again with that assumption switched off"),
    ("rollout.top_k", "the rollout's top-K"),
    ("trainer.top_k", "the trainer's top-K"),
    (
        "delta_hat is null and every KL-based bound (classical_kl, pm_*, mix_kl, adap_kl, adap_star) is absent",
        "δ̂ is unbounded and every KL-based bound (classical, Pinsker-marginal, mixed and adaptive, with KL) is absent",
    ),
    ("delta_hat is null", "δ̂ is unbounded"),
    ("eps_hat", "ε̂"),
    ("delta_hat", "δ̂"),
]


# a sequence's status as the glossary names it (#statuses); the API keeps the engine's codes
SEQUENCE_STATUS_WORDS = {"CERT_IN": "IN", "CERT_OUT": "OUT"}


@register.filter
def seq_status(code) -> str:
    return SEQUENCE_STATUS_WORDS.get(str(code or ""), str(code or ""))


@register.filter
def plain(text) -> str:
    """Engine text for people: references to documentation sections are dropped (the glossary explains the
    terms)."""
    text = _SPEC_REFERENCE.sub("", str(text or ""))
    for internal, words in _ENGINE_WORDS:
        text = text.replace(internal, words)
    return text


# What each of a kernel contract's eight parts states, in one line (shown above the part's details).
CONTRACT_PART_HELP = {
    "identifier": "Which operation this is and which version of the contract.",
    "scope": "The inputs, shapes, dtypes and devices the contract covers; anything else is out of scope.",
    "precondition": "What must hold of the inputs before the kernel is called.",
    "postcondition": "What the kernel's output must satisfy for the contract to be met.",
    "tolerance": "How far the output may be from the reference, and how that bound was derived.",
    "reference_oracle": "The trusted computation the output is compared against (never shown to the kernel).",
    "measurement_protocol": "How inputs are generated and the comparison is run: cases, seeds, repetitions.",
    "violation_signature": "What a failure looks like, so a FAIL can be told from noise.",
}


@register.filter
def part_help(key: str) -> str:
    return CONTRACT_PART_HELP.get(key, "")
