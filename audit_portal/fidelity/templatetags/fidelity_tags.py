from django import template

from audit_portal.fidelity.reasons import reason_sentence

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


# What each audit rule checks, in a few words (docs/fidelity.md has the full rules).
RULE_NAMES = {
    "R0": "the record is well formed",
    "R1": "a policy call, not a background one",
    "R2": "response ids are the engine's own",
    "R3": "prompt ids are verified",
    "R4": "text matches the token ids",
    "R5": "the prompt is the original",
    "R6": "rollout log-probs present and finite",
    "R7": "log-probs' meaning declared, top-K consistent",
    "R8": "trainer log-probs aligned and current",
    "R9": "each turn extends the previous one",
}


@register.filter
def rule_name(rule: str) -> str:
    return RULE_NAMES.get(rule, "")


@register.filter
def reason_text(code) -> str:
    """An exclusion reason code in one plain sentence (audit_portal/fidelity/reasons.py)."""
    return reason_sentence(code)
