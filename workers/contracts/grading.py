"""Conformance grades (docs/contract-language.md#grades, modelled on IEC 62443 / ISASecure). Pure functions over
verdicts; no torch.

* **KC-C** = (PRC, ORD, CMP, EXC), each 0-4. A family earns level L only if *every* in-scope class of the
  family passes at L (no cherry-picking): a class with no verdict counts as failing, several verdicts for a
  class count by their minimum, NOT_APPLICABLE excludes a class only with a stated reason.
* A passing verdict's level is the adversary its protocol withstood (``Verdict.assurance_level``): 1 for
  public seeds and directed probes only; 3 when hidden seeds ran with the full harness (separate process,
  candidate first on poisoned memory, input hashes, sensitivity, replay, config enumeration). Level 4 needs
  attestations this engine cannot produce (third-party execution, signed traces, cross-SKU replication).
  NOT_DECLARED caps the family at 0 (docs/contract-language.md#grades: level 1 requires every policy declared; the
  verdict list's wording "failing at level >= 2" is the weaker reading — we apply the stricter table).
* **KC-A**: the same vector under the deployment's flags. Verdicts measured under those flags
  (``deployment_verdicts``) are used when given; otherwise any class whose contract precondition the flags
  contradict (e.g. ``allow_tf32: true`` against ``env: {allow_tf32: false}``, FTZ on against PRESERVE) is
  unmeasured under deployment and scores 0 — turning TF32/HF32/FTZ on lowers PRC-A even when PRC-C is high.
* QUALITY_WARNING: passes using more than half the budget; listed, and still a pass.
* Per contract (``contracts`` and each family row): measurements passed / measured, the worst margin and its
  clause, the coverage statement and the track. A grade mixing open-track verdicts (graded against a declared
  lower precision) is labelled ``track = "open"`` and must not be read next to closed-track grades as equal.
"""

from __future__ import annotations

from .schema import CLASSES, FAMILY_CODE, FAMILY_OF_CLASS

PASSING = ("PASS", "QUALITY_WARNING")
# flags that reduce precision when truthy, and the classes whose guarantees they void (when the contract file
# is not at hand to read precondition.env)
RISKY_FLAGS = {
    "allow_tf32": ("C-PRC-01", "C-PRC-04", "C-CMP-02"),
    "allow_hf32": ("C-PRC-01", "C-PRC-04", "C-CMP-02"),
    "allow_fp16_reduced_precision_reduction": ("C-PRC-01", "C-CMP-02"),
    "allow_bf16_reduced_precision_reduction": ("C-PRC-01", "C-CMP-02"),
    "flush_denormal": ("C-PRC-03",),
    "cudnn_benchmark": ("C-ORD-02", "C-ORD-03"),
}
SAFE_FLOAT32_PRECISION = "highest"


def _as_dict(v) -> dict:
    return v.to_dict(include_trace=False) if hasattr(v, "to_dict") else dict(v)


def _class_of(v: dict) -> str:
    return v.get("contract_class") or (v.get("contract_id") or "").split("/")[0]


def _level_of(v: dict, attestations: dict | None) -> int:
    if v.get("verdict") not in PASSING:
        return 0
    lvl = int(v.get("assurance_level") or 1)
    if lvl >= 3 and attestations and all(attestations.get(k) for k in ("third_party", "signed_traces", "cross_sku")):
        lvl = 4
    return min(lvl, 4)


