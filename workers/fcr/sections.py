"""The field checks of one ``fcr/1`` record, one function per section of the format (docs/fcr.md#record-fields):
identity and role, model / tokenizer / engine / sampling, prompt, response, rollout, trainer. Each reports into a
:class:`Findings` in the record's field order; :func:`workers.fcr.validate.validate_record` runs them in turn.

Beside each section check stands its *fast* form (``…_ok``): one chained expression that is True exactly when the
section check would find nothing (with ``lint=False, check_hashes=False``), and may raise KeyError / TypeError /
AttributeError on a surprise (the caller then takes the detailed path). Most records are well-formed, so the
validator tries the fast forms first; the two forms of a section must accept the same records
(tests/fcr/test_validate_fuzz.py holds them to it).

An *error* is a format problem (a missing field, a wrong JSON type, an unknown role or provenance, a per-token list
not aligned with ``response.token_ids``). A *warning* is something the audit judges (an unknown engine enum, a
sentinel or positive log-prob, a hash mismatch, a trainer top-K that misses rollout ids): a faithful log of a bad
run must still upload so that the audit can say why it is bad. Missing *nullable* fields (``response.text``,
``prompt.task_prompt_sha256_*``) are treated as null (docs/fcr.md#example-c-a-background-call omits
``response.text``).
"""

from __future__ import annotations

from workers.fcr.schema import (
    CONTEXT_EVENTS,
    DICT_OR_NULL,
    ENGINE_APIS,
    GENERATION_CONFIG_SOURCES,
    INT_OR_NULL,
    LOGPROBS_MODES,
    NUM_OR_NULL,
    PROMPT_PROVENANCE,
    RESPONSE_PROVENANCE,
    ROLE_SOURCES,
    ROLES,
    SCHEMA,
    STR_OR_NULL,
    T_STR,
    FcrIssue,
    first_bad,
    ids_sha256,
    is_num,
    member,
)
from workers.fcr.tokens import (
    check_ids,
    check_logprobs,
    check_mask,
    check_unverified_spans,
    check_versions_aligned,
    logprob_warnings,
)
from workers.fcr.topk import check_topk, topk_uncovered


class Findings:
    """The issues of one record, and how to look for them: ``fast`` (no JSON boolean is an array element of the
    source line: one-pass C checks), ``lint`` (audit-level warnings too), ``check_hashes`` (recompute
    ``ids_sha256``)."""

    __slots__ = ("issues", "line", "call_id", "fast", "lint", "check_hashes")

    def __init__(self, line: int, call_id: str | None, *, fast: bool, lint: bool, check_hashes: bool):
        self.issues: list[FcrIssue] = []
        self.line, self.call_id = line, call_id
        self.fast, self.lint, self.check_hashes = fast, lint, check_hashes

    def err(self, field: str, reason: str) -> None:
        self.issues.append(FcrIssue(self.line, self.call_id, field, reason, "error"))

    def warn(self, field: str, reason: str) -> None:
        self.issues.append(FcrIssue(self.line, self.call_id, field, reason, "warning"))

    def check(self, field: str, problem) -> bool:
        """Record ``problem`` (None or ``(suffix, reason)`` of a list check) as an error on ``field``; True if fine."""
        if problem is None:
            return True
        self.err(field + problem[0], problem[1])
        return False


def _missing_or(value, expected: str) -> str:
    return "missing" if value is None else expected


