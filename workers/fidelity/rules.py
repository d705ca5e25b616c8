"""The audit rules R0–R9 of docs/fidelity-rules.md#rules-r0r9, evaluated on one call.

Every reason code owns one bit of a ``uint32`` per response position; the bits are allocated in rule order, so the
*primary* reason of a call is its lowest set bit and the reasons of a span are listed in rule order. Call-level
failures set their bit on every position; token-level failures only where they occur. A position is *verifiable*
iff its word is 0 (docs/fidelity-rules.md#definitions). Spans are maximal runs of equal words.

Evaluation order and the docs/fidelity-rules.md#rules-r0r9 short-circuits:

* R0 ``MALFORMED`` (structure, alignment, vocabulary) — nothing else can be trusted: later rules ``n/a``.
* R1 role — a call failing R1 is not evaluated further (later rules ``n/a``).
* R2–R9 are all evaluated so that every failure is listed.

Closed failure (docs/fidelity-rules.md#definitions): a rule that cannot be evaluated fails with
``<RULE>_NOT_EVALUABLE`` (R2 without the
tokenizer for ``engine_token_strings``; R4 when ``response.text`` is present but the tokenizer is not registered;
R8 when a staleness bound is configured but a policy version is missing).

Choices the rules leave open (docs/fidelity.md#audit--workersfidelity):

* A *positive* log-prob (> 1e-6) is reported as ``LOGPROB_NONFINITE`` / ``TRAINER_LOGPROB_NONFINITE`` (the code for
  "not a valid log-probability"; R8 lists no other code for it).
* ``MIXED_POLICY_VERSION`` marks the positions whose ``rollout.token_policy_versions`` entry differs from the latest
  version in the call (the earlier off-policy segment of a partial rollout).
* R4 text comparison uses ``engine.skip_special_tokens`` when declared; when it is not, a match under either policy
  passes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workers.fcr.validate import topk_arrays, topk_checked  # noqa: F401  (re-exported: the audit reads them here)

# ------------------------------------------------------------------------------------------- reason codes
REASONS: list[tuple[str, str]] = [
    ("R0", "MALFORMED"),
    ("R1", "BACKGROUND_CALL"),
    ("R1", "ROLE_UNVERIFIED"),
    ("R1", "SUPERSEDED_RETRY"),
    ("R2", "RESPONSE_IDS_RETOKENIZED"),
    ("R2", "RESPONSE_IDS_AMBIGUOUS"),
    ("R2", "RESPONSE_IDS_MISSING"),
    ("R2", "R2_NOT_EVALUABLE"),
    ("R3", "PROMPT_IDS_UNVERIFIED"),
    ("R4", "TOKEN_COUNT_MISMATCH"),
    ("R4", "TEXT_ID_MISMATCH"),
    ("R4", "R4_NOT_EVALUABLE"),
    ("R5", "PROMPT_NOT_ORIGINAL"),
    ("R5", "LINEAGE_UNVERIFIED"),
    ("R5", "R5_NOT_EVALUABLE"),
    ("R6", "LOGPROB_MISSING"),
    ("R6", "LOGPROB_NONFINITE"),
    ("R6", "SENTINEL_LOGPROB"),
    ("R7", "LOGPROB_SEMANTICS_UNVERIFIED"),
    ("R7", "TOPK_INCONSISTENT"),
    ("R7", "R7_NOT_EVALUABLE"),
    ("R8", "TRAINER_LOGPROB_MISSING"),
    ("R8", "TRAINER_LOGPROB_NONFINITE"),
    ("R8", "TRAINER_MISALIGNED"),
    ("R8", "STALE_ROLLOUT"),
    ("R8", "MIXED_POLICY_VERSION"),
    ("R8", "R8_NOT_EVALUABLE"),
    ("R9", "PREFIX_CHAIN_BROKEN"),
    ("CERT", "CERT_MISSING"),
    ("CERT", "CERT_INPUT_INVALID"),
]
CODES = [c for _, c in REASONS]
BIT = {c: np.uint32(1 << i) for i, c in enumerate(CODES)}
RULE_OF = {c: r for r, c in REASONS}
RULES = ["R0", "R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9"]
assert len(CODES) <= 32


# R0 ("parses; arrays aligned; ids within vocab size", docs/fidelity-rules.md#rules-r0r9): the record object, its
# version, its identity and the
# per-token arrays. Any other validator error (e.g. a missing ``source``) does not make the call MALFORMED.
_CRITICAL_EXACT = frozenset({"", "schema", "call_id", "prompt", "response", "rollout", "trainer"})
_CRITICAL_ARRAYS = ("prompt.token_ids", "response.token_ids", "response.token_strings", "rollout.logprobs",
                    "rollout.top_k", "rollout.token_policy_versions", "trainer.logprobs", "trainer.top_k",
                    "trainer.loss_mask_used")


def is_critical(field: str) -> bool:
    if field in _CRITICAL_EXACT:
        return True
    return any(field == a or field.startswith(a + "[") for a in _CRITICAL_ARRAYS)


def codes_of(word: int) -> list[str]:
    """Reason codes of a bit word, in rule order."""
    w = int(word)
    return [c for i, c in enumerate(CODES) if w >> i & 1]


# ------------------------------------------------------------------------------------------- options
@dataclass
class AuditOptions:
    """The defaults of docs/fidelity-rules.md#coverage-report: mode transition, τ_align 1.0 nat, sentinel −9999,
    top-K tolerance 1e-4, δ 0.15, staleness off, inferred roles not accepted."""

    mode: str = "transition"  # or "merged" (enforce R9)
    tau_align: float = 1.0
    sentinel: float = -9999.0
    topk_tol: float = 1e-4
    positive_tol: float = 1e-6
    delta: float = 0.15
    max_staleness: int | None = None
    allow_inferred_roles: bool = False
    require_certificate: bool = False
    require_loss_mask: bool = False
    drift: bool = True
    certificates: bool = True
    max_calls_in_report: int | None = None
    min_coverage: float | None = None  # coverage gate (fraction of policy tokens verifiable); None = no gate

    def __post_init__(self):
        if self.mode not in ("transition", "merged"):
            raise ValueError(f"mode must be 'transition' or 'merged', got {self.mode!r}")
        from workers.fidelity.verdict import check_min_coverage

        self.min_coverage = check_min_coverage(self.min_coverage)


@dataclass
class Lineage:
    """What the index (pass 1) knows about a trajectory / sample, as seen by one call."""

    is_root: bool = False
    root_prefix_ok: bool | None = None  # non-root: prompt starts with the root prompt (None: root unknown)
    context_source_present: bool = False
    chain_broken: bool = False
    tito_prefix_ok: bool | None = None  # prompt extends the previous policy call's prompt+response (diagnostic)
    duplicate_of_line: int | None = None


@dataclass
class CallResult:
    """One audited call; ``entry`` is its JSON report entry, arrays feed coverage and the mask export."""

    entry: dict
    n: int
    words: np.ndarray  # uint32 per position
    role: str
    loss_mask_used: np.ndarray | None = None
    align_diff: np.ndarray | None = None  # |trainer − rollout| over positions valid on both sides
    binary_tv: np.ndarray | None = None
    cert: dict | None = None
    cert_arrays: dict = field(default_factory=dict)
    call_codes: int = 0  # call-level reason bits of a call with no response tokens
    # What R5/R9 and the TITO diagnostic need once the whole file is indexed (None: the call is already final,
    # e.g. it failed R0/R1). See :func:`evaluate_call` (``defer_lineage``) and :func:`apply_lineage`.
    lineage_input: dict | None = None
    cert_raw: tuple | None = None  # (positions, lo, hi, err, binary TV) computed before lineage (certificates)

    @property
    def verifiable(self) -> np.ndarray:
        return self.words == 0


# ------------------------------------------------------------------------------------------- helpers
def _floats(values, n):
    """(float|null)[] → (float64 array with NaN at nulls, bool mask of nulls)."""
    if values is None:
        return np.full(n, np.nan), np.ones(n, dtype=bool)
    if None not in values:
        return np.asarray(values, dtype=np.float64).reshape(n), np.zeros(n, dtype=bool)
    missing = np.fromiter((v is None for v in values), dtype=bool, count=n)
    arr = np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)
    return arr, missing


def _median(d: np.ndarray) -> float:
    """``np.median`` (mean of the two middle values for an even count) through one ``np.partition``."""
    m = len(d)
    h = m // 2
    if m % 2:
        return float(np.partition(d, h)[h])
    p = np.partition(d, (h - 1, h))
    return float((p[h - 1] + p[h]) / 2)


def spans_of(words: np.ndarray) -> list[dict]:
    n = len(words)
    if n == 0:
        return []
    cuts = np.flatnonzero(words[1:] != words[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [n]))
    return [{"start": int(s), "end": int(e), "verifiable": bool(words[s] == 0), "reasons": codes_of(words[s])}
            for s, e in zip(starts, ends)]


def _obj(rec, key) -> dict:
    v = rec.get(key)
    return v if isinstance(v, dict) else {}


def _untransformed(sampling: dict) -> bool:
    """R7 (docs/fidelity-rules.md#rules-r0r9): raw log-probs equal processed ones only if sampling does not
    transform the distribution."""
    g = sampling.get

    def eq(key, ok, default_ok=True):
        v = g(key)
        return default_ok if v is None else v in ok

    return (
        eq("temperature", (1, 1.0))
        and eq("top_p", (1, 1.0))
        and eq("top_k", (0, -1))
        and eq("min_p", (0, 0.0))
        and eq("repetition_penalty", (1, 1.0))
        and eq("presence_penalty", (0, 0.0))
        and eq("frequency_penalty", (0, 0.0))
        and not g("logit_bias_present")
        and not g("structured_output")
    )


def finalize(result: CallResult) -> CallResult:
    """(Re)compute a call's reasons, primary reason, verdict, spans and closed-failure count from its bit words."""
    entry, words, n = result.entry, result.words, result.n
    union = (int(np.bitwise_or.reduce(words)) if n else 0) | result.call_codes
    reasons = codes_of(union)
    entry["primary_reason"] = reasons[0] if reasons else None
    entry["reasons"] = reasons
    ok = words == 0
    nv = int(ok.sum())
    entry["verifiable_tokens"] = nv
    entry["verdict"] = "verifiable" if not reasons else ("excluded" if nv == 0 else "partial")
    entry["spans"] = spans_of(words)
    for code in reasons:
        if RULE_OF[code] == "CERT":
            entry["rules"]["CERT"] = "fail"
    m = result.loss_mask_used
    if m is None:
        viol = 0
    elif len(m) == n:
        viol = int((m & ~ok).sum())
    else:  # misaligned mask: no position can be matched, every used token violates
        viol = int(m.sum())
    entry["loss_mask_used"] = m is not None
    entry["closed_failure_violations"] = viol
    return result


# ------------------------------------------------------------------------------------------- R0–R9
def _fail_all(result: CallResult, code: str):
    result.words[:] |= BIT[code]
    result.entry["rules"][RULE_OF[code]] = "fail"


def _finish(result: CallResult, opts: AuditOptions, skip_from=None) -> CallResult:
    rules = result.entry["rules"]
    if skip_from is not None:
        for r in RULES[RULES.index(skip_from):]:
            rules[r] = "n/a"
    if opts.mode != "merged":
        rules["R9"] = "n/a"
    return finalize(result)


def apply_lineage(result: CallResult, lineage: Lineage, opts: AuditOptions) -> CallResult:
    """The context-dependent rules (docs/fidelity-rules.md#rules-r0r9) for a call that passed R0 and R1: R5
    (original prompt / lineage), R9 (merge chain, merged mode) and the TITO diagnostic
    (docs/fidelity-rules.md#the-prefix-invariant-tito). Both rules fail the whole call (every position),
    so they can be applied after the token-level rules and the certificates; then the call is finalised."""
    li, entry = result.lineage_input, result.entry
    result.lineage_input = None
    entry["tito_prefix_ok"] = lineage.tito_prefix_ok
    if not li["evaluable"]:
        entry["lineage"] = "not-evaluable"
        _fail_all(result, "R5_NOT_EVALUABLE")
    elif lineage.is_root:
        dec, obs = li["declared"], li["observed"]
        if dec is None or obs is None:
            entry["lineage"] = "root-undeclared"
            _fail_all(result, "LINEAGE_UNVERIFIED")
        elif dec != obs:
            entry["lineage"] = "root-mismatch"
            _fail_all(result, "PROMPT_NOT_ORIGINAL")
        else:
            entry["lineage"] = "root-ok"
    elif lineage.root_prefix_ok:
        entry["lineage"] = "prefix-ok"
    elif li["context_event"] is not None and lineage.context_source_present:
        entry["lineage"] = f"context-{li['context_event']}-ok"
    else:
        entry["lineage"] = "unverified" if lineage.root_prefix_ok is not None else "root-unknown"
        _fail_all(result, "LINEAGE_UNVERIFIED")
    if opts.mode == "merged" and lineage.chain_broken:
        _fail_all(result, "PREFIX_CHAIN_BROKEN")
    return _finish(result, opts)


def evaluate_call(rec: dict, *, line: int, issues: list, tokenizer, lineage: Lineage | None, opts: AuditOptions,
                  defer_lineage: bool = False, topk: dict | None = None) -> CallResult:
    """Apply R0–R9 to one parsed record. ``issues`` are its structural (validator) errors; ``tokenizer`` the
    registered tokenizer for ``rec.tokenizer.sha256`` or None; ``lineage`` what the index learnt about its context.

    ``defer_lineage=True``: evaluate everything that depends on this record alone (R0–R4, R6–R8) and leave R5/R9
    and the TITO diagnostic to :func:`apply_lineage` once the whole file has been indexed; ``lineage`` then only
    needs ``duplicate_of_line`` (a duplicate is known when it is read: the first occurrence comes first). The
    result keeps ``lineage_input`` (the few record fields R5 needs) and is finalised by :func:`apply_lineage`.
    ``topk``: ``{"rollout": arrays, "trainer": arrays}`` already converted by :func:`topk_checked`, if any."""
    topk = topk or {}
    if lineage is None:
        lineage = Lineage()
    get = rec.get if isinstance(rec, dict) else (lambda k, d=None: d)
    resp = get("response") if isinstance(get("response"), dict) else {}
    ids = resp.get("token_ids")
    n = len(ids) if isinstance(ids, list) else 0
    role = get("role") if get("role") in ("policy", "background", "unknown") else "unknown"
    trainer = get("trainer") if isinstance(get("trainer"), dict) else {}
    entry = {
        "line": line,
        "call_id": get("call_id") if isinstance(get("call_id"), str) else None,
        "run_id": get("run_id") if isinstance(get("run_id"), str) else None,
        "trajectory_id": get("trajectory_id") if isinstance(get("trajectory_id"), str) else None,
        "call_index": get("call_index") if type(get("call_index")) is int else None,
        "sample_id": trainer.get("sample_id") if isinstance(trainer.get("sample_id"), str) else None,
        "step": get("step") if type(get("step")) is int else None,
        "role": role,
        "role_source": get("role_source"),
        "purpose": get("purpose"),
        "inferred_purpose": get("inferred_purpose"),
        "n_tokens": n,
        "lineage": None,
        "drift_if_retokenized": None,
        "alignment": None,
        "certificate": None,
        "tito_prefix_ok": None,
    }
    words = np.zeros(n, dtype=np.uint32)
    rules = dict.fromkeys(RULES, "pass")
    mask_used = None
    lmu = trainer.get("loss_mask_used")
    if isinstance(lmu, list):
        try:
            mask_used = np.asarray(lmu, dtype=np.float64).reshape(-1) == 1
        except (TypeError, ValueError):
            mask_used = np.fromiter((v == 1 for v in lmu), dtype=bool, count=len(lmu))
    result = CallResult(entry=entry, n=n, words=words, role=role, loss_mask_used=mask_used)

    def fail_all(code):
        words[:] |= BIT[code]
        rules[RULE_OF[code]] = "fail"

    def fail_at(code, where):
        if where.any():
            words[where] |= BIT[code]
            rules[RULE_OF[code]] = "fail"

    entry["rules"] = rules

    def finish(skip_from=None):
        return _finish(result, opts, skip_from)

    # ---- R0: structure, duplicates, vocabulary (other format problems are reported, not failed: each rule
    # that needs a missing field fails closed with its own <RULE>_NOT_EVALUABLE / unverified code)
    r0 = [i for i in issues if i.severity == "error" and is_critical(i.field)]
    fmt = [i for i in issues if i.severity == "error" and not is_critical(i.field)]
    if fmt:
        entry["format_issues"] = [{"field": i.field, "reason": i.reason} for i in fmt[:5]]
    if lineage.duplicate_of_line is not None:
        r0.append(_Issue("call_id", f"duplicate call_id (first on line {lineage.duplicate_of_line})"))
    if not r0 and tokenizer is not None:
        for part, arr in (("prompt", rec["prompt"]["token_ids"]), ("response", ids)):
            if arr:
                known = tokenizer.known(arr)
                if not known.all():
                    j = int(np.flatnonzero(~known)[0])
                    r0.append(_Issue(f"{part}.token_ids[{j}]", f"id {arr[j]} is not in the vocabulary of "
                                                               f"tokenizer {tokenizer.id}"))
                    break
    if r0:
        entry["malformed"] = [{"field": i.field, "reason": i.reason} for i in r0[:5]]
        if n:
            fail_all("MALFORMED")
        else:
            result.call_codes = int(BIT["MALFORMED"])
            rules["R0"] = "fail"
        return finish(skip_from="R1")

    # ---- R1: role
    rs = rec.get("role_source")
    sources = ("header", "config", "inferred") if opts.allow_inferred_roles else ("header", "config")
    r1 = None
    if role == "background":
        r1 = "BACKGROUND_CALL"
    elif role != "policy" or rs not in sources:
        r1 = "ROLE_UNVERIFIED"
    elif rec.get("purpose") == "retry":
        r1 = "SUPERSEDED_RETRY"
    if r1:
        if n:
            fail_all(r1)
        else:
            result.call_codes = int(BIT[r1])
            rules["R1"] = "fail"
        return finish(skip_from="R2")

    # ---- R2: response ids
    prov = resp.get("provenance")
    if prov not in ("engine", "engine_token_strings", "retokenized", "missing"):
        fail_all("R2_NOT_EVALUABLE")
    elif prov == "retokenized":
        fail_all("RESPONSE_IDS_RETOKENIZED")
    elif prov == "missing":
        fail_all("RESPONSE_IDS_MISSING")
    elif prov == "engine_token_strings":
        strings = resp.get("token_strings")
        if tokenizer is None:
            fail_all("R2_NOT_EVALUABLE")
        elif not isinstance(strings, list) or len(strings) != n or resp.get("usage_completion_tokens") != n:
            fail_all("RESPONSE_IDS_AMBIGUOUS")
        else:
            for s, i in zip(strings, ids):
                if not isinstance(s, str) or "\ufffd" in s or tokenizer.ids_for_string(s) != [i]:
                    fail_all("RESPONSE_IDS_AMBIGUOUS")
                    break

    # ---- R3: prompt ids
    if rec["prompt"].get("provenance") not in ("engine", "engine_input"):
        fail_all("PROMPT_IDS_UNVERIFIED")

    # ---- R4: consistency
    usage = resp.get("usage_completion_tokens")
    if type(usage) is int and usage != n:
        fail_all("TOKEN_COUNT_MISMATCH")
    text = resp.get("text")
    if text is not None:
        if tokenizer is None or not isinstance(text, str):
            fail_all("R4_NOT_EVALUABLE")
        else:
            skip = _obj(rec, "engine").get("skip_special_tokens")
            policies = (bool(skip),) if isinstance(skip, bool) else (False, True)
            if not any(tokenizer.decode(ids, skip_special_tokens=p) == text for p in policies):
                fail_all("TEXT_ID_MISMATCH")

    # ---- drift diagnostic (docs/fidelity-rules.md#rules-r0r9): engine-sourced ids only
    if opts.drift and tokenizer is not None and prov == "engine" and n:
        entry["drift_if_retokenized"] = tokenizer.drift_if_retokenized(ids)
    else:
        entry["drift_if_retokenized"] = None

    # ---- R5 (lineage) and R9 (merge chain) fail whole calls and need the whole file's index: apply_lineage
    prompt = rec["prompt"]
    src = prompt.get("context_source_call_id")
    result.lineage_input = {"evaluable": entry["trajectory_id"] is not None and entry["call_index"] is not None,
                            "declared": prompt.get("task_prompt_sha256_declared"),
                            "observed": prompt.get("task_prompt_sha256_observed"),
                            "context_event": prompt.get("context_event"),
                            "context_source": src if isinstance(src, str) else None}

    # ---- R6: rollout log-probs (token)
    ro = rec["rollout"]
    r_lp, r_missing = _floats(ro["logprobs"], n)
    finite = np.isfinite(r_lp)
    sentinel = finite & (r_lp <= opts.sentinel + 1e-6)
    nonfinite = (~finite & ~r_missing) | (finite & (r_lp > opts.positive_tol))
    fail_at("LOGPROB_MISSING", r_missing)
    fail_at("LOGPROB_NONFINITE", nonfinite)
    fail_at("SENTINEL_LOGPROB", sentinel)
    r_ok = finite & ~sentinel & ~nonfinite

    # ---- R7: log-prob semantics (call) + top-K consistency (token)
    eng = rec.get("engine")
    mode = eng.get("logprobs_mode") if isinstance(eng, dict) else None
    if not isinstance(eng, dict) or (mode == "raw_logprobs" and not isinstance(rec.get("sampling"), dict)):
        fail_all("R7_NOT_EVALUABLE")
    elif not (mode == "processed_logprobs" or (
            mode == "raw_logprobs" and eng.get("generation_config_source") == "request_only"
            and _untransformed(rec["sampling"]))):
        fail_all("LOGPROB_SEMANTICS_UNVERIFIED")
    rtk = ro.get("top_k")
    r_tk = None
    ids_arr = None
    if rtk is not None and n:
        ids_arr = np.asarray(ids, dtype=np.int64)
        r_tk = topk.get("rollout") or topk_arrays(rtk, n)
        tk_ids, tk_lps, _ = r_tk
        hit = tk_ids == ids_arr[:, None]
        listed = hit.any(1)
        val = np.where(hit, tk_lps, 0.0).sum(1)
        bad = listed & r_ok & ~(np.abs(val - np.where(r_ok, r_lp, 0.0)) <= opts.topk_tol)
        fail_at("TOPK_INCONSISTENT", bad)

    # ---- R8: trainer log-probs
    t_vals = trainer.get("logprobs")
    if t_vals is None:
        fail_all("TRAINER_LOGPROB_MISSING")
        t_ok = np.zeros(n, dtype=bool)
        t_lp = np.full(n, np.nan)
    else:
        t_lp, t_missing = _floats(t_vals, n)
        t_fin = np.isfinite(t_lp)
        t_bad = (~t_fin & ~t_missing) | (t_fin & (t_lp > opts.positive_tol))
        fail_at("TRAINER_LOGPROB_MISSING", t_missing)
        fail_at("TRAINER_LOGPROB_NONFINITE", t_bad)
        t_ok = t_fin & ~t_bad
    both = r_ok & t_ok
    if both.any():
        d = np.abs(t_lp[both] - r_lp[both])
        med = _median(d)
        result.align_diff = d
        result.binary_tv = np.abs(np.exp(t_lp[both]) - np.exp(r_lp[both]))
        entry["alignment"] = {"median_abs_diff": med, "mean_abs_diff": float(d.mean()), "max_abs_diff": float(d.max()),
                              "positions": int(both.sum())}
        if med > opts.tau_align:
            fail_all("TRAINER_MISALIGNED")
    else:
        entry["alignment"] = None
    if opts.max_staleness is not None:
        tv, mv = trainer.get("policy_version"), _obj(rec, "model").get("policy_version")
        if type(tv) is not int or type(mv) is not int:
            fail_all("R8_NOT_EVALUABLE")
        elif tv - mv > opts.max_staleness:
            fail_all("STALE_ROLLOUT")
    tpv = ro.get("token_policy_versions")
    if tpv and n:
        v = np.asarray(tpv, dtype=np.int64)
        fail_at("MIXED_POLICY_VERSION", v != v.max())

    if opts.certificates:  # arrays only: the record itself is released before the certificates are computed
        t_tk = trainer.get("top_k")
        if isinstance(t_tk, list) and n:
            t_tk = topk.get("trainer") or topk_arrays(t_tk, n)
        else:
            t_tk = None
        result.cert_arrays = {"r_lp": r_lp, "t_lp": t_lp, "r_tk": r_tk, "t_tk": t_tk,
                              "ids": ids_arr if ids_arr is not None else np.asarray(ids, dtype=np.int64)}
    if defer_lineage:
        return result
    return apply_lineage(result, lineage, opts)


@dataclass
class _Issue:
    field: str
    reason: str
    severity: str = "error"
