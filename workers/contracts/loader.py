"""Load and validate contract files (docs/contract-language.md#the-parts-of-a-contract); name the faulty field *and*
its line on any error.

The text becomes data with the line of every field (document.py: YAML composed to nodes, hostile documents
refused), the data is checked against ``schema.CONTRACT``, and then the expressions are parsed with ``expr.parse``
and checked against the names the named measurement protocol binds. Nothing here imports torch, so the portal can load the suite into its
database from a process that never imports torch.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import expr as _expr
from .document import ContractError, check_schema, dotted, line_for, parse_document
from .schema import CONTRACT, EIGHT_PARTS, ENV_FLAGS, FAMILY_OF_CLASS, POLICY_VALUES

SPECS_DIR = Path(__file__).resolve().parent / "specs"
# Declared-property contracts (batch invariance of rms_norm, exact GELU, cumsum, top-k ties, causal masks, ...):
# they apply to a kernel that declares the property, so they are not in the default suite of twelve
# (docs/contracts.md#declared-property-contracts); run them by full id, or with load_declared().
DECLARED_DIR = SPECS_DIR / "declared"


# ------------------------------------------------------------------------------------------------ model
@dataclass
class Contract:
    """A validated contract. ``data`` is the document as plain JSON-safe data; the parsed expressions and
    the resolved numeric constants are attributes."""

    id: str
    cls: str
    family: str
    version: str
    title: str
    protocol: str
    signature: str
    data: dict
    source_text: str
    sha256: str
    path: str = ""
    lines: dict = field(default_factory=dict, repr=False)
    bound: _expr.Expr = field(default=None, repr=False)
    relation: _expr.Expr = field(default=None, repr=False)

    # convenient views -----------------------------------------------------------------------------
    @property
    def statistic(self) -> str:
        return self.data["tolerance"]["statistic"]

    @property
    def level(self) -> str:
        return self.data["tolerance"]["level"]

    @property
    def policies(self) -> dict:
        return dict(self.data.get("policies") or {})

    @property
    def protocol_params(self) -> dict:
        return self.data["measurement_protocol"]

    @property
    def unit_roundoff(self) -> float:
        return _num(self.data["tolerance"].get("unit_roundoff", 2.0**-24))

    @property
    def quality_warning_fraction(self) -> float:
        return _num(self.data["tolerance"].get("quality_warning_fraction", 0.5))

    @property
    def env(self) -> dict:
        return dict(self.data["precondition"].get("env") or {})

    @property
    def calibration(self) -> dict:
        return self.data["calibration"]

    def line_of(self, path: str):
        """Line of a dotted field path such as ``tolerance.bound`` (None if unknown)."""
        parts = tuple(int(p) if p.isdigit() else p for p in re.split(r"\.|\[|\]\.?", path) if p != "")
        return line_for(self.lines, parts)

    def to_dict(self) -> dict:
        """JSON-safe record for a database row: identity, the eight parts, extensions, source and digest."""
        d = self.data
        return {
            "id": self.id,
            "class": self.cls,
            "version": self.version,
            "family": self.family,
            "title": self.title,
            "protocol": self.protocol,
            "signature": self.signature,
            "schema_version": d["schema_version"],
            "parts": {p: d[p] for p in EIGHT_PARTS},
            "policies": d.get("policies") or {},
            "calibration": d["calibration"],
            "derivation": d.get("derivation"),
            "provenance": d.get("provenance"),
            "evidence": d.get("evidence") or [],
            "source_text": self.source_text,
            "sha256": self.sha256,
            "filename": Path(self.path).name if self.path else "",
        }


def _num(v) -> float:
    return float(_expr.parse(v).evaluate({}))


def load_text(text: str, source: str = "<contract>") -> Contract:
    """Parse and validate one contract document. Raises :class:`ContractError` naming field and line (and
    nothing else, whatever the input: tests/contracts/test_kc_loader_fuzz.py)."""
    try:
        return _load_text(text, source)
    except RecursionError:  # PyYAML composes recursively: "[[[[…]]]]" thousands deep
        raise ContractError("document is nested too deeply", source=source) from None


def _load_text(text: str, source: str) -> Contract:
    if not isinstance(text, str):
        raise ContractError(f"a contract document is text, not {type(text).__name__}", source=source)
    data, lines = parse_document(text, source)
    check_schema(CONTRACT, data, (), lines, source)

    def err(msg, path):
        raise ContractError(msg, field=dotted(path), line=line_for(lines, path), source=source)

    ident = data["identifier"]
    meta = _check_identity(ident, err)
    bound, relation = _check_expressions(data, meta, err)
    _check_declarations(data, meta, err)
    sweep = data["measurement_protocol"].get("sweep")
    if sweep:
        _check_sweep(sweep, meta, data, err)

    return Contract(
        id=ident["id"],
        cls=ident["class"],
        family=ident["family"],
        version=ident["version"],
        title=ident.get("title", ""),
        protocol=ident["protocol"],
        signature=ident["signature"],
        data=data,
        source_text=text,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        path=source,
        lines=lines,
        bound=bound,
        relation=relation,
    )


def _check_identity(ident: dict, err) -> dict:
    """The id, class, family and protocol agree; returns the protocol's entry of the registry."""
    if not ident["id"].startswith(ident["class"] + "/"):
        err(f"id {ident['id']!r} must start with the class {ident['class']!r}", ("identifier", "id"))
    if FAMILY_OF_CLASS[ident["class"]] != ident["family"]:
        err(f"class {ident['class']} belongs to family {FAMILY_OF_CLASS[ident['class']]!r}", ("identifier", "family"))
    from .protocols import PROTOCOL_META  # torch-free registry

    meta = PROTOCOL_META.get(ident["protocol"])
    if meta is None:
        err(
            f"unknown protocol {ident['protocol']!r} (known: {', '.join(sorted(PROTOCOL_META))})",
            ("identifier", "protocol"),
        )
    if meta["class"] != ident["class"]:
        err(
            f"protocol {ident['protocol']!r} measures {meta['class']}, not {ident['class']}", ("identifier", "protocol")
        )
    return meta