# ------------------------------------------------------------------------------------- identity and role
def identity(rec: dict, f: Findings) -> None:
    """docs/fcr.md#identity-and-role: schema tag, ids, step, role and where the role came from."""
    sch = rec.get("schema")
    if sch != SCHEMA:
        f.err("schema", _missing_or(sch, f"expected 'fcr/1', got {sch!r}"))
    for k in ("run_id", "trajectory_id", "call_id"):
        v = rec.get(k)
        if type(v) is not str or not v:
            f.err(k, _missing_or(v, f"expected a non-empty string, got {type(v).__name__}"))
    for k in ("step", "call_index"):
        v = rec.get(k)
        if type(v) is not int:
            f.err(k, _missing_or(v, f"expected an int, got {type(v).__name__}"))
    role = rec.get("role")
    if not member(role, ROLES):
        f.err("role", _missing_or(role, f"expected one of policy|background|unknown, got {role!r}"))
    rs = rec.get("role_source")
    if not member(rs, ROLE_SOURCES):
        f.err("role_source", _missing_or(rs, f"expected one of header|config|inferred|default, got {rs!r}"))
    v = rec.get("parent_call_id")
    if v is not None and type(v) is not str:
        f.err("parent_call_id", "expected a string or null")
    v = rec.get("timestamp")
    if v is not None and not is_num(v):
        f.err("timestamp", "expected a number")
    for k in ("purpose", "inferred_purpose"):
        v = rec.get(k)
        if v is not None and type(v) is not str:
            f.err(k, "expected a string")
    # the run's parameters and tags (docs/fcr.md#run-parameters): only their shape here; the portal checks the values
    v = rec.get("run_config")
    if v is not None and type(v) is not dict:
        f.err("run_config", "expected an object of parameter names to values")
    if not tags_ok(rec.get("run_tags")):
        f.err("run_tags", "expected a list of strings")


def tags_ok(v) -> bool:
    return v is None or (type(v) is list and all(type(t) is str for t in v))


def identity_ok(rec: dict) -> bool:
    return (
        rec["schema"] == SCHEMA
        and type(rec["run_id"]) is str
        and rec["run_id"]
        and type(rec["trajectory_id"]) is str
        and rec["trajectory_id"]
        and type(rec["call_id"]) is str
        and rec["call_id"]
        and type(rec["step"]) is int
        and type(rec["call_index"]) is int
        and type(rec["role"]) is str
        and rec["role"] in ROLES
        and type(rec["role_source"]) is str
        and rec["role_source"] in ROLE_SOURCES
        and type(rec.get("parent_call_id")) in STR_OR_NULL
        and type(rec.get("timestamp")) in NUM_OR_NULL
        and type(rec.get("purpose")) in STR_OR_NULL
        and type(rec.get("inferred_purpose")) in STR_OR_NULL
        and type(rec.get("run_config")) in DICT_OR_NULL
        and tags_ok(rec.get("run_tags"))
    )


# ------------------------------------------------------------------------- model, tokenizer, engine, sampling
def model_and_engine(rec: dict, f: Findings) -> None:
    """docs/fcr.md#model-tokenizer-engine-sampling, and the record's own provenance objects."""
    model = rec.get("model")
    if type(model) is not dict:
        f.err("model", _missing_or(model, "expected an object"))
    else:
        if type(model.get("served_name")) is not str:
            f.err("model.served_name", "expected a string")
        pv = model.get("policy_version")
        if pv is not None and type(pv) is not int:
            f.err("model.policy_version", "expected an int or null")
    tok = rec.get("tokenizer")
    if type(tok) is not dict:
        f.err("tokenizer", _missing_or(tok, "expected an object"))
    else:
        for k in ("id", "sha256"):
            if type(tok.get(k)) is not str:
                f.err(f"tokenizer.{k}", "expected a string")
    if "chat_template" not in rec:
        f.err("chat_template", "missing (use null for token-input calls)")
    elif (ct := rec["chat_template"]) is not None:
        if type(ct) is not dict:
            f.err("chat_template", "expected an object or null")
        elif type(ct.get("sha256")) is not str:
            f.err("chat_template.sha256", "expected a string")
    _engine(rec.get("engine"), f)
    for k in ("sampling", "source"):
        v = rec.get(k)
        if type(v) is not dict:
            f.err(k, _missing_or(v, "expected an object"))
    for k in ("harness", "extra"):
        v = rec.get(k)
        if v is not None and type(v) is not dict:
            f.err(k, "expected an object")