def _vector(verdicts: list[dict], attestations, voided: dict | None = None):
    by_class: dict[str, list[dict]] = {}
    for v in verdicts:
        by_class.setdefault(_class_of(v), []).append(v)
    families = {}
    for fam, code in FAMILY_CODE.items():
        classes = [c for c in CLASSES if FAMILY_OF_CLASS[c] == fam]
        rows, levels, limiting, in_scope = {}, [], [], 0
        for c in classes:
            vs = by_class.get(c, [])
            if voided and c in voided:
                rows[c] = {"verdict": "UNMEASURED", "level": 0, "margin": None, "reason": voided[c]}
                levels.append(0)
                limiting.append(c)
                in_scope += 1
                continue
            if not vs:
                rows[c] = {"verdict": None, "level": 0, "margin": None, "reason": "no verdict (class not assessed)"}
                levels.append(0)
                limiting.append(c)
                in_scope += 1
                continue
            na = [v for v in vs if v.get("verdict") == "NOT_APPLICABLE"]
            if na and len(na) == len(vs) and all(v.get("reason") for v in na):
                rows[c] = {"verdict": "NOT_APPLICABLE", "level": None, "margin": None, "reason": na[0]["reason"]}
                continue
            in_scope += 1
            worst = min(vs, key=lambda v: (_level_of(v, attestations), -(v.get("margin") or 0)))
            lvl = min(
                _level_of(v, attestations) for v in vs if v.get("verdict") != "NOT_APPLICABLE" or not v.get("reason")
            )
            rows[c] = {
                "verdict": worst.get("verdict"),
                "level": lvl,
                "margin": worst.get("margin"),
                "reason": worst.get("reason", ""),
                **contract_figures(worst),
            }
            levels.append(lvl)
        level = min(levels) if levels else None  # None: every class of the family out of scope
        if level is not None:
            limiting = (
                [c for c in classes if rows[c]["level"] is not None and rows[c]["level"] == level] if level < 4 else []
            )
        passed = sum(1 for c in classes if rows[c]["verdict"] in PASSING)
        families[code] = {
            "level": level,
            "classes": rows,
            "limiting": limiting,
            "in_scope": in_scope,
            "pass_rate": passed / in_scope if in_scope else None,
        }
    return {code: f["level"] for code, f in families.items()}, families


def contract_figures(v: dict) -> dict:
    """What a person comparing two implementations reads beside a grade, for one verdict: measurements passed /
    measured, the worst margin and the clause it came from (the failing clause's own statistic and bound),
    QUALITY_WARNING, the coverage statement and the track (closed: the contract as written; open: graded against a
    declared lower precision)."""
    clause = v.get("failing_clause") or {}
    cov = v.get("coverage") or {}
    return {
        "passed": v.get("passed_measurements"),
        "measured": v.get("measurements"),
        "statistic_name": v.get("statistic_name"),
        "statistic": v.get("statistic"),
        "bound": v.get("bound"),
        "clause": clause.get("clause") or (f"{v.get('statistic_name')} <= bound" if v.get("statistic_name") else None),
        "clause_point": clause.get("point"),
        "quality_warning": v.get("verdict") == "QUALITY_WARNING",
        "coverage": cov.get("text"),
        "track": v.get("track") or "closed",
        "declaration": v.get("declaration") or {},
    }


def _voided_by_flags(deployment_flags: dict, contracts) -> dict:
    voided = {}
    env_by_class = {}
    for c in contracts or []:
        env_by_class.setdefault(c.cls, {}).update(c.env)
    for flag, value in (deployment_flags or {}).items():
        for cls, env in env_by_class.items():
            if flag in env and env[flag] != value:
                voided[cls] = f"deployment sets {flag}={value!r}, contract precondition requires {env[flag]!r}"
        if flag in RISKY_FLAGS and value:
            for cls in RISKY_FLAGS[flag]:
                voided.setdefault(
                    cls, f"deployment sets {flag}={value!r} (reduced precision / nondeterminism), not measured under it"
                )
        if flag == "float32_matmul_precision" and value != SAFE_FLOAT32_PRECISION:
            for cls in RISKY_FLAGS["allow_tf32"]:
                voided.setdefault(cls, f"deployment sets float32_matmul_precision={value!r}, not measured under it")
    return voided


def affected_classes(deployment_flags: dict, contracts=None) -> dict:
    """Classes whose verdicts a deployment's flags may change ({class: why}): measure them again with the flags
    applied to get KC-A (a class left unmeasured counts 0 there)."""
    return _voided_by_flags(deployment_flags, contracts)


