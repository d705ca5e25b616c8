"""Rendering helpers for contract specs (nested YAML data) and verdict cells."""

from __future__ import annotations

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

register = template.Library()

MAX_DEPTH = 6


@register.filter
def spec_value(value, depth: int = 0):
    """Nested mappings as definition lists, lists as inline chips or bullet lists, scalars as code-ish text.
    Everything is escaped (contract text is data)."""
    if depth > MAX_DEPTH:
        return format_html('<span class="mono">{}</span>', str(value))
    if isinstance(value, dict):
        if not value:
            return mark_safe('<span class="muted">—</span>')
        items = format_html_join(
            "", "<dt>{}</dt><dd>{}</dd>", ((k.replace("_", " "), spec_value(v, depth + 1)) for k, v in value.items())
        )
        return format_html('<dl class="kv spec">{}</dl>', items)
    if isinstance(value, list):
        if not value:
            return mark_safe('<span class="muted">—</span>')
        if all(not isinstance(v, (dict, list)) and len(str(v)) <= 40 for v in value):
            return format_html_join(" ", '<span class="chip mono">{}</span>', ((str(v),) for v in value))
        return format_html(
            '<ul class="spec">{}</ul>',
            format_html_join("", "<li>{}</li>", ((spec_value(v, depth + 1),) for v in value)),
        )
    if value is None:
        return mark_safe('<span class="muted">—</span>')
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if len(text) > 80:
        return format_html('<span class="prose">{}</span>', text)
    return format_html('<span class="mono">{}</span>', text)


@register.filter
def point_text(p) -> str:
    """A measured point ``{M: 32, K: 2949}`` as "M = 32, K = 2,949" (a failing clause's point, a sweep point)."""
    if not isinstance(p, dict):
        return str(p)
    return ", ".join(
        f"{k} = {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{k} = {v}" for k, v in p.items()
    )


@register.filter
def margin_text(verdict):
    return verdict.margin_text if verdict is not None else ""


@register.filter
def percent(value):
    if value is None:
        return "—"
    return f"{100 * float(value):.0f}%"


@register.filter
def get_item(mapping, key):
    return (mapping or {}).get(key)


@register.filter
def short_impl(ref):
    return str(ref or "").rpartition(":")[2]


@register.filter
def sig(value, digits: int = 3):
    """A number to ``digits`` significant figures; None (a non-finite value in JSON) as ∞."""
    if value is None:
        return "∞"
    if isinstance(value, str):
        return value
    try:
        return f"{float(value):.{int(digits)}g}"
    except (TypeError, ValueError):
        return str(value)