def _check_expressions(data: dict, meta: dict, err):
    """The statistic, the bound and the relation use only the names the protocol binds; returns (bound, relation)."""
    names = set(meta["names"])
    protocol = data["identifier"]["protocol"]
    tol = data["tolerance"]
    if tol["statistic"] not in names:
        err(
            f"statistic {tol['statistic']!r} is not measured by protocol {protocol!r} "
            f"(it binds: {', '.join(sorted(names))})",
            ("tolerance", "statistic"),
        )
    bound = _expr.parse(tol["bound"])
    unknown = bound.names - names
    if unknown:
        err(f"bound uses unbound name(s) {sorted(unknown)}; protocol binds {sorted(names)}", ("tolerance", "bound"))
    relation = _expr.parse(data["postcondition"]["relation"])
    unknown = relation.names - names - {"bound"}
    if unknown:
        err(f"relation uses unbound name(s) {sorted(unknown)}", ("postcondition", "relation"))
    if not relation.is_predicate():
        err("relation must be a comparison or a boolean combination of comparisons", ("postcondition", "relation"))
    return bound, relation


def _check_declarations(data: dict, meta: dict, err) -> None:
    """Discriminators the protocol can report, known policies and environment flags, sweeps it knows. (A
    ``policy`` postcondition without a policies block is allowed: run_contract reports NOT_DECLARED.)"""
    protocol = data["identifier"]["protocol"]
    for key in data["violation_signature"].get("discriminators") or {}:
        if key not in meta["patterns"]:
            err(
                f"discriminator {key!r} is not a pattern protocol {protocol!r} can report "
                f"({', '.join(meta['patterns'])})",
                ("violation_signature", "discriminators", key),
            )
    for pname in data.get("policies") or {}:
        if pname not in POLICY_VALUES:  # pragma: no cover - schema already rejects
            err("unknown policy", ("policies", pname))
    for flag in data["precondition"].get("env") or {}:
        if flag not in ENV_FLAGS:
            err(f"unknown environment flag {flag!r} (known: {', '.join(ENV_FLAGS)})", ("precondition", "env", flag))
    for sname in data["measurement_protocol"].get("sweeps") or {}:
        if sname not in meta.get("sweeps", ()):
            err(
                f"protocol {protocol!r} has no sweep {sname!r} (sweeps: {', '.join(meta.get('sweeps', ()))})",
                ("measurement_protocol", "sweeps", sname),
            )


