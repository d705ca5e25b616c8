"""A kernel contract's eight parts as a readable document: one labelled line per field, in words, with units and
links to the glossary, instead of the contract file's nested keys.

Everything read from the contract is data and is escaped (``format_html``). A field this module does not know is not
dropped: it is listed under "Other fields" with the generic nested rendering, so a newer contract file still shows
everything it says.
"""

from __future__ import annotations

from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from audit_portal.kernels.templatetags.kernels_tags import point_text, spec_value

GLOSSARY = "/glossary/#"

FAMILY_WORDS = {
    "precision": "the numeric precision the kernel declares (operand and accumulator types, subnormals) is the one it "
    "computes in",
    "ordering": "results depend on the order of a reduction only within a derived bound, or not at all where the "
    "contract asks for bitwise determinism",
    "compiler": "fused, autotuned or shape-specialised variants stay within the bound of the plain operation",
    "exceptional": "NaN, ±Inf and out-of-bounds inputs are handled by the declared policy",
}
TOLERANCE_LEVELS = {
    "T0": "bit-exact, or an exact policy",
    "T1": "an absolute bound",
    "T2": "a bound derived from rounding-error analysis",
    "T3": "a bound that depends on the conditioning of the input",
    "T4": "the functional smoke check benchmarks use",
}
# What each statistic a contract bounds measures, with its unit (the protocols in workers/contracts/protocols/).
STATISTICS = {
    "rho": "largest error of one output entry against fp64, in units of u·‖aᵢ∘bⱼ‖₂ (the unit roundoff times the "
    "size of that dot product's terms)",
    "e": "error of a row's sum or mean against fp64, in units of u·mean|x| (the unit roundoff times the row's mean "
    "magnitude)",
    "rel_err": "largest relative error against the fp64 reference (a fraction of the reference's magnitude, no unit)",
    "err": "largest absolute error against the fp64 reference, in the output's own units",
    "mismatch": "number of output values that differ from the reference bit for bit",
    "mismatch_rows": "number of rows that differ bit for bit from the implementation's own one-row result",
    "distinct_extra": "number of distinct bit patterns beyond the first over repeated identical launches",
    "raise_deficit": "number of out-of-bounds probes that did not raise",
}
POSTCONDITION_KINDS = {
    "bound": "a measured error statistic must stay within the tolerance",
    "bitwise": "repeated runs must give the same bits",
    "policy": "the declared policy must be followed exactly",
    "invariance": "the output must not change when the input is split or batched differently",
    "equivariance": "the output must change exactly as the input was transformed",
}
ORACLE_KINDS = {
    "higher_precision": "the same computation in higher precision",
    "exact": "the exactly rounded result",
    "policy_table": "the declared policy, case by case",
    "alt_impl": "another evaluation by the implementation itself",
    "algebraic_identity": "an identity the outputs must satisfy",
}
VALUE_DOMAINS = {
    "finite": "finite values only (no NaN or ±Inf)",
    "finite_normal": "finite, normal values (no NaN, ±Inf or subnormals)",
    "any": "any value, NaN and ±Inf included",
}
HARNESS_INVARIANTS = {
    "fresh_poisoned_outputs": "outputs go into freshly poisoned memory, so an unwritten entry is caught",
    "candidate_first": "the candidate runs before the reference",
    "input_hash_check": "inputs are hashed before and after: the kernel may not modify them",
    "input_sensitivity": "a changed input must change the output",
    "sync_all_streams": "every device stream is synchronised before results are read",
    "replay_twice": "every case runs twice and must give the same result",
    "hidden_seeds": "hidden seeds the submitter never sees",
    "separate_process": "the candidate runs in its own sandboxed process",
}


def _mono(value):
    return format_html('<span class="mono">{}</span>', str(value))


def _glossary(anchor: str, text: str):
    return format_html('<a href="{}{}">{}</a>', GLOSSARY, anchor, text)


def _words(value, table: dict):
    """``value`` in words from ``table``, with the contract's own term beside it; unknown values as written."""
    words = table.get(str(value))
    return format_html("{} ({})", words, _mono(value)) if words else _mono(value)


def _chips(values):
    if not isinstance(values, list):
        return spec_value(values)
    return format_html_join(" ", '<span class="chip mono">{}</span>', ((str(v),) for v in values))


def _unit_roundoff(text):
    """``2**-24`` → "u = 2**-24 ≈ 5.96e-08"; anything that is not a power of two as written."""
    try:
        base, _, exp = str(text).partition("**")
        value = float(base) ** float(exp) if exp else float(base)
    except ValueError:
        return _mono(text)
    return format_html('{} <span class="muted">≈ {}</span>', _mono(f"u = {text}"), f"{value:.3g}")


def _range(r):
    if isinstance(r, list) and len(r) == 2:
        lo, hi = r
        fmt = (
            lambda v: f"{v:,}"
            if isinstance(v, int) and not isinstance(v, bool)
            else f"{v:g}"
            if isinstance(v, float)
            else str(v)
        )  # 1e+15, not 1000000000000000.0
        return f"{fmt(lo)} to {fmt(hi)}"
    return None


