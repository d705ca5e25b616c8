"""Rendering helpers for contract specs (nested YAML data) and verdict cells."""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape, format_html, format_html_join
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
        return format_html('<span class="prose">{}</span>', names_as_code(text))
    return format_html('<span class="mono">{}</span>', text)


# a name a reader types or looks up as written (a generator, a policy, a backend's setting, a subscripted symbol):
# snake_case or UPPER_CASE tokens inside contract prose
_NAME = re.compile(r"\b(?:[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]*[A-Za-z0-9]|[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9])\b")


@register.filter
def names_as_code(text) -> str:
    """Contract prose with its names (``log_uniform``, ``IEEE_PROPAGATE``, ``allow_hf32``, ``a_i``) set as code, the
    rest escaped: the contract files are data, and a name reads as a name, not as a word of the sentence."""
    text = str(text or "")
    out, last = [], 0
    for m in _NAME.finditer(text):
        out.append(escape(text[last : m.start()]))
        out.append(format_html("<code>{}</code>", m.group(0)))
        last = m.end()
    out.append(escape(text[last:]))
    return mark_safe("".join(out))


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