POINT_KEYS = ("value", "layout")


def _check_sweep(sweep: dict, meta: dict, data: dict, err) -> None:
    """The sweep block names only dimensions and value generators the protocol knows, stays inside the declared
    scope (``scope.shape_class.dims``) and, for fixed points, inside its own budget."""
    check = _SweepCheck(sweep, meta, data, err)
    check.budget_expressions()
    for i, point in enumerate(sweep.get("points") or []):
        check.point(point, check.base + ("points", i))
    check.draw(sweep.get("draw") or {})
    _check_scope_draws(sweep, meta, data, err)


class _SweepCheck:
    """The checks of one sweep block, over what they share: the protocol's dimensions and value generators, the
    contract's generators and declared ranges, the budget."""

    base = ("measurement_protocol", "sweep")

    def __init__(self, sweep: dict, meta: dict, data: dict, err):
        self.meta, self.err, self.budget = meta, err, sweep["budget"]
        self.dims = set(meta.get("sweeps", ()))
        self.gen_names = {g["name"] for g in data["measurement_protocol"]["generators"]}
        self.declared = data["scope"]["shape_class"].get("dims") or {}

    def budget_expressions(self) -> None:
        for key in ("elements", "work"):
            if self.budget.get(key) is None:
                continue
            unknown = _expr.parse(self.budget[key]).names - self.dims
            if unknown:
                self.err(
                    f"budget expression uses {sorted(unknown)}; the protocol's dimensions are {sorted(self.dims)}",
                    self.base + ("budget", key),
                )
        if (self.budget.get("work") is None) != (self.budget.get("max_work") is None):
            self.err("work and max_work go together", self.base + ("budget",))

    def value(self, v, path) -> None:
        values = self.meta.get("values", ())
        if not isinstance(v, str) or v not in values or v not in self.gen_names:
            self.err(
                f"value generator {v!r} must be one the protocol implements ({', '.join(values)}) "
                f"and listed in measurement_protocol.generators",
                path,
            )

    def dim(self, name, lo, hi, path) -> None:
        scope = self.declared.get(name)
        if scope is not None and len(scope) == 2 and not (scope[0] <= lo and hi <= scope[1]):
            self.err(f"{name} = {lo}..{hi} lies outside the declared scope {name} in {scope}", path)

    def point(self, point: dict, path: tuple) -> None:
        for k, v in point.items():
            if k == "value":
                self.value(v, path + (k,))
            if k in POINT_KEYS:
                continue
            if k not in self.dims:
                self.err(
                    f"unknown dimension {k!r} (the protocol's: {', '.join(sorted(self.dims))}, plus value, layout)",
                    path + (k,),
                )
            if isinstance(v, bool) or not isinstance(v, int):
                self.err(f"a dimension is an integer, found {v!r}", path + (k,))
            self.dim(k, v, v, path + (k,))
        self.point_budget({k: float(v) for k, v in point.items() if k not in POINT_KEYS}, path)

    def point_budget(self, env: dict, path: tuple) -> None:
        for key, mkey in (("elements", "max_elements"), ("work", "max_work")):
            if self.budget.get(key) is None:
                continue
            expr = _expr.parse(self.budget[key])
            missing = expr.names - set(env)
            if missing:
                self.err(f"point does not give {sorted(missing)}, needed by budget.{key}", path)
            used, most = expr.evaluate(env), _num(self.budget[mkey])
            if used > most:
                self.err(f"point exceeds the budget: {key} = {used:.4g} > {mkey} = {most:.4g}", path)

    def draw(self, draw: dict) -> None:
        for name, spec in (draw.get("dims") or {}).items():
            path = self.base + ("draw", "dims", name)
            if name not in self.dims:
                self.err(f"unknown dimension {name!r} (the protocol's: {', '.join(sorted(self.dims))})", path)
            rng = spec["range"]
            if len(rng) != 2 or rng[0] > rng[1]:
                self.err(f"range must be [low, high] with low <= high, found {rng}", path + ("range",))
            self.dim(name, rng[0], rng[1], path + ("range",))
        if draw and draw["count"] < 0:
            self.err("count must be >= 0", self.base + ("draw", "count"))
        for i, v in enumerate(draw.get("values") or []):
            self.value(v, self.base + ("draw", "values", i))


