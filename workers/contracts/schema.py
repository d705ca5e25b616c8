"""The contract-file schema of docs/contract-language.md#the-parts-of-a-contract (``schema_version: "kc/0.1"``),
written as data.

Each field is a :class:`F`: its kind, whether it is required, an enum of allowed values, the sub-fields of
a closed mapping, or the item spec of a list / open mapping. ``loader.py`` walks a parsed YAML document
against :data:`CONTRACT` and reports the first problems with the dotted field path and the YAML line.

The eight mandatory parts of the paper are ``identifier, scope, precondition, postcondition, tolerance,
reference_oracle, measurement_protocol, violation_signature``; ``calibration, derivation, provenance,
evidence`` are the project's extensions (docs/contract-language.md#the-parts-of-a-contract) and ``policies`` carries the policy vocabulary
of the exceptional / determinism classes.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA_VERSION = "kc/0.1"

CLASSES = (
    "C-PRC-01",
    "C-PRC-02",
    "C-PRC-03",
    "C-PRC-04",
    "C-ORD-01",
    "C-ORD-02",
    "C-ORD-03",
    "C-CMP-01",
    "C-CMP-02",
    "C-CMP-03",
    "C-EXC-01",
    "C-EXC-02",
)
FAMILIES = ("precision", "ordering", "compiler", "exceptional")
FAMILY_OF_CLASS = {
    c: {"PRC": "precision", "ORD": "ordering", "CMP": "compiler", "EXC": "exceptional"}[c[2:5]] for c in CLASSES
}
FAMILY_CODE = {"precision": "PRC", "ordering": "ORD", "compiler": "CMP", "exceptional": "EXC"}

HARNESS_INVARIANTS = (
    "fresh_poisoned_outputs",
    "candidate_first",
    "reversed_order_repeat",
    "input_hash_check",
    "input_sensitivity",
    "sync_all_streams",
    "replay_twice",
    "hidden_seeds",
    "separate_process",
)
POLICY_VALUES = {
    "nan": ("IEEE_PROPAGATE", "MASK", "RAISE"),
    "fully_masked_row": ("NAN", "ZERO", "UNIFORM", "RAISE"),
    "oob": ("RAISE", "CLAMP", "ZERO", "WRAP", "UNDEFINED"),
    "negative_index": ("ERROR", "WRAP_PYTHON"),
    "denormal": ("PRESERVE", "FLUSH_INPUTS", "FLUSH_OUTPUTS", "FLUSH_BOTH"),
    "determinism": ("BITWISE", "RUN_TO_RUN_EPS", "NONE"),
    "aliasing": ("FORBIDDEN", "ALLOWED_INPLACE"),
    "tie_break": ("LOWEST_INDEX", "HIGHEST_INDEX", "UNSPECIFIED"),
}
# numeric-environment flags a contract's precondition.env (or a run's deployment flags) may set; sandbox.apply_flags
ENV_FLAGS = (
    "allow_tf32",
    "allow_hf32",
    "float32_matmul_precision",
    "flush_denormal",
    "deterministic_algorithms",
    "cudnn_benchmark",
    "allow_fp16_reduced_precision_reduction",
    "allow_bf16_reduced_precision_reduction",
    "num_threads",
)
DTYPES = ("float64", "float32", "float16", "bfloat16", "tf32", "hf32", "int64", "int32", "bool")
SIZE_KINDS = ("uniform", "log_uniform", "non_tile", "prime")
SEMVER_RE = r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$"


@dataclass(frozen=True)
class F:
    """One field: kind in str|int|number|bool|expr|map|dict|list|any."""

    kind: str
    required: bool = False
    enum: tuple | None = None
    fields: dict | None = None  # for kind=map (closed set of keys)
    items: "F | None" = None  # for kind=list / dict (open mapping values)
    pattern: str | None = None  # regex for str
    nonempty: bool = False
    doc: str = ""


S, I, N, B, E, A = (
    (lambda **kw: F("str", **kw)),
    (lambda **kw: F("int", **kw)),
    (lambda **kw: F("number", **kw)),
    (lambda **kw: F("bool", **kw)),
    (lambda **kw: F("expr", **kw)),
    (lambda **kw: F("any", **kw)),
)
M = lambda fields, **kw: F("map", fields=fields, **kw)
L = lambda items, **kw: F("list", items=items, **kw)
D = lambda items, **kw: F("dict", items=items, **kw)

IMPL_REF = A(doc="'package.module:function' or {impl: ref, platform_dependent: bool, note: str}")

CONTRACT = M(
    {
        "schema_version": S(required=True, enum=(SCHEMA_VERSION,)),
        "identifier": M(
            {
                "id": S(required=True, pattern=r"^C-(PRC|ORD|CMP|EXC)-0[1-4]/\S+/\S+$"),
                "class": S(required=True, enum=CLASSES),
                "family": S(required=True, enum=FAMILIES),
                "version": S(required=True, pattern=SEMVER_RE),
                "title": S(),
                "protocol": S(
                    required=True, doc="name of the measurement protocol module (workers/contracts/protocols)"
                ),
                "signature": S(
                    required=True, doc="the implementation signature of docs/contract-language.md#the-twelve-classes"
                ),
            },
            required=True,
        ),
        "scope": M(
            {
                "ops": L(S(), required=True, nonempty=True),
                "modes": L(S(enum=("forward", "backward_input", "backward_weight"))),
                "dtypes": M(
                    {
                        "inputs": L(S(enum=DTYPES), required=True),
                        "accumulate": S(enum=DTYPES),
                        "output": S(required=True, enum=DTYPES),
                    },
                    required=True,
                ),
                "shape_class": M(
                    {
                        "rank": I(),
                        "dims": D(L(I())),
                        "divisibility": D(I()),
                        "layouts": L(
                            S(enum=("contiguous", "transposed", "strided", "channels_last", "padded_rows", "offset"))
                        ),
                    },
                    required=True,
                ),
                "platforms": L(A()),
                "config_space": D(L(A())),
                "invariance_set": L(S()),
            },
            required=True,
        ),
        "precondition": M(
            {
                "value_domain": S(required=True, enum=("finite", "finite_normal", "any", "custom")),
                "magnitude_range": L(N()),
                "env": D(A()),
                "predicates": L(S()),
                "rounding": D(S()),
            },
            required=True,
        ),
        "postcondition": M(
            {
                "kind": S(required=True, enum=("bound", "bitwise", "equivariance", "invariance", "policy", "raises")),
                "relation": E(required=True),
                "quantifier": S(),
            },
            required=True,
        ),
        "policies": M({k: S(enum=v) for k, v in POLICY_VALUES.items()}),
        "tolerance": M(
            {
                "level": S(required=True, enum=("T0", "T1", "T2", "T3", "T4")),
                "statistic": S(required=True),
                "bound": E(required=True),
                "unit_roundoff": N(),
                "quality_warning_fraction": N(),
            },
            required=True,
        ),
        "derivation": M({"formula_id": S(required=True), "inputs": D(A()), "references": L(S()), "notes": S()}),
        "reference_oracle": M(
            {
                "kind": S(
                    required=True, enum=("higher_precision", "exact", "algebraic_identity", "policy_table", "alt_impl")
                ),
                "impl": S(required=True),
                "dtype": S(enum=DTYPES),
                "device": S(),
                "pins": D(S()),
                "determinism": S(enum=("bitwise",)),
            },
            required=True,
        ),
        "measurement_protocol": M(
            {
                "harness_invariants": L(S(enum=HARNESS_INVARIANTS), required=True, nonempty=True),
                "generators": L(
                    M({"name": S(required=True), "dist": S(required=True), "params": D(A())}),
                    required=True,
                    nonempty=True,
                ),
                "directed_probes": L(S()),
                "sweeps": D(L(A())),
                "sweep": M(
                    {
                        "points": L(
                            D(A()),
                            doc="fixed points measured under every seed: {dimension: int, value: generator, "
                            "layout: str}",
                        ),
                        "draw": M(
                            {
                                "count": I(required=True),
                                "dims": D(
                                    M({"range": L(I(), required=True), "kind": S(enum=SIZE_KINDS)}), required=True
                                ),
                                "values": L(S()),
                                "reach": M(
                                    {"count": I(required=True), "dims": L(S(), required=True, nonempty=True)},
                                    doc="points drawn near the top of each named dimension's declared scope",
                                ),
                                "layouts": L(S(), doc="layouts drawn points take (declared in shape_class.layouts)"),
                            }
                        ),
                        "budget": M(
                            {
                                "elements": E(required=True, doc="elements one case holds, over the dimensions"),
                                "max_elements": N(required=True),
                                "work": E(doc="arithmetic of one case, over the dimensions"),
                                "max_work": N(),
                                "seconds": N(
                                    doc="the wall time the whole contract run is budgeted (bench/contracts.py checks it)"
                                ),
                            },
                            required=True,
                        ),
                        "sampling": S(doc="why sampled points still catch size-triggered bugs"),
                    }
                ),
                "seeds": M(
                    {"public": L(I(), required=True, nonempty=True), "hidden_count": I(required=True)}, required=True
                ),
                "trials": I(required=True),
                "repetitions": I(),
                "decision_rule": S(required=True),
                "time_limit_s": N(),
                "memory_limit_mb": N(),
                "naive": D(A(), doc="the T4 functional-smoke check used by calibration (shape, trials)"),
            },
            required=True,
        ),
        "violation_signature": M(
            {
                "symptom": S(required=True),
                "discriminators": D(S()),
                "localisation": S(),
            },
            required=True,
        ),
        "calibration": M(
            {
                "baseline": L(IMPL_REF),
                "violating": L(IMPL_REF, required=True, nonempty=True),
                "conforming": L(IMPL_REF, required=True, nonempty=True),
            },
            required=True,
        ),
        "evidence": L(S()),
        "provenance": M({"author": S(), "created": A(), "toolchain": D(A()), "suite_version": S()}),
    }
)

# The eight mandatory parts of the paper, in order (Contract.to_dict keeps them under "parts").
EIGHT_PARTS = (
    "identifier",
    "scope",
    "precondition",
    "postcondition",
    "tolerance",
    "reference_oracle",
    "measurement_protocol",
    "violation_signature",
)