def _dtypes(d):
    if not isinstance(d, dict):
        return spec_value(d)
    bits = []
    if d.get("inputs"):
        bits.append(
            format_html(
                "inputs {}", ", ".join(map(str, d["inputs"])) if isinstance(d["inputs"], list) else str(d["inputs"])
            )
        )
    bits.append(
        format_html("accumulates in {}", d["accumulate"]) if d.get("accumulate") else mark_safe("no accumulation")
    )
    if d.get("output"):
        bits.append(format_html("output {}", d["output"]))
    return format_html_join("; ", "{}", ((b,) for b in bits))


def _shapes(s):
    if not isinstance(s, dict):
        return spec_value(s)
    dims = s.get("dims") if isinstance(s.get("dims"), dict) else {}
    parts = [format_html("rank {}", s["rank"])] if s.get("rank") is not None else []
    for name, r in dims.items():
        parts.append(
            format_html("{} from {}", _mono(name), _range(r))
            if _range(r)
            else format_html("{} {}", _mono(name), spec_value(r))
        )
    if s.get("layouts"):
        parts.append(format_html("layouts {}", ", ".join(map(str, s["layouts"]))))
    return format_html_join("; ", "{}", ((p,) for p in parts))


def _generators(gens):
    if not isinstance(gens, list) or not all(isinstance(g, dict) for g in gens):
        return spec_value(gens)
    rows = []
    for g in gens:
        params = g.get("params") if isinstance(g.get("params"), dict) else {}
        args = ", ".join(f"{k} {v}" for k, v in params.items())
        rows.append((_mono(g.get("name", "?")), str(g.get("dist", "")) + (f" ({args})" if args else "")))
    return format_html('<ul class="spec">{}</ul>', format_html_join("", "<li>{}: {}</li>", rows))


def _invariants(names):
    if not isinstance(names, list):
        return spec_value(names)
    return format_html(
        '<ul class="spec">{}</ul>',
        format_html_join("", "<li>{}</li>", ((_words(n, HARNESS_INVARIANTS),) for n in names)),
    )


def _seeds(s):
    if not isinstance(s, dict):
        return spec_value(s)
    public = s.get("public") or []
    hidden = s.get("hidden_count")
    text = f"public {', '.join(map(str, public))}" if public else "no public seed"
    if hidden:
        text += f"; {hidden} hidden seed{'s' if hidden != 1 else ''}, drawn by the portal and never shown"
    return text


def _discriminators(d):
    if not isinstance(d, dict):
        return spec_value(d)
    return format_html(
        '<ul class="spec">{}</ul>',
        format_html_join("", "<li><b>{}</b>: {}</li>", ((str(k).replace("_", " "), str(v)) for k, v in d.items())),
    )


def _seconds(v):
    return f"{v} s"


def _count(v):
    return f"{v}"


def _text(v):
    return spec_value(v)


def _family(v):
    words = FAMILY_WORDS.get(str(v))
    link = _glossary("contract-family", str(v))
    return format_html("{}: {}", link, words) if words else link


def _class(v):
    return format_html("{} — one of the twelve {}", _mono(v), _glossary("contract-class", "contract classes"))


def _level(v):
    words = TOLERANCE_LEVELS.get(str(v))
    link = _glossary("tolerance-level", str(v))
    return format_html("{} — {}", link, words) if words else link


def _statistic(v):
    words = STATISTICS.get(str(v))
    return format_html("{}: {}", _mono(v), words) if words else _mono(v)


def _fraction(v):
    try:
        return format_html(
            "{}% of the bound (a pass that uses more is a {})",
            f"{100 * float(v):g}",
            _glossary("kernel-verdict", "QUALITY_WARNING"),
        )
    except (TypeError, ValueError):
        return _mono(v)


def _magnitudes(r):
    return format_html("|x| from {}", _range(r)) if _range(r) else spec_value(r)


def _env(d):
    if not isinstance(d, dict):
        return spec_value(d)
    return format_html_join(
        ", ", "{}", ((_mono(f"{k} = {str(v).lower() if isinstance(v, bool) else v}"),) for k, v in d.items())
    )


def _choices(d):
    """``{split_k: [1, 8]}`` → "split_k ∈ {1, 8}"."""
    if not isinstance(d, dict):
        return spec_value(d)
    return format_html_join(
        "; ",
        "{}",
        (
            (_mono(f"{k} ∈ {{{', '.join(map(str, v))}}}" if isinstance(v, list) else f"{k} = {v}"),)
            for k, v in d.items()
        ),
    )


def _naive(d):
    """The T4 functional check calibration compares against (``allclose``-style), field by field."""
    if not isinstance(d, dict):
        return spec_value(d)
    return format_html(
        "the functional smoke check benchmarks use ({}): {}",
        _glossary("tolerance-level", "T4"),
        format_html_join("; ", "{} {}", ((str(k).replace("_", " "), _mono(v)) for k, v in d.items())),
    )