def model_and_engine_ok(rec: dict) -> bool:
    g = rec.get
    model, tok, eng, ct = g("model"), g("tokenizer"), g("engine"), rec["chat_template"]
    return (
        type(model) is dict
        and type(model.get("served_name")) is str
        and type(model.get("policy_version")) in INT_OR_NULL
        and type(tok) is dict
        and type(tok.get("id")) is str
        and type(tok.get("sha256")) is str
        and (ct is None or (type(ct) is dict and type(ct.get("sha256")) is str))
        and type(eng) is dict
        and type(eng.get("name")) is str
        and type(eng.get("api")) is str
        and eng["api"] in ENGINE_APIS
        and type(eng.get("logprobs_mode")) in STR_OR_NULL
        and eng.get("logprobs_mode") in LOGPROBS_MODES
        and type(eng.get("generation_config_source")) is str
        and eng["generation_config_source"] in GENERATION_CONFIG_SOURCES
        and type(g("sampling")) is dict
        and type(g("source")) is dict
        and type(g("harness")) in DICT_OR_NULL
        and type(g("extra")) in DICT_OR_NULL
    )


def _engine(eng, f: Findings) -> None:
    if type(eng) is not dict:
        f.err("engine", _missing_or(eng, "expected an object"))
        return
    if type(eng.get("name")) is not str:
        f.err("engine.name", "expected a string")
    api = eng.get("api")
    if type(api) is not str:
        f.err("engine.api", "expected a string")
    elif api not in ENGINE_APIS:
        f.warn("engine.api", f"unknown api {api!r}")
    lm = eng.get("logprobs_mode")
    if not member(lm, LOGPROBS_MODES):
        f.warn("engine.logprobs_mode", f"unknown logprobs_mode {lm!r}; the audit cannot verify semantics (R7)")
    gs = eng.get("generation_config_source")
    if not member(gs, GENERATION_CONFIG_SOURCES):
        f.warn("engine.generation_config_source", f"unknown or missing value {gs!r} (treated as 'unknown')")


# --------------------------------------------------------------------------------------------- prompt
def prompt(rec: dict, f: Findings) -> None:
    """docs/fcr.md#prompt: token ids, their provenance and hash, the declared / observed task prompt, context."""
    p = rec.get("prompt")
    if type(p) is not dict:
        f.err("prompt", _missing_or(p, "expected an object"))
        return
    ids_ok = _token_ids(p, "prompt", f)
    pp = p.get("provenance")
    if not member(pp, PROMPT_PROVENANCE):
        f.err("prompt.provenance", f"expected one of {'|'.join(sorted(PROMPT_PROVENANCE))}, got {pp!r}")
    _ids_hash(p, "prompt", ids_ok, f)
    for k in ("task_prompt_sha256_declared", "task_prompt_sha256_observed", "context_source_call_id"):
        v = p.get(k)
        if v is not None and type(v) is not str:
            f.err(f"prompt.{k}", "expected a string or null")
    if not member(p.get("context_event"), CONTEXT_EVENTS):
        f.err("prompt.context_event", f"expected null|compaction|truncation|retry, got {p.get('context_event')!r}")


def prompt_ok(p: dict, fast: bool) -> bool:
    return (
        type(p) is dict
        and type(p["provenance"]) is str
        and p["provenance"] in PROMPT_PROVENANCE
        and type(p["ids_sha256"]) is str
        and type(p.get("task_prompt_sha256_declared")) in STR_OR_NULL
        and type(p.get("task_prompt_sha256_observed")) in STR_OR_NULL
        and type(p.get("context_source_call_id")) in STR_OR_NULL
        and type(p.get("context_event")) in STR_OR_NULL
        and p.get("context_event") in CONTEXT_EVENTS
        and type(p["token_ids"]) is list
        and check_ids(p["token_ids"], fast) is None
    )


def _token_ids(block: dict, name: str, f: Findings) -> bool:
    r = check_ids(block.get("token_ids"), f.fast)
    if r is not None:
        f.err(f"{name}.token_ids" + r[0], r[1] if "token_ids" in block else "missing")
    return r is None


