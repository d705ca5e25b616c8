"""Structural validation of ``fcr/1`` records and files (docs/fcr.md#record-fields, docs/fcr.md#conventions; audit
rule R0).

What this checks is the *upload format*: required fields present with the right JSON types, ``schema ==
"fcr/1"``, the role / provenance enums, and that every per-token array under ``rollout``/``trainer`` is aligned
1:1 with ``response.token_ids``. Token ids must be non-negative ints, ``top_k`` entries ``[int, number]``,
``loss_mask_used`` 0/1 and logprobs number-or-null.

What the *audit* judges (sentinel log-probs, positive log-probs, unsorted top-K, hash mismatches, unknown
engine enum values) is not a format error: those are reported as ``warning`` at most, because a faithful log
of a bad run must still upload so that the audit can say *why* it is bad.

Speed: the portal validates uploads with a budget of ≤ 2× a plain ``orjson`` parse, so the per-token checks
are C-level passes (``set(map(type, xs))``, ``min``, ``len``) and a Python loop only runs on a failure, to name
the first offending index.

Missing *nullable* fields (``response.text``, ``prompt.task_prompt_sha256_*``) are treated as null (the
worked example docs/fcr.md#example-c-a-background-call omits ``response.text``).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from array import array
from itertools import chain

import numpy as np
import orjson

from workers.fcr.reader import FcrParseError, LineReader, iter_lines
from workers.fcr.routes import LayerCounts, has_routes, n_layers, routes_issues

SCHEMA = "fcr/1"
ROLES = frozenset({"policy", "background", "unknown"})
ROLE_SOURCES = frozenset({"header", "config", "inferred", "default"})
PROMPT_PROVENANCE = frozenset({"engine", "engine_input", "rendered", "retokenized", "missing"})
RESPONSE_PROVENANCE = frozenset({"engine", "engine_token_strings", "retokenized", "missing"})
CONTEXT_EVENTS = frozenset({None, "compaction", "truncation", "retry"})
LOGPROBS_MODES = frozenset({"raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits", None})
GENERATION_CONFIG_SOURCES = frozenset({"request_only", "hf_defaults", "unknown"})
ENGINE_APIS = frozenset({"chat.completions", "completions", "generate", "responses", "messages"})
SENTINEL = -9999.0  # docs/fcr.md#conventions: values ≤ −9999 + 1e-6 are sentinels
SENTINEL_CUT = SENTINEL + 1e-6
POSITIVE_CUT = 1e-6  # R6: a log-prob above this is not a log-probability

_NoneType = type(None)
_T_INT = frozenset({int})
_T_NUM = frozenset({int, float})
_T_FLOAT = frozenset({float})
_T_NUM_NULL = frozenset({int, float, _NoneType})
_T_STR = frozenset({str})
_T_LIST = frozenset({list})
_LEN2 = frozenset({2})
_BITS = frozenset({0, 1})


@dataclass(slots=True)
class FcrIssue:
    """One validation finding. ``field`` is a dotted path, e.g. ``rollout.logprobs[3]``."""

    line: int
    call_id: str | None
    field: str
    reason: str
    severity: str = "error"  # "error" | "warning"

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------- helpers
# Each helper returns None when the value is fine, else (field_suffix, reason) of the *first* problem.


def _is_int(v) -> bool:
    return type(v) is int  # bool is excluded on purpose


def _is_num(v) -> bool:
    return type(v) is int or type(v) is float


def _member(v, allowed) -> bool:
    """Enum membership that tolerates unhashable JSON values (lists, dicts)."""
    return (v is None or type(v) is str) and v in allowed


def _first(xs, ok) -> int:
    for i, x in enumerate(xs):
        if not ok(x):
            return i
    return -1


def _check_ids(a, fast=False):
    """Non-negative int list. ``fast``: the caller guarantees no JSON booleans in arrays (see
    :func:`array_bools_possible`), so one ``array('Q', …)`` pass checks int-ness and sign together."""
    if type(a) is not list:
        return "", f"expected a list of token ids, got {type(a).__name__}"
    if not a:
        return None
    if fast:
        try:
            array("Q", a)
            return None
        except (TypeError, OverflowError):
            pass
    if not set(map(type, a)) <= _T_INT:
        i = _first(a, _is_int)
        return f"[{i}]", f"token id must be an int, got {type(a[i]).__name__}"
    if min(a) < 0:
        i = _first(a, lambda x: x >= 0)
        return f"[{i}]", f"token id must be non-negative, got {a[i]}"
    if fast and max(a) >= 1 << 64:
        i = _first(a, lambda x: x < 1 << 64)
        return f"[{i}]", f"token id out of range, got {a[i]}"
    return None


def _check_lps(a, n):
    """(number|null)[] aligned to n."""
    if type(a) is not list:
        return "", f"expected a list of log-probs, got {type(a).__name__}"
    if len(a) != n:
        return "", f"length {len(a)} != len(response.token_ids) {n}"
    if a and not set(map(type, a)) <= _T_NUM_NULL:
        i = _first(a, lambda x: x is None or _is_num(x))
        return f"[{i}]", f"log-prob must be a number or null, got {type(a[i]).__name__}"
    return None


def _check_ints_aligned(a, n, what):
    if type(a) is not list:
        return "", f"expected a list of {what}, got {type(a).__name__}"
    if len(a) != n:
        return "", f"length {len(a)} != len(response.token_ids) {n}"
    if a and not set(map(type, a)) <= _T_INT:
        i = _first(a, _is_int)
        return f"[{i}]", f"{what} must be an int, got {type(a[i]).__name__}"
    return None


def _check_mask(a, n, fast=False):
    if type(a) is list and len(a) == n and fast:
        try:  # bytes() accepts only ints 0..255; translate() then deletes the 0/1 bytes
            if not bytes(a).translate(None, b"\x00\x01"):
                return None
        except (TypeError, ValueError):
            pass
    r = _check_ints_aligned(a, n, "mask value")
    if r is not None:
        return r
    if a and not set(a) <= _BITS:
        i = _first(a, lambda x: x == 0 or x == 1)
        return f"[{i}]", f"mask value must be 0 or 1, got {a[i]}"
    return None


def _check_topk(tk, n, fast=False, padding=False):
    """[[id:int≥0, lp:number], …] per position, aligned to n. Sortedness is the audit's business.
    ``padding=True`` also accepts the id −1 (a padded slot; the certificate engine's convention) and no other
    negative id."""
    if type(tk) is not list:
        return "", f"expected a per-position list, got {type(tk).__name__}"
    if len(tk) != n:
        return "", f"length {len(tk)} != len(response.token_ids) {n}"
    if not tk:
        return None
    if not set(map(type, tk)) <= _T_LIST:
        i = _first(tk, lambda x: type(x) is list)
        return f"[{i}]", f"expected a list of [id, logprob] pairs, got {type(tk[i]).__name__}"
    if n <= 8:  # tiny calls: a plain loop beats the fixed cost of the C passes below
        for pos in tk:
            for e in pos:
                if not (type(e) is list and len(e) == 2 and type(e[0]) is int and e[0] >= 0
                        and type(e[1]) in _T_NUM):
                    break
            else:
                continue
            break
        else:
            return None
    # Fast path (typical engine output: ids are ints, log-probs floats): a handful of C-level passes.
    entries = list(chain.from_iterable(tk))
    if not entries:
        return None
    try:
        flat = list(chain.from_iterable(entries))
    except TypeError:
        flat = None
    if flat is not None and len(flat) == 2 * len(entries) and list(map(len, entries)).count(2) == len(entries):
        if fast:
            if _check_ids(flat[0::2], True) is None and set(map(type, flat[1::2])) <= _T_NUM:
                return None
        else:
            ids = flat[0::2]
            if set(map(type, ids)) <= _T_INT and set(map(type, flat[1::2])) <= _T_NUM and min(ids) >= 0:
                return None
    # Exact path: integral log-probs (e.g. JSON ``0`` written by a JS client) are fine; name the first bad entry.
    for t, pos in enumerate(tk):
        for j, e in enumerate(pos):
            where = f"[{t}][{j}]"
            if type(e) is not list or len(e) != 2:
                return where, "top-K entry must be a [token_id, logprob] pair"
            if not _is_int(e[0]) or (e[0] < 0 and not (padding and e[0] == -1)):
                return where, (f"top-K token id must be a non-negative int{' (or -1 for padding)' if padding else ''}"
                               f", got {e[0]!r}")
            if not _is_num(e[1]):
                return where, f"top-K log-prob must be a number, got {type(e[1]).__name__}"
    return None


# Public names for other engines' intake (workers.certify reads the same arrays): one set of field checks.
check_logprobs = _check_lps
check_topk = _check_topk


def _lp_warnings(a):
    """Audit-level findings on a log-prob list (already type-checked): sentinels and positive values."""
    if not a:
        return None
    try:
        lo, hi = min(a), max(a)
    except TypeError:  # nulls present
        vals = [x for x in a if x is not None]
        if not vals:
            return None
        lo, hi = min(vals), max(vals)
    out = []
    if lo <= SENTINEL_CUT:
        i = _first(a, lambda x: x is None or x > SENTINEL_CUT)
        out.append((f"[{i}]", "sentinel log-prob (≤ -9999); the audit excludes such positions (R6)"))
    if hi > POSITIVE_CUT:
        i = _first(a, lambda x: x is None or x <= POSITIVE_CUT)
        out.append((f"[{i}]", "positive log-prob; the audit excludes such positions (R6/R8)"))
    return out


# --------------------------------------------------------------------------------------------- arrays
# Conversion of the per-token lists to numpy arrays, checking the structure in the same C-level passes: the audit
# (workers.fidelity) and the certificate engine (workers.certify) read records through these.


def topk_arrays(tk, n):
    """Ragged ``[[id, lp], …]`` per position → (ids int64 [n, K] padded −1, lps float64 [n, K] padded NaN, lens)."""
    lens = np.fromiter(map(len, tk), dtype=np.int64, count=n) if n else np.zeros(0, dtype=np.int64)
    K = int(lens.max()) if n else 0
    m = int(lens.sum())
    if m == 0:
        return np.full((n, K), -1, dtype=np.int64), np.full((n, K), np.nan), lens
    flat = list(chain.from_iterable(chain.from_iterable(tk)))
    if (lens == K).all():  # common case: one float64 conversion, then a reshape
        a = np.asarray(flat, dtype=np.float64).reshape(n, K, 2)
        if a[:, :, 0].max() < 2.0 ** 53:  # ids exact in float64
            return a[:, :, 0].astype(np.int64), np.ascontiguousarray(a[:, :, 1]), lens
    ids = np.full((n, K), -1, dtype=np.int64)
    lps = np.full((n, K), np.nan)
    rows = np.repeat(np.arange(n), lens)
    cols = np.arange(m) - np.repeat(np.cumsum(lens) - lens, lens)
    ids[rows, cols] = np.asarray(flat[0::2], dtype=np.int64)
    lps[rows, cols] = np.asarray(flat[1::2], dtype=np.float64)
    return ids, lps, lens


def topk_checked(tk, n):
    """A well-formed top-K list (per position ``[[id:int≥0, lp:number], …]``, aligned to n;
    docs/fcr.md#rollout-and-trainer) as
    :func:`topk_arrays` returns it, checking the structure in the same C-level passes that convert it; ``None`` when
    anything is unusual (then the validator names the problem and :func:`topk_arrays` converts).

    The caller guarantees that no JSON boolean is an array element of the source line
    (:func:`workers.fcr.validate.array_bools_possible`): ``array('q')``/``array('d')`` would take booleans as 0/1."""
    if type(tk) is not list or len(tk) != n:
        return None
    if n == 0:
        return np.zeros((0, 0), dtype=np.int64), np.zeros((0, 0)), np.zeros(0, dtype=np.int64)
    try:
        entries = list(chain.from_iterable(tk))
        # every entry has length 2; a position or entry that is not a list (a JSON object or string) flattens to
        # strings, which the typed arrays below refuse, and a number or null does not flatten at all — so this and
        # the conversions are the validator's list/pair/int/number checks
        if list(map(len, entries)).count(2) != len(entries):
            return None
        flat = list(chain.from_iterable(entries))
        ids = np.frombuffer(array("q", flat[0::2]), dtype=np.int64)
        lps = np.frombuffer(array("d", flat[1::2]), dtype=np.float64)
    except (TypeError, OverflowError, ValueError):
        return None
    if len(ids) and ids.min() < 0:
        return None
    lens = np.fromiter(map(len, tk), dtype=np.int64, count=n)
    K = int(lens.max())
    if len(ids) == n * K:  # uniform K: a reshape
        return ids.reshape(n, K), lps.reshape(n, K), lens
    out_ids = np.full((n, K), -1, dtype=np.int64)
    out_lps = np.full((n, K), np.nan)
    rows = np.repeat(np.arange(n), lens)
    cols = np.arange(len(ids)) - np.repeat(np.cumsum(lens) - lens, lens)
    out_ids[rows, cols] = ids
    out_lps[rows, cols] = lps
    return out_ids, out_lps, lens


def topk_uncovered(rollout_topk, trainer_topk):
    """Positions where ``trainer.top_k`` misses an id of ``rollout.top_k`` (fcr/1 requires the trainer list to cover
    the rollout's ids; a certificate there is looser). Lists already type-checked. Returns ``(count, first)``, first
    = −1 when none."""
    count, first = 0, -1
    for t, (ro, tr) in enumerate(zip(rollout_topk, trainer_topk)):
        if ro and not {e[0] for e in ro if e[0] >= 0} <= {e[0] for e in tr}:
            count += 1
            if first < 0:
                first = t
    return count, first


def array_bools_possible(line: bytes) -> bool:
    """True unless the raw JSON line provably has no boolean *array element*: every ``true``/``false``
    literal is preceded (whitespace aside) by ``:`` (an object value) or sits inside text that is not
    preceded by ``[``/``,``. False positives (e.g. a string containing ``",true"``) only cost speed."""
    for lit in (b"true", b"false"):
        i = line.find(lit)
        while i != -1:
            j = i - 1
            while j >= 0 and line[j] in b" \t\r\n":
                j -= 1
            if j < 0 or line[j] in b"[,":
                return True
            i = line.find(lit, i + 1)
    return False


def ids_sha256(ids) -> str:
    """SHA-256 of the ids joined by ',' (no spaces; docs/fcr.md#conventions)."""
    return hashlib.sha256(",".join(map(str, ids)).encode("ascii")).hexdigest()


# --------------------------------------------------------------------------------------------- record

_STRN = frozenset({str, type(None)})
_INTN = frozenset({int, type(None)})
_DICTN = frozenset({dict, type(None)})
_NUMN = frozenset({int, float, type(None)})


def _fast_valid(rec, fast) -> bool:
    """One chained pass that accepts exactly the records :func:`validate_record` finds no issue in (with
    ``lint=False, check_hashes=False``); anything else (or any surprise) goes to the detailed path, which names
    the problem. Keeps the per-record fixed cost low for small records."""
    try:
        g = rec.get
        model, tok, eng, prompt, resp, ro = g("model"), g("tokenizer"), g("engine"), rec["prompt"], rec["response"], \
            rec["rollout"]
        ct = rec["chat_template"]
        if not (rec["schema"] == SCHEMA
                and type(rec["run_id"]) is str and rec["run_id"] and type(rec["trajectory_id"]) is str
                and rec["trajectory_id"] and type(rec["call_id"]) is str and rec["call_id"]
                and type(rec["step"]) is int and type(rec["call_index"]) is int
                and type(rec["role"]) is str and rec["role"] in ROLES
                and type(rec["role_source"]) is str and rec["role_source"] in ROLE_SOURCES
                and type(g("parent_call_id")) in _STRN and type(g("timestamp")) in _NUMN
                and type(g("purpose")) in _STRN and type(g("inferred_purpose")) in _STRN
                and type(model) is dict and type(model.get("served_name")) is str
                and type(model.get("policy_version")) in _INTN
                and type(tok) is dict and type(tok.get("id")) is str and type(tok.get("sha256")) is str
                and (ct is None or (type(ct) is dict and type(ct.get("sha256")) is str))
                and type(eng) is dict and type(eng.get("name")) is str
                and type(eng.get("api")) is str and eng["api"] in ENGINE_APIS
                and type(eng.get("logprobs_mode")) in _STRN and eng.get("logprobs_mode") in LOGPROBS_MODES
                and type(eng.get("generation_config_source")) is str
                and eng["generation_config_source"] in GENERATION_CONFIG_SOURCES
                and type(g("sampling")) is dict and type(g("source")) is dict
                and type(g("harness")) in _DICTN and type(g("extra")) in _DICTN
                and type(prompt) is dict and type(resp) is dict and type(ro) is dict):
            return False
        pids, ids = prompt["token_ids"], resp["token_ids"]
        if not (type(prompt["provenance"]) is str and prompt["provenance"] in PROMPT_PROVENANCE
                and type(prompt["ids_sha256"]) is str
                and type(prompt.get("task_prompt_sha256_declared")) in _STRN
                and type(prompt.get("task_prompt_sha256_observed")) in _STRN
                and type(prompt.get("context_source_call_id")) in _STRN
                and type(prompt.get("context_event")) in _STRN and prompt.get("context_event") in CONTEXT_EVENTS
                and type(resp["provenance"]) is str and resp["provenance"] in RESPONSE_PROVENANCE
                and type(resp["ids_sha256"]) is str and type(resp.get("text")) in _STRN
                and type(resp.get("usage_completion_tokens")) in _INTN and type(resp.get("finish_reason")) in _STRN
                and type(pids) is list and type(ids) is list
                and _check_ids(pids, fast) is None and _check_ids(ids, fast) is None):
            return False
        n = len(ids)
        ts = resp.get("token_strings")
        if ts is not None and not (type(ts) is list and len(ts) == n and (not ts or set(map(type, ts)) <= _T_STR)):
            return False
        if _check_lps(ro["logprobs"], n) is not None:
            return False
        v = ro.get("top_k")
        if v is not None and _check_topk(v, n, fast) is not None:
            return False
        v = ro.get("token_policy_versions")
        if v is not None and _check_ints_aligned(v, n, "") is not None:
            return False
        tr = g("trainer")
        if tr is not None:
            if not (type(tr) is dict and type(tr.get("policy_version")) in _INTN and type(tr.get("sample_id")) in _STRN):
                return False
            v = tr.get("logprobs")
            if v is not None and _check_lps(v, n) is not None:
                return False
            v = tr.get("top_k")
            if v is not None and _check_topk(v, n, fast) is not None:
                return False
            v = tr.get("loss_mask_used")
            if v is not None and _check_mask(v, n, fast) is not None:
                return False
        return True
    except (KeyError, TypeError, AttributeError):
        return False




def validate_record(
    rec, *, line: int = 0, check_hashes: bool = False, lint: bool = True, no_array_bools: bool = False
) -> list[FcrIssue]:
    """Structural (R0) issues of one parsed record; an empty list means the record is well-formed.

    ``check_hashes=True`` also recomputes ``ids_sha256`` (a *warning* on mismatch; costs a join per token).
    ``lint=False`` skips the audit-level warnings (sentinel / positive log-probs).
    ``no_array_bools=True`` is a promise by the caller that no JSON ``true``/``false`` occurs as an array
    element in the source line (:func:`array_bools_possible` checks that on the raw bytes); it enables
    single-pass C conversions (``array('Q')``, ``bytes()``) that would otherwise accept booleans as 0/1.
    """
    fast = no_array_bools
    if not lint and not check_hashes and type(rec) is dict and _fast_valid(rec, fast):
        if not has_routes(rec):
            return []
        cid = rec["call_id"]
        return [FcrIssue(line, cid, f, r) for f, r in routes_issues(rec, len(rec["response"]["token_ids"]))]
    issues: list[FcrIssue] = []
    if type(rec) is not dict:
        return [FcrIssue(line, None, "", f"expected a JSON object, got {type(rec).__name__}")]
    get = rec.get
    cid = get("call_id")
    call_id = cid if type(cid) is str and cid else None

    def err(field, reason):
        issues.append(FcrIssue(line, call_id, field, reason, "error"))

    def warn(field, reason):
        issues.append(FcrIssue(line, call_id, field, reason, "warning"))

    # --- top-level scalars
    sch = get("schema")
    if sch != SCHEMA:
        err("schema", "missing" if sch is None else f"expected 'fcr/1', got {sch!r}")
    for k in ("run_id", "trajectory_id", "call_id"):
        v = get(k)
        if type(v) is not str or not v:
            err(k, "missing" if v is None else f"expected a non-empty string, got {type(v).__name__}")
    for k in ("step", "call_index"):
        v = get(k)
        if type(v) is not int:
            err(k, "missing" if v is None else f"expected an int, got {type(v).__name__}")
    role = get("role")
    if not _member(role, ROLES):
        err("role", "missing" if role is None else f"expected one of policy|background|unknown, got {role!r}")
    rs = get("role_source")
    if not _member(rs, ROLE_SOURCES):
        err("role_source", "missing" if rs is None else f"expected one of header|config|inferred|default, got {rs!r}")
    v = get("parent_call_id")
    if v is not None and type(v) is not str:
        err("parent_call_id", "expected a string or null")
    v = get("timestamp")
    if v is not None and not _is_num(v):
        err("timestamp", "expected a number")
    for k in ("purpose", "inferred_purpose"):
        v = get(k)
        if v is not None and type(v) is not str:
            err(k, "expected a string")

    # --- objects
    model = get("model")
    if type(model) is not dict:
        err("model", "missing" if model is None else "expected an object")
    else:
        if type(model.get("served_name")) is not str:
            err("model.served_name", "expected a string")
        pv = model.get("policy_version")
        if pv is not None and type(pv) is not int:
            err("model.policy_version", "expected an int or null")
    tok = get("tokenizer")
    if type(tok) is not dict:
        err("tokenizer", "missing" if tok is None else "expected an object")
    else:
        for k in ("id", "sha256"):
            if type(tok.get(k)) is not str:
                err(f"tokenizer.{k}", "expected a string")
    if "chat_template" not in rec:
        err("chat_template", "missing (use null for token-input calls)")
    else:
        ct = rec["chat_template"]
        if ct is not None:
            if type(ct) is not dict:
                err("chat_template", "expected an object or null")
            elif type(ct.get("sha256")) is not str:
                err("chat_template.sha256", "expected a string")
    eng = get("engine")
    if type(eng) is not dict:
        err("engine", "missing" if eng is None else "expected an object")
    else:
        if type(eng.get("name")) is not str:
            err("engine.name", "expected a string")
        api = eng.get("api")
        if type(api) is not str:
            err("engine.api", "expected a string")
        elif api not in ENGINE_APIS:
            warn("engine.api", f"unknown api {api!r}")
        lm = eng.get("logprobs_mode")
        if not _member(lm, LOGPROBS_MODES):
            warn("engine.logprobs_mode", f"unknown logprobs_mode {lm!r}; the audit cannot verify semantics (R7)")
        gs = eng.get("generation_config_source")
        if not _member(gs, GENERATION_CONFIG_SOURCES):
            warn("engine.generation_config_source", f"unknown or missing value {gs!r} (treated as 'unknown')")
    samp = get("sampling")
    if type(samp) is not dict:
        err("sampling", "missing" if samp is None else "expected an object")
    src = get("source")
    if type(src) is not dict:
        err("source", "missing" if src is None else "expected an object")
    for k in ("harness", "extra"):
        v = get(k)
        if v is not None and type(v) is not dict:
            err(k, "expected an object")

    # --- prompt
    prompt = get("prompt")
    if type(prompt) is not dict:
        err("prompt", "missing" if prompt is None else "expected an object")
    else:
        r = _check_ids(prompt.get("token_ids"), fast)
        if r is not None:
            err("prompt.token_ids" + r[0], r[1] if "token_ids" in prompt else "missing")
        pp = prompt.get("provenance")
        if not _member(pp, PROMPT_PROVENANCE):
            err("prompt.provenance", f"expected one of {'|'.join(sorted(PROMPT_PROVENANCE))}, got {pp!r}")
        if type(prompt.get("ids_sha256")) is not str:
            err("prompt.ids_sha256", "missing" if "ids_sha256" not in prompt else "expected a hex string")
        elif check_hashes and r is None and prompt["ids_sha256"] != ids_sha256(prompt["token_ids"]):
            warn("prompt.ids_sha256", "does not match the token ids (docs/fcr.md#conventions)")
        for k in ("task_prompt_sha256_declared", "task_prompt_sha256_observed", "context_source_call_id"):
            v = prompt.get(k)
            if v is not None and type(v) is not str:
                err(f"prompt.{k}", "expected a string or null")
        if not _member(prompt.get("context_event"), CONTEXT_EVENTS):
            err("prompt.context_event", f"expected null|compaction|truncation|retry, got {prompt.get('context_event')!r}")

    # --- response (defines n, the alignment length)
    resp = get("response")
    n = None
    if type(resp) is not dict:
        err("response", "missing" if resp is None else "expected an object")
    else:
        ids = resp.get("token_ids")
        r = _check_ids(ids, fast)
        if r is not None:
            err("response.token_ids" + r[0], r[1] if "token_ids" in resp else "missing")
        if type(ids) is list:
            n = len(ids)
        rp = resp.get("provenance")
        if not _member(rp, RESPONSE_PROVENANCE):
            err("response.provenance", f"expected one of {'|'.join(sorted(RESPONSE_PROVENANCE))}, got {rp!r}")
        if type(resp.get("ids_sha256")) is not str:
            err("response.ids_sha256", "missing" if "ids_sha256" not in resp else "expected a hex string")
        elif check_hashes and r is None and resp["ids_sha256"] != ids_sha256(ids):
            warn("response.ids_sha256", "does not match the token ids (docs/fcr.md#conventions)")
        v = resp.get("text")
        if v is not None and type(v) is not str:
            err("response.text", "expected a string or null")
        v = resp.get("usage_completion_tokens")
        if v is not None and type(v) is not int:
            err("response.usage_completion_tokens", "expected an int or null")
        v = resp.get("finish_reason")
        if v is not None and type(v) is not str:
            err("response.finish_reason", "expected a string or null")
        ts = resp.get("token_strings")
        if ts is not None and n is not None:
            if type(ts) is not list or len(ts) != n:
                err("response.token_strings", "expected a list of strings aligned with response.token_ids")
            elif ts and not set(map(type, ts)) <= _T_STR:
                i = _first(ts, lambda x: type(x) is str)
                err(f"response.token_strings[{i}]", "expected a string")

    # --- rollout (required) and trainer (optional): per-token arrays aligned with response.token_ids
    ro = get("rollout")
    if type(ro) is not dict:
        err("rollout", "missing" if ro is None else "expected an object")
    elif n is not None:
        lps = ro.get("logprobs")
        r = _check_lps(lps, n) if "logprobs" in ro else ("", "missing")
        if r is not None:
            err("rollout.logprobs" + r[0], r[1])
        elif lint:
            for suffix, reason in _lp_warnings(lps) or ():
                warn("rollout.logprobs" + suffix, reason)
        if ro.get("top_k") is not None:
            r = _check_topk(ro["top_k"], n, fast)
            if r is not None:
                err("rollout.top_k" + r[0], r[1])
        if ro.get("token_policy_versions") is not None:
            r = _check_ints_aligned(ro["token_policy_versions"], n, "policy version")
            if r is not None:
                err("rollout.token_policy_versions" + r[0], r[1])
    tr = get("trainer")
    if tr is not None:
        if type(tr) is not dict:
            err("trainer", "expected an object")
        elif n is not None:
            pv = tr.get("policy_version")
            if pv is not None and type(pv) is not int:
                err("trainer.policy_version", "expected an int or null")
            sid = tr.get("sample_id")
            if sid is not None and type(sid) is not str:
                err("trainer.sample_id", "expected a string")
            if tr.get("logprobs") is not None:
                lps = tr["logprobs"]
                r = _check_lps(lps, n)
                if r is not None:
                    err("trainer.logprobs" + r[0], r[1])
                elif lint:
                    for suffix, reason in _lp_warnings(lps) or ():
                        warn("trainer.logprobs" + suffix, reason)
            if tr.get("top_k") is not None:
                r = _check_topk(tr["top_k"], n, fast)
                if r is not None:
                    err("trainer.top_k" + r[0], r[1])
            if tr.get("loss_mask_used") is not None:
                r = _check_mask(tr["loss_mask_used"], n, fast)
                if r is not None:
                    err("trainer.loss_mask_used" + r[0], r[1])
            if (lint and type(ro) is dict and ro.get("top_k") is not None and tr.get("top_k") is not None
                    and not any(i.field.startswith(("rollout.top_k", "trainer.top_k")) for i in issues)):
                count, first = topk_uncovered(ro["top_k"], tr["top_k"])
                if count:
                    warn(f"trainer.top_k[{first}]", f"misses ids of rollout.top_k at {count} position(s); fcr/1 "
                         "requires the trainer list to cover them (the certificate there is looser)")
    if n is not None and has_routes(rec):  # optional MoE routing fields (workers/fcr/routes.py)
        for field, reason in routes_issues(rec, n):
            err(field, reason)
    return issues


def positive_logprob_issues(rec, line: int) -> list[FcrIssue]:
    """Warnings for positive log-probs in a well-formed record's ``rollout.logprobs`` / ``trainer.logprobs``: not a
    format error (the audit and the certificate exclude such positions), but said at upload rather than only in the
    certificate. Two C-level ``max`` passes per list."""
    out = []
    for name, block in (("rollout", rec.get("rollout")), ("trainer", rec.get("trainer"))):
        lps = block.get("logprobs") if type(block) is dict else None
        if not lps:
            continue
        try:
            hi = max(lps)
        except TypeError:  # nulls present
            hi = max((x for x in lps if x is not None), default=None)
        if hi is not None and hi > POSITIVE_CUT:
            i = _first(lps, lambda x: x is None or x <= POSITIVE_CUT)
            out.append(FcrIssue(line, rec.get("call_id"), f"{name}.logprobs[{i}]",
                                f"positive log-prob {lps[i]!r}; the audit and the certificate exclude such positions",
                                "warning"))
    return out


# --------------------------------------------------------------------------------------------- file

_RUNS_CAP = 1000


def iter_raw_lines(path):
    """Yield ``(line_number, raw_line)`` for every non-blank line, plain or gzip (by magic), through the one bounded
    reader (:mod:`workers.fcr.reader`): every complete line first, then :class:`FcrParseError` (truncated or corrupt
    gzip) or :class:`FcrLimitError` (a line or decompression limit) naming the line where reading stopped."""
    return iter_lines(path)


def validate_file(
    path,
    *,
    max_errors: int = 20,
    max_warnings: int = 20,
    progress: Callable[[float, str], None] | None = None,
    progress_every_bytes: int = 8 << 20,
    check_hashes: bool = False,
    lint: bool = False,
) -> dict:
    """Stream-validate an ``fcr/1`` JSONL file (plain or gzip by magic). Memory: one line plus a set of
    ``(run_id, call_id)`` hashes (for duplicate detection) and a capped set of run ids.

    Never raises on bad content: unparseable lines, non-object lines, truncated gzip and a line or decompression
    limit of the bounded reader (:mod:`workers.fcr.reader`; reading stops there) become errors with their 1-based
    line number. ``progress(fraction, message)`` is called about every ``progress_every_bytes``
    of *compressed* input, with fraction = bytes consumed / file size, and once with 1.0 at the end.
    """
    import os

    size = os.path.getsize(path)
    errors: list[dict] = []
    warnings: list[dict] = []
    n_err = n_warn = 0
    records = valid_records = 0
    runs: set[str] = set()
    runs_truncated = False
    step_min = step_max = None
    by_role = {"policy": 0, "background": 0, "unknown": 0}
    policy_tokens = response_tokens = 0
    has_trainer_lp = has_topk = False
    seen: set[int] = set()
    dups = 0
    layer_counts = LayerCounts()
    routed_records = 0

    def add(issue: FcrIssue):
        nonlocal n_err, n_warn
        if issue.severity == "error":
            n_err += 1
            if len(errors) < max_errors:
                errors.append(issue.to_dict())
        else:
            n_warn += 1
            if len(warnings) < max_warnings:
                warnings.append(issue.to_dict())

    line_no = 0
    next_report = progress_every_bytes

    def report(pos):  # by file bytes consumed: for gzip also called while inside one long line
        nonlocal next_report
        if pos >= next_report:
            next_report = pos + progress_every_bytes
            progress(min(1.0, pos / size) if size else 1.0, f"line {reader.line_no + 1}")

    from workers.fcr.columnar import RowReader, is_parquet

    reader = (RowReader if is_parquet(path) else LineReader)(path, on_bytes=report if progress is not None else None)
    loads = orjson.loads
    JSONDecodeError = orjson.JSONDecodeError
    try:
        for line_no, line in reader:
            if type(line) is not bytes:  # an fcr-parquet/1 row (workers/fcr/columnar.py): a record, or why it is not
                records += 1
                if isinstance(line, FcrParseError):
                    add(FcrIssue(line_no, None, line.field or "", line.reason))
                    continue
                rec, no_bools = line, True  # typed columns: no JSON boolean can stand in for a number
            else:
                if progress is not None and not reader.compressed:
                    report(reader.position)
                if line.isspace():
                    continue
                records += 1
                try:
                    rec = loads(line)
                except JSONDecodeError as exc:
                    add(FcrIssue(line_no, None, "", f"not valid JSON ({exc})"))
                    continue
                no_bools = not array_bools_possible(line)
            issues = validate_record(
                rec, line=line_no, check_hashes=check_hashes, lint=lint, no_array_bools=no_bools
            )
            bad = False
            for iss in issues:
                add(iss)
                if iss.severity == "error":
                    bad = True
            if not bad and has_routes(rec):
                reason = layer_counts.check(rec, line_no)
                if reason:
                    add(FcrIssue(line_no, rec["call_id"], "rollout.routed_experts", reason))
                    bad = True
                elif n_layers(rec) is not None:
                    routed_records += 1
            if bad:
                continue
            if not lint:  # with lint the record's own warnings already include these
                for iss in positive_logprob_issues(rec, line_no):
                    add(iss)
            valid_records += 1
            run_id = rec["run_id"]
            if run_id not in runs:
                if len(runs) < _RUNS_CAP:
                    runs.add(run_id)
                else:
                    runs_truncated = True
            st = rec["step"]
            if step_min is None or st < step_min:
                step_min = st
            if step_max is None or st > step_max:
                step_max = st
            role = rec["role"]
            by_role[role] += 1
            nt = len(rec["response"]["token_ids"])
            response_tokens += nt
            if role == "policy":
                policy_tokens += nt
            tr = rec.get("trainer")
            if tr and tr.get("logprobs") is not None:
                has_trainer_lp = True
            if rec["rollout"].get("top_k") is not None:
                has_topk = True
            key = hash((run_id, rec["call_id"]))
            if key in seen:
                dups += 1
                add(FcrIssue(line_no, rec["call_id"], "call_id", "duplicate call_id in run", "warning"))
            else:
                seen.add(key)
    except FcrParseError as exc:  # truncated/corrupt gzip, or a line or decompression limit: reading stops there
        add(FcrIssue(exc.line, None, "", exc.reason))
    finally:
        bytes_read = reader.position
        reader.close()
    if progress is not None:
        progress(1.0, f"done: {line_no} lines")
    if records == 0 and n_err == 0:
        add(FcrIssue(0, None, "", "file contains no records"))
    return {
        "valid": n_err == 0,
        "records": records,
        "valid_records": valid_records,
        "errors": errors,
        "error_count": n_err,
        "warnings": warnings,
        "warning_count": n_warn,
        "bytes_read": bytes_read,
        "file_size": size,
        "compressed": reader.compressed,
        "format": getattr(reader, "format", "fcr/1"),
        "runs": sorted(runs),
        "runs_truncated": runs_truncated,
        "steps": {"min": step_min, "max": step_max},
        "calls_by_role": by_role,
        "policy_tokens": policy_tokens,
        "response_tokens": response_tokens,
        "has_trainer_logprobs": has_trainer_lp,
        "has_top_k": has_topk,
        "duplicate_call_ids": dups,
        "records_with_routes": routed_records,
    }