def _determinism(v):
    return "the oracle itself gives the same bits every run" if v == "bitwise" else _mono(v)


def _sweep(_v):
    return mark_safe('listed under <a href="#sweep">What is measured</a>')


# part → [(field, label, renderer)] in reading order; fields not listed here go to "Other fields".
FIELDS = {
    "identifier": [
        ("title", "Contract", _text),
        ("class", "Class", _class),
        ("family", "Family", _family),
        ("signature", "Operation", _mono),
        ("version", "Version", _mono),
        ("id", "Identifier", _mono),
        ("protocol", "Measurement protocol", _mono),
    ],
    "scope": [
        ("ops", "Operations", _chips),
        ("modes", "Modes", _chips),
        ("dtypes", "Data types", _dtypes),
        ("shape_class", "Shapes", _shapes),
        ("platforms", "Platforms", _chips),
        ("config_space", "Configurations", _choices),
        ("invariance_set", "Must not depend on", _chips),
    ],
    "precondition": [
        ("value_domain", "Values", lambda v: _words(v, VALUE_DOMAINS)),
        ("magnitude_range", "Magnitudes", _magnitudes),
        ("env", "Settings", _env),
        ("rounding", "Rounding", _env),
        ("predicates", "Must hold", _text),
    ],
    "postcondition": [
        ("kind", "Kind", lambda v: _words(v, POSTCONDITION_KINDS)),
        ("relation", "Checked", _mono),
        ("quantifier", "Over", _text),
    ],
    "tolerance": [
        ("level", "Level", _level),
        ("statistic", "Statistic", _statistic),
        ("bound", "Bound", _mono),
        ("unit_roundoff", "Unit roundoff", _unit_roundoff),
        ("quality_warning_fraction", "Warning above", _fraction),
    ],
    "reference_oracle": [
        ("kind", "Kind", lambda v: _words(v, ORACLE_KINDS)),
        ("impl", "Computed as", _text),
        ("dtype", "In", _mono),
        ("device", "On", _mono),
        ("determinism", "Determinism", _determinism),
    ],
    "measurement_protocol": [
        ("harness_invariants", "Harness", _invariants),
        ("generators", "Inputs", _generators),
        ("directed_probes", "Directed probes", _text),
        ("sweep", "Shapes and values", _sweep),
        ("sweeps", "Shapes", _choices),
        ("seeds", "Seeds", _seeds),
        ("trials", "Trials", _count),
        ("repetitions", "Repetitions", _count),
        ("decision_rule", "Decision", _text),
        ("time_limit_s", "Time limit", _seconds),
        ("naive", "Naive check", _naive),
    ],
    "violation_signature": [
        ("symptom", "Symptom", _text),
        ("discriminators", "Telling causes apart", _discriminators),
        ("localisation", "Where it shows", _text),
    ],
    # not among the eight parts, shown beside them
    "derivation": [
        ("formula_id", "Formula", _mono),
        ("inputs", "Inputs", _env),
        ("notes", "Why this bound", _text),
        ("references", "References", _text),
    ],
    "provenance": [
        ("author", "Author", _text),
        ("created", "Written", _mono),
        ("suite_version", "Suite version", _mono),
        ("toolchain", "Measured with", _env),
    ],
}


def readable_part(key: str, value) -> dict:
    """``{"rows": [(label, html)], "other": {field: value}}`` for one part; a part that is not a mapping is all
    "other" (shown as written)."""
    if not isinstance(value, dict):
        return {"rows": [], "other": value}
    rows, known = [], set()
    for field, label, render in FIELDS.get(key, []):
        known.add(field)
        if value.get(field) is not None:
            rows.append((label, render(value[field])))
    other = {k: v for k, v in value.items() if k not in known}
    return {"rows": rows, "other": other or None}


def readable_parts(spec: dict, titles: list[tuple[str, str]]) -> list[dict]:
    """Every part of ``titles`` (key, title) with its rows, in order."""
    parts = spec.get("parts") if isinstance(spec.get("parts"), dict) else {}
    return [{"key": key, "title": title, **readable_part(key, parts.get(key))} for key, title in titles]


def readable_extras(spec: dict) -> dict:
    """The derivation, the declared policies and the provenance, read like the parts."""
    return {
        "derivation": readable_part("derivation", spec.get("derivation")) if spec.get("derivation") else None,
        "policies": [(str(k).replace("_", " "), _mono(v)) for k, v in (spec.get("policies") or {}).items()]
        if isinstance(spec.get("policies"), dict)
        else None,
        "provenance": readable_part("provenance", spec.get("provenance")),
        "sweep_points": [point_text(p) for p in _sweep_of(spec).get("points") or []],
    }


def _sweep_of(spec: dict) -> dict:
    protocol = (spec.get("parts") or {}).get("measurement_protocol")
    sweep = protocol.get("sweep") if isinstance(protocol, dict) else None
    return sweep if isinstance(sweep, dict) else {}