def _ids_hash(block: dict, name: str, ids_ok: bool, f: Findings) -> None:
    if type(block.get("ids_sha256")) is not str:
        f.err(f"{name}.ids_sha256", "missing" if "ids_sha256" not in block else "expected a hex string")
    elif f.check_hashes and ids_ok and block["ids_sha256"] != ids_sha256(block["token_ids"]):
        f.warn(f"{name}.ids_sha256", "does not match the token ids (docs/fcr.md#conventions)")


# --------------------------------------------------------------------------------------------- response
def response(rec: dict, f: Findings) -> int | None:
    """docs/fcr.md#response. Returns n = len(response.token_ids), the length every per-token list must have (None
    when there is no id list to align with)."""
    resp = rec.get("response")
    if type(resp) is not dict:
        f.err("response", _missing_or(resp, "expected an object"))
        return None
    ids_ok = _token_ids(resp, "response", f)
    ids = resp.get("token_ids")
    n = len(ids) if type(ids) is list else None
    rp = resp.get("provenance")
    if not member(rp, RESPONSE_PROVENANCE):
        f.err("response.provenance", f"expected one of {'|'.join(sorted(RESPONSE_PROVENANCE))}, got {rp!r}")
    _ids_hash(resp, "response", ids_ok, f)
    for k, kind, expected in (
        ("text", str, "expected a string or null"),
        ("usage_completion_tokens", int, "expected an int or null"),
        ("finish_reason", str, "expected a string or null"),
    ):
        v = resp.get(k)
        if v is not None and type(v) is not kind:
            f.err(f"response.{k}", expected)
    ts = resp.get("token_strings")
    if ts is not None and n is not None:
        if type(ts) is not list or len(ts) != n:
            f.err("response.token_strings", "expected a list of strings aligned with response.token_ids")
        elif ts and not set(map(type, ts)) <= T_STR:
            i = first_bad(ts, lambda x: type(x) is str)
            f.err(f"response.token_strings[{i}]", "expected a string")
    return n


def response_ok(resp: dict, fast: bool) -> int | None:
    """n when the response section is fine, else None."""
    if not (
        type(resp) is dict
        and type(resp["provenance"]) is str
        and resp["provenance"] in RESPONSE_PROVENANCE
        and type(resp["ids_sha256"]) is str
        and type(resp.get("text")) in STR_OR_NULL
        and type(resp.get("usage_completion_tokens")) in INT_OR_NULL
        and type(resp.get("finish_reason")) in STR_OR_NULL
        and type(resp["token_ids"]) is list
        and check_ids(resp["token_ids"], fast) is None
    ):
        return None
    n = len(resp["token_ids"])
    ts = resp.get("token_strings")
    if ts is not None and not (type(ts) is list and len(ts) == n and (not ts or set(map(type, ts)) <= T_STR)):
        return None
    return n


# ------------------------------------------------------------------------------------- rollout and trainer
def rollout(rec: dict, n: int | None, f: Findings) -> None:
    """docs/fcr.md#rollout-and-trainer: the sampler's log-probs (required), top-K and per-token policy versions."""
    ro = rec.get("rollout")
    if type(ro) is not dict:
        f.err("rollout", _missing_or(ro, "expected an object"))
        return
    if n is None:
        return
    lps = ro.get("logprobs")
    if f.check("rollout.logprobs", check_logprobs(lps, n) if "logprobs" in ro else ("", "missing")):
        _logprob_lint("rollout", lps, f)
    if ro.get("top_k") is not None:
        f.check("rollout.top_k", check_topk(ro["top_k"], n, f.fast))
    if ro.get("token_policy_versions") is not None:
        f.check("rollout.token_policy_versions", check_versions_aligned(ro["token_policy_versions"], n))
    if ro.get("logprob_unverified") is not None:
        f.check("rollout.logprob_unverified", check_unverified_spans(ro["logprob_unverified"], n))


