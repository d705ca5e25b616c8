from django import template

register = template.Library()


@register.filter
def pct(value, digits=1):
    """0.8571 → "85.7%"; None → "—" (a fraction with an empty denominator is not 0%)."""
    if value is None or value == "":
        return "—"
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter
def num(value, digits=4):
    """Compact number: ints with separators, floats to ``digits`` significant figures; None → "—"."""
    if value is None or value == "":
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{float(value):.{int(digits)}g}"


@register.filter
def get(mapping, key):
    return mapping.get(key) if hasattr(mapping, "get") else None
