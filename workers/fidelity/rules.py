"""The audit rules R0–R9 of docs/fidelity-rules.md#rules-r0r9, evaluated on one call.

The reason codes and the per-position bit words they are marked in are :mod:`workers.fidelity.codes`; the rules
about numbers (R6 rollout log-probs, R7 semantics and top-K, R8 trainer log-probs) are
:mod:`workers.fidelity.logprob_rules`. This module holds the call's result, the rules about identity and ids (R0–R4),
the context rules that need the whole file (R5, R9: :func:`apply_lineage`) and :func:`evaluate_call`, which runs
them in order.

Evaluation order and the docs/fidelity-rules.md#rules-r0r9 short-circuits:

* R0 ``MALFORMED`` (structure, alignment, vocabulary) — nothing else can be trusted: later rules ``n/a``.
* R1 role — a call failing R1 is not evaluated further (later rules ``n/a``).
* R2–R9 are all evaluated so that every failure is listed.

Closed failure (docs/fidelity-rules.md#definitions): a rule that cannot be evaluated fails with
``<RULE>_NOT_EVALUABLE`` (R2 without the
tokenizer for ``engine_token_strings``; R4 when ``response.text`` is present but the tokenizer is not registered;
R8 when a staleness bound is configured but a policy version is missing).

Choices the rules leave open (docs/fidelity.md#audit--workersfidelity): R4 text comparison uses
``engine.skip_special_tokens`` when declared; when it is not, a match under either policy passes. (R6–R8's are in
:mod:`workers.fidelity.logprob_rules`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workers.fcr.validate import topk_arrays, topk_checked  # noqa: F401  (re-exported: the audit reads them here)
from workers.fidelity import logprob_rules
from workers.fidelity.codes import (  # noqa: F401 - re-exported: callers read the codes from the rules
    BIT,
    CODES,
    REASONS,
    RULE_OF,
    RULES,
    codes_of,
    fail_all,
    is_critical,
    spans_of,
)


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


def _finish(result: CallResult, opts: AuditOptions, skip_from=None) -> CallResult:
    rules = result.entry["rules"]
    if skip_from is not None:
        for r in RULES[RULES.index(skip_from) :]:
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
        fail_all(result, "R5_NOT_EVALUABLE")
    elif lineage.is_root:
        dec, obs = li["declared"], li["observed"]
        if dec is None or obs is None:
            entry["lineage"] = "root-undeclared"
            fail_all(result, "LINEAGE_UNVERIFIED")
        elif dec != obs:
            entry["lineage"] = "root-mismatch"
            fail_all(result, "PROMPT_NOT_ORIGINAL")
        else:
            entry["lineage"] = "root-ok"
    elif lineage.root_prefix_ok:
        entry["lineage"] = "prefix-ok"
    elif li["context_event"] is not None and lineage.context_source_present:
        entry["lineage"] = f"context-{li['context_event']}-ok"
    else:
        entry["lineage"] = "unverified" if lineage.root_prefix_ok is not None else "root-unknown"
        fail_all(result, "LINEAGE_UNVERIFIED")
    if opts.mode == "merged" and lineage.chain_broken:
        fail_all(result, "PREFIX_CHAIN_BROKEN")
    return _finish(result, opts)


# ------------------------------------------------------------------------------------------- R0–R9
def evaluate_call(
    rec: dict,
    *,
    line: int,
    issues: list,
    tokenizer,
    lineage: Lineage | None,
    opts: AuditOptions,
    defer_lineage: bool = False,
    topk: dict | None = None,
) -> CallResult:
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
    result, resp, ids, trainer = _new_result(rec, line)
    n = result.n
    if _r0_malformed(rec, result, issues, lineage, tokenizer, ids):
        return _finish(result, opts, skip_from="R1")
    if _r1_role(rec, result, opts):
        return _finish(result, opts, skip_from="R2")
    _r2_response_ids(resp, ids, result, tokenizer)
    if rec["prompt"].get("provenance") not in ("engine", "engine_input"):  # R3: prompt ids
        fail_all(result, "PROMPT_IDS_UNVERIFIED")
    _r4_consistency(rec, resp, ids, result, tokenizer)
    # drift diagnostic (docs/fidelity-rules.md#rules-r0r9): engine-sourced ids only
    engine_ids = opts.drift and tokenizer is not None and resp.get("provenance") == "engine" and n
    result.entry["drift_if_retokenized"] = tokenizer.drift_if_retokenized(ids) if engine_ids else None
    # R5 (lineage) and R9 (merge chain) fail whole calls and need the whole file's index: apply_lineage
    result.lineage_input = _lineage_input(rec["prompt"], result.entry)
    r_lp, r_ok = logprob_rules.rollout_logprobs(rec, result, opts, n)
    r_tk, ids_arr = logprob_rules.semantics_and_topk(rec, result, opts, ids, n, r_lp, r_ok, topk)
    t_lp = logprob_rules.trainer_logprobs(rec, trainer, result, opts, n, r_lp, r_ok)
    if opts.certificates:  # arrays only: the record itself is released before the certificates are computed
        t_tk = trainer.get("top_k")
        t_tk = (topk.get("trainer") or topk_arrays(t_tk, n)) if isinstance(t_tk, list) and n else None
        result.cert_arrays = {
            "r_lp": r_lp,
            "t_lp": t_lp,
            "r_tk": r_tk,
            "t_tk": t_tk,
            "ids": ids_arr if ids_arr is not None else np.asarray(ids, dtype=np.int64),
        }
    if defer_lineage:
        return result
    return apply_lineage(result, lineage, opts)


def _new_result(rec, line: int):
    """The call's report entry and empty bit words, read defensively (R0 has not judged the record yet)."""
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
    mask_used = None
    lmu = trainer.get("loss_mask_used")
    if isinstance(lmu, list):
        try:
            mask_used = np.asarray(lmu, dtype=np.float64).reshape(-1) == 1
        except (TypeError, ValueError):
            mask_used = np.fromiter((v == 1 for v in lmu), dtype=bool, count=len(lmu))
    result = CallResult(entry=entry, n=n, words=np.zeros(n, dtype=np.uint32), role=role, loss_mask_used=mask_used)
    entry["rules"] = dict.fromkeys(RULES, "pass")
    return result, resp, ids, trainer