def grade(
    verdicts,
    *,
    deployment_flags: dict | None = None,
    deployment_verdicts=None,
    target: dict | None = None,
    attestations: dict | None = None,
    contracts=None,
) -> dict:
    """Grade one implementation (one backend) from its verdicts.

    ``verdicts``: Verdict objects or their ``to_dict()``. ``deployment_flags``: the flags the deployment runs
    with (for KC-A); ``deployment_verdicts``: verdicts measured under them (override the flag rule class by
    class). ``target``: KC-T, e.g. ``{"PRC": 3, "ORD": 3}``. ``contracts``: Contract objects whose
    precondition.env is checked against the deployment flags (default: none, only the RISKY_FLAGS rule)."""
    vs = [_as_dict(v) for v in verdicts]
    kc_c, families = _vector(vs, attestations)
    not_declared = sorted({_class_of(v) for v in vs if v.get("verdict") == "NOT_DECLARED"})
    for cls in not_declared:  # docs/contract-language.md#grades: level 1 requires every policy declared
        code = FAMILY_CODE[FAMILY_OF_CLASS[cls]]
        kc_c[code] = 0 if kc_c[code] is not None else None
        families[code]["level"] = kc_c[code]

    dep = [_as_dict(v) for v in (deployment_verdicts or [])]
    voided = _voided_by_flags(deployment_flags or {}, contracts)
    for v in dep:
        voided.pop(_class_of(v), None)
    if deployment_flags is None and not dep:
        kc_a, fam_a = dict(kc_c), None
    else:
        measured = {_class_of(v) for v in dep}
        merged = dep + [v for v in vs if _class_of(v) not in measured]
        kc_a, fam_a = _vector(merged, attestations, voided)
        for cls in not_declared:
            code = FAMILY_CODE[FAMILY_OF_CLASS[cls]]
            kc_a[code] = 0 if kc_a[code] is not None else None
    warnings = [
        {"class": _class_of(v), "contract_id": v.get("contract_id"), "margin": v.get("margin")}
        for v in vs
        if v.get("verdict") == "QUALITY_WARNING"
        or (v.get("verdict") == "PASS" and v.get("margin") is not None and v["margin"] > 0.5)
    ]
    meets = None
    if target:
        meets = {k: (kc_a.get(k) or 0) >= int(t) for k, t in target.items()}
    tracks = sorted({v.get("track") or "closed" for v in vs})
    track = "open" if "open" in tracks else "closed"
    fmt = lambda vec: "(" + ", ".join(f"{k} {'-' if v is None else v}" for k, v in vec.items()) + ")"
    return {
        "kc_c": kc_c,
        "kc_a": kc_a,
        "kc_t": dict(target) if target else None,
        "meets_target": meets,
        "meets_all_targets": all(meets.values()) if meets else None,
        "summary": f"KC-C = {fmt(kc_c)}; KC-A = {fmt(kc_a)}"
        + (" [open track: graded against declared precision]" if track == "open" else ""),
        "track": track,
        "declarations": {_class_of(v): v["declaration"] for v in vs if v.get("declaration")},
        "contracts": [
            {
                "contract_id": v.get("contract_id"),
                "class": _class_of(v),
                "verdict": v.get("verdict"),
                "margin": v.get("margin"),
                **contract_figures(v),
            }
            for v in vs
        ],
        "families": families,
        "families_under_deployment": fam_a,
        "deployment_flags": deployment_flags or {},
        "voided_by_deployment": voided,
        "deployment_verdicts": [
            {
                "contract_id": v.get("contract_id"),
                "contract_class": _class_of(v),
                "verdict": v.get("verdict"),
                "margin": v.get("margin"),
                "reason": v.get("reason"),
            }
            for v in dep
        ],
        "quality_warnings": warnings,
        "not_declared": not_declared,
        "margins": {_class_of(v): v.get("margin") for v in vs},
        "verdict_counts": {
            k: sum(1 for v in vs if v.get("verdict") == k)
            for k in sorted({v.get("verdict") for v in vs if v.get("verdict")})
        },
    }


def interop(results_by_backend: dict) -> dict:
    """wpt.fyi-style summary over backends: {backend: [verdicts]} -> interop score (share of contracts passing
    on every backend) and backend-specific failures (contracts failing on exactly one backend)."""
    table: dict[str, dict[str, str]] = {}
    for backend, verdicts in results_by_backend.items():
        for v in map(_as_dict, verdicts):
            table.setdefault(v["contract_id"], {})[backend] = v["verdict"]
    backends = list(results_by_backend)
    all_pass = [cid for cid, row in table.items() if all(row.get(b) in PASSING for b in backends)]
    specific = {
        b: [
            cid
            for cid, row in table.items()
            if row.get(b) not in PASSING and sum(1 for o in backends if row.get(o) not in PASSING) == 1
        ]
        for b in backends
    }
    return {
        "matrix": table,
        "interop_score": len(all_pass) / len(table) if table else None,
        "backend_specific_failures": {b: len(v) for b, v in specific.items()},
        "backend_specific": specific,
    }