def rollout_ok(ro: dict, n: int, fast: bool) -> bool:
    v, w, u = ro.get("top_k"), ro.get("token_policy_versions"), ro.get("logprob_unverified")
    return (
        type(ro) is dict
        and check_logprobs(ro["logprobs"], n) is None
        and (v is None or check_topk(v, n, fast) is None)
        and (w is None or check_versions_aligned(w, n) is None)
        and (u is None or check_unverified_spans(u, n) is None)
    )


def trainer(rec: dict, n: int | None, f: Findings) -> None:
    """docs/fcr.md#rollout-and-trainer: the trainer's recomputed log-probs, top-K (covering the rollout's ids), loss
    mask and the sample it trained."""
    tr = rec.get("trainer")
    if tr is None:
        return
    if type(tr) is not dict:
        f.err("trainer", "expected an object")
        return
    if n is None:
        return
    pv = tr.get("policy_version")
    if pv is not None and type(pv) is not int:
        f.err("trainer.policy_version", "expected an int or null")
    sid = tr.get("sample_id")
    if sid is not None and type(sid) is not str:
        f.err("trainer.sample_id", "expected a string")
    if tr.get("logprobs") is not None and f.check("trainer.logprobs", check_logprobs(tr["logprobs"], n)):
        _logprob_lint("trainer", tr["logprobs"], f)
    if tr.get("top_k") is not None:
        f.check("trainer.top_k", check_topk(tr["top_k"], n, f.fast))
    if tr.get("loss_mask_used") is not None:
        f.check("trainer.loss_mask_used", check_mask(tr["loss_mask_used"], n, f.fast))
    _coverage_lint(rec.get("rollout"), tr, f)


def trainer_ok(tr, n: int, fast: bool) -> bool:
    if tr is None:
        return True
    lps, tk, mask = tr.get("logprobs"), tr.get("top_k"), tr.get("loss_mask_used")
    return (
        type(tr) is dict
        and type(tr.get("policy_version")) in INT_OR_NULL
        and type(tr.get("sample_id")) in STR_OR_NULL
        and (lps is None or check_logprobs(lps, n) is None)
        and (tk is None or check_topk(tk, n, fast) is None)
        and (mask is None or check_mask(mask, n, fast) is None)
    )


def _logprob_lint(side: str, lps, f: Findings) -> None:
    if f.lint:
        for suffix, reason in logprob_warnings(lps) or ():
            f.warn(f"{side}.logprobs" + suffix, reason)


def _coverage_lint(ro, tr: dict, f: Findings) -> None:
    """A trainer top-K that misses rollout ids: a looser certificate there, said as a warning (well-formed lists)."""
    if not (f.lint and type(ro) is dict and ro.get("top_k") is not None and tr.get("top_k") is not None):
        return
    if any(i.field.startswith(("rollout.top_k", "trainer.top_k")) for i in f.issues):
        return
    count, first = topk_uncovered(ro["top_k"], tr["top_k"])
    if count:
        f.warn(
            f"trainer.top_k[{first}]",
            f"misses ids of rollout.top_k at {count} position(s); fcr/1 requires the "
            "trainer list to cover them (the certificate there is looser)",
        )


# --------------------------------------------------------------------------------------------- whole record
def record_ok(rec, fast) -> bool:
    """True exactly when :func:`workers.fcr.validate.validate_record` (``lint=False, check_hashes=False``) finds no
    issue: the fast form of each section, chained; anything else (or any surprise) goes to the detailed path, which
    names the problem. Keeps the per-record fixed cost low for small records."""
    try:
        if not (identity_ok(rec) and model_and_engine_ok(rec) and prompt_ok(rec["prompt"], fast)):
            return False
        n = response_ok(rec["response"], fast)
        return n is not None and rollout_ok(rec["rollout"], n, fast) and trainer_ok(rec.get("trainer"), n, fast)
    except (KeyError, TypeError, AttributeError):
        return False