def _check_scope_draws(sweep: dict, meta: dict, data: dict, err) -> None:
    """Issue #24 keys: ``draw.reach`` names dimensions the protocol sweeps and the scope declares with a range,
    ``draw.layouts`` and point layouts only layouts the scope declares, and every shared value generator is one
    the contract's declared value domain admits (a finite domain gets no inf/NaN; see DOMAIN_VALUES)."""
    from .protocols import DOMAIN_VALUES, LAYOUTS

    base = ("measurement_protocol", "sweep")
    draw = sweep.get("draw") or {}
    shape_class = data["scope"]["shape_class"]
    declared = shape_class.get("dims") or {}
    for i, name in enumerate((draw.get("reach") or {}).get("dims") or []):
        if name not in meta.get("sweeps", ()) or name not in declared or len(declared[name]) != 2:
            err(
                f"reach dimension {name!r} must be swept by the protocol and declared with a range",
                base + ("draw", "reach", "dims", i),
            )
    if draw.get("reach") and draw["reach"]["count"] < 0:
        err("count must be >= 0", base + ("draw", "reach", "count"))
    layouts = [(base + ("draw", "layouts", i), v) for i, v in enumerate(draw.get("layouts") or [])]
    layouts += [
        (base + ("points", i, "layout"), p["layout"]) for i, p in enumerate(sweep.get("points") or []) if "layout" in p
    ]
    for path, v in layouts:
        if v not in LAYOUTS or v not in (shape_class.get("layouts") or []):
            err(
                f"layout {v!r} must be declared in scope.shape_class.layouts (and be one of {', '.join(LAYOUTS)})", path
            )
    pre = data.get("precondition") or {}
    domain = pre.get("value_domain")
    low = (pre.get("magnitude_range") or [None])[0]
    values = [(base + ("draw", "values", i), v) for i, v in enumerate(draw.get("values") or [])]
    values += [
        (base + ("points", i, "value"), p["value"]) for i, p in enumerate(sweep.get("points") or []) if "value" in p
    ]
    for path, v in values:
        rule = DOMAIN_VALUES.get(v)
        if rule is None:
            continue
        floor = rule["min_magnitude"]
        if domain not in rule["domains"] or (floor is not None and low is not None and float(low) > floor):
            err(
                f"value generator {v!r} is outside the declared value domain ({domain}, magnitude_range low {low})",
                path,
            )


def load_file(path) -> Contract:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(f"not UTF-8 text (byte {exc.start}: {exc.reason})", source=str(path)) from None
    return load_text(text, source=str(path))


_SUITE_CACHE: dict = {}


def load_suite(directory=None) -> list[Contract]:
    """All contracts under ``directory`` (default: the shipped specs), sorted by class id.

    Versioning: a contract file is never edited in place; a new version is a new file (``*.v0.2.0.yaml``)
    and the suite keeps the highest version per id."""
    directory = Path(directory or SPECS_DIR)
    key = (str(directory), tuple(sorted((p.name, p.stat().st_mtime_ns) for p in directory.glob("*.yaml"))))
    if key in _SUITE_CACHE:
        return list(_SUITE_CACHE[key])
    latest: dict[str, Contract] = {}
    for p in sorted(directory.glob("*.yaml")):
        c = load_file(p)
        prev = latest.get(c.id)
        if prev is None or _semver_key(c.version) > _semver_key(prev.version):
            latest[c.id] = c
    out = sorted(latest.values(), key=lambda c: (CLASS_ORDER.get(c.cls, 99), c.id))
    for stale in [k for k in _SUITE_CACHE if k[0] == key[0]]:
        del _SUITE_CACHE[stale]
    _SUITE_CACHE[key] = out
    return list(out)


def load_declared() -> list[Contract]:
    """The declared-property contracts (``specs/declared``), latest version per id, in class order."""
    return load_suite(DECLARED_DIR)


def _semver_key(v: str):
    core = v.split("-")[0].split("+")[0]
    return tuple(int(x) for x in core.split("."))


from .schema import CLASSES as _CLASSES  # noqa: E402 - imported after the version helpers it uses at import time

CLASS_ORDER = {c: i for i, c in enumerate(_CLASSES)}
