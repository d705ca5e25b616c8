"""Number formatting for the portal's tables: one way to show a cell, whatever page it is on."""
from __future__ import annotations

import re

from django import template
from django.utils import timezone

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
    value = getattr(row, column.key, None)
    if value is None:
        return "—"
    if column.percent:
        return percent(value)
    if column.key == "created":
        return timezone.localtime(value).strftime("%Y-%m-%d %H:%M")
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if hasattr(mapping, "get") else None


_SPEC_REFERENCE = re.compile(r"\s*\((?:see )?spec(?:/[\w.]+)? ?§[\d.]+(?:, ?§[\d.]+)*\)|\s*spec(?:/[\w.]+)? ?§[\d.]+")


@register.filter
def plain(text) -> str:
    """Engine text for people: references to sections of a specification outside the portal are dropped (the
    glossary and docs/ explain the terms)."""
    return _SPEC_REFERENCE.sub("", str(text or ""))