def _fail_call(result: CallResult, code: str) -> None:
    """A short-circuiting failure (R0, R1): on every position, or as a call-level code when there are none."""
    if result.n:
        fail_all(result, code)
    else:
        result.call_codes = int(BIT[code])
        result.entry["rules"][RULE_OF[code]] = "fail"


def _r0_malformed(rec, result: CallResult, issues: list, lineage: Lineage, tokenizer, ids) -> bool:
    """R0: structure, duplicates, vocabulary. Other format problems are reported, not failed: each rule that needs
    a missing field fails closed with its own <RULE>_NOT_EVALUABLE / unverified code. True: the call is MALFORMED."""
    entry = result.entry
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
                    r0.append(
                        _Issue(
                            f"{part}.token_ids[{j}]",
                            f"id {arr[j]} is not in the vocabulary of tokenizer {tokenizer.id}",
                        )
                    )
                    break
    if not r0:
        return False
    entry["malformed"] = [{"field": i.field, "reason": i.reason} for i in r0[:5]]
    _fail_call(result, "MALFORMED")
    return True


def _r1_role(rec: dict, result: CallResult, opts: AuditOptions) -> bool:
    """R1: a declared policy call (inferred roles only when allowed), not a superseded retry. True: it failed."""
    role, rs = result.role, rec.get("role_source")
    sources = ("header", "config", "inferred") if opts.allow_inferred_roles else ("header", "config")
    r1 = None
    if role == "background":
        r1 = "BACKGROUND_CALL"
    elif role != "policy" or rs not in sources:
        r1 = "ROLE_UNVERIFIED"
    elif rec.get("purpose") == "retry":
        r1 = "SUPERSEDED_RETRY"
    if r1:
        _fail_call(result, r1)
    return r1 is not None


def _r2_response_ids(resp: dict, ids, result: CallResult, tokenizer) -> None:
    """R2: the response ids are the engine's (or its token strings map back to exactly those ids)."""
    prov = resp.get("provenance")
    if prov not in ("engine", "engine_token_strings", "retokenized", "missing"):
        fail_all(result, "R2_NOT_EVALUABLE")
    elif prov == "retokenized":
        fail_all(result, "RESPONSE_IDS_RETOKENIZED")
    elif prov == "missing":
        fail_all(result, "RESPONSE_IDS_MISSING")
    elif prov == "engine_token_strings":
        strings = resp.get("token_strings")
        if tokenizer is None:
            fail_all(result, "R2_NOT_EVALUABLE")
        elif (
            not isinstance(strings, list) or len(strings) != result.n or resp.get("usage_completion_tokens") != result.n
        ):
            fail_all(result, "RESPONSE_IDS_AMBIGUOUS")
        elif any(
            not isinstance(s, str) or "\ufffd" in s or tokenizer.ids_for_string(s) != [i] for s, i in zip(strings, ids)
        ):
            fail_all(result, "RESPONSE_IDS_AMBIGUOUS")


def _r4_consistency(rec: dict, resp: dict, ids, result: CallResult, tokenizer) -> None:
    """R4: the engine's token count and, when the text is given, the text decoded from the ids agree."""
    usage = resp.get("usage_completion_tokens")
    if type(usage) is int and usage != result.n:
        fail_all(result, "TOKEN_COUNT_MISMATCH")
    text = resp.get("text")
    if text is None:
        return
    if tokenizer is None or not isinstance(text, str):
        fail_all(result, "R4_NOT_EVALUABLE")
        return
    eng = rec.get("engine")
    skip = eng.get("skip_special_tokens") if isinstance(eng, dict) else None
    policies = (bool(skip),) if isinstance(skip, bool) else (False, True)
    if not any(tokenizer.decode(ids, skip_special_tokens=p) == text for p in policies):
        fail_all(result, "TEXT_ID_MISMATCH")


def _lineage_input(prompt: dict, entry: dict) -> dict:
    src = prompt.get("context_source_call_id")
    return {
        "evaluable": entry["trajectory_id"] is not None and entry["call_index"] is not None,
        "declared": prompt.get("task_prompt_sha256_declared"),
        "observed": prompt.get("task_prompt_sha256_observed"),
        "context_event": prompt.get("context_event"),
        "context_source": src if isinstance(src, str) else None,
    }


@dataclass
class _Issue:
    field: str
    reason: str
    severity: str = "error"
