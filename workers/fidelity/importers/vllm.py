"""Importer for vLLM OpenAI-compatible logs (docs/fidelity-rules.md#vllm-openai-compatible-logs): chat + completions,
streaming chunks, and
Agent Lightning ≥ 1.0 ``model_request`` events.

Input: JSONL, one exchange per line, either ``{"request": {...}, "response": {...} | [chunk, …], "meta": {...}}`` or
an AGL event ``{"rollout_id", "attempt_id", "sequence_id"?, "data": {"request", "response", "model_version"}}``.
Optional ``meta`` keys: ``run_id, trajectory_id, step, call_id, call_index, policy_version, timestamp, headers,
task_prompt_sha256_declared, context_event, context_source_call_id``; request headers may also sit at ``headers`` /
``request_headers``. Field names are those of vLLM's OpenAI server (``prompt_token_ids``, ``choices[i].token_ids``,
``logprobs.content[].{token, logprob, bytes, top_logprobs}``, completions ``logprobs.{tokens, token_logprobs,
top_logprobs}``).

Mapping (docs/fidelity-rules.md#vllm-openai-compatible-logs): prompt ids ``response.prompt_token_ids`` /
``choices[i].prompt_token_ids`` → ``engine``; an int-list
``request.prompt`` → ``engine_input``; else ``missing``. Response ids ``choices[i].token_ids`` → ``engine``; else all
``"token_id:N"`` token strings → ``engine``; else per-token strings mapped uniquely through the tokenizer →
``engine_token_strings``; else the text encoded → ``retokenized``; else ``missing``. Top-K ids from ``"token_id:N"``
or a unique vocabulary match; a position with an unmappable entry gets an empty list and is listed in
``extra.top_k_dropped_positions``. Retries (identical request body later in the same trajectory) are kept, the
earlier attempts marked ``purpose: "retry"`` — this needs a first pass over the input.
"""

from __future__ import annotations

import hashlib

import orjson

from workers.fidelity.importers.common import (
    emit,
    ids_sha256,
    int_list,
    map_token,
    meta_of,
    read_jsonl,
    ref_of,
    skeleton,
    task_text,
    text_sha256,
    token_mismatch,
    topk_lists,
)
from workers.fidelity.importers.fields import (
    Field,
    Rung,
    block,
    boolean,
    declared_role,
    integer,
    number,
    entry_ids,
    id_array,
    ids,
    ladder,
    ladder_rung,
    read_table,
    token_id_strings,
    truthy,
)
from workers.routing.engines import attach_rollout_routes, vllm_response_routes

ROLE_VALUES = ("policy", "background", "unknown")
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
)
STRUCTURED_KEYS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs")


def headers_of(obj) -> dict:
    h = {}
    meta = meta_of(obj)
    for src in (meta.get("headers"), obj.get("headers"), obj.get("request_headers")):
        if isinstance(src, dict):
            h.update({str(k).lower(): v for k, v in src.items() if isinstance(v, str)})
    return h


def _request_key(traj, req) -> bytes:
    body = {k: v for k, v in (req or {}).items() if not k.startswith("stream")}
    return hashlib.blake2b(orjson.dumps([traj, body], option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


def _merge_stream(chunks: list) -> dict:
    """Streaming: concatenate ``token_ids`` deltas and ``logprobs.content``; prompt ids from the first chunk."""
    out = {"choices": []}
    by_index: dict[int, dict] = {}
    for ch in chunks:
        if not isinstance(ch, dict):
            continue
        for k in ("id", "model", "object", "created"):
            if k in ch and k not in out:
                out[k] = ch[k]
        if ch.get("prompt_token_ids") is not None and "prompt_token_ids" not in out:
            out["prompt_token_ids"] = ch["prompt_token_ids"]
        if ch.get("usage"):
            out["usage"] = ch["usage"]
        for c in ch.get("choices") or []:
            i = c.get("index", 0)
            _absorb_delta(by_index.setdefault(i, {"index": i}), c)
    out["choices"] = [_merged_choice(by_index[i]) for i in sorted(by_index)]
    return out


def _extend(acc: dict, key: str, value, empty):
    acc[key] = (acc.get(key) or empty) + value


def _absorb_delta(acc: dict, c: dict) -> None:
    """One streamed choice delta into its accumulator."""
    if c.get("prompt_token_ids") is not None and "prompt_token_ids" not in acc:
        acc["prompt_token_ids"] = c["prompt_token_ids"]
    if c.get("token_ids") is not None:
        _extend(acc, "token_ids", list(c["token_ids"]), [])
    if isinstance(c.get("text"), str):
        _extend(acc, "text", c["text"], "")
    delta = c.get("delta") or {}
    if isinstance(delta.get("content"), str):
        _extend(acc, "content", delta["content"], "")
    lp = c.get("logprobs") or {}
    if isinstance(lp.get("content"), list):
        _extend(acc, "lp_content", lp["content"], [])
    for k in ("tokens", "token_logprobs", "top_logprobs"):
        if isinstance(lp.get(k), list):
            _extend(acc, k, lp[k], [])
    if c.get("finish_reason"):
        acc["finish_reason"] = c["finish_reason"]


def _merged_choice(a: dict) -> dict:
    choice = {"index": a["index"], "finish_reason": a.get("finish_reason")}
    for k in ("token_ids", "prompt_token_ids", "text"):
        if a.get(k) is not None:
            choice[k] = a[k]
    if a.get("content") is not None:
        choice["message"] = {"role": "assistant", "content": a["content"]}
    if a.get("lp_content") is not None:
        choice["logprobs"] = {"content": a["lp_content"]}
    elif a.get("tokens") is not None:
        choice["logprobs"] = {
            "tokens": a["tokens"],
            "token_logprobs": a.get("token_logprobs"),
            "top_logprobs": a.get("top_logprobs"),
        }
    return choice


# what the exchange says about the call: ``meta`` (the log line's, typed by meta_of), ``headers`` (X-FCR-*, lower
# case), the ``request`` and ``response`` bodies, and an AGL ≥ 1.0 ``event``'s data
CALL_FIELDS = (
    Field(
        "trajectory_id",
        ("meta.trajectory_id", "headers.x-fcr-trajectory"),
        pick="truthy",
        note="else AGL's `rollout_id:attempt_id`",
    ),
    Field(
        "call_id",
        ("meta.call_id", "headers.x-fcr-call-id", "response.id"),
        pick="truthy",
        note="`#i` per choice of n > 1; else file:line",
    ),
    Field("role", ("headers.x-fcr-call-role",), declared_role, note="`role_source: header`"),
    Field("purpose", ("headers.x-fcr-purpose", "meta.purpose"), pick="truthy", note="`retry` for a retried request"),
    Field("parent_call_id", ("headers.x-fcr-parent-call",), pick="truthy"),
    Field("timestamp", ("meta.timestamp", "response.created"), number, pick="present"),
    Field("model.served_name", ("response.model", "request.model"), pick="truthy"),
    Field(
        "model.policy_version",
        ("meta.policy_version", "event.server.version", "event.model_version"),
        integer,
        pick="present",
    ),
    Field("step", ("meta.step",), integer, note="else `--step`"),
    Field("engine.skip_special_tokens", ("request.skip_special_tokens",), boolean),
)
# request (chat / completions) or ``sampling_params`` (tokens-in/tokens-out ``generate``) → ``sampling``
SAMPLING_FIELDS = tuple(Field(f"sampling.{k}", (k,)) for k in SAMPLING_KEYS) + (
    Field("sampling.max_tokens", ("max_tokens", "max_completion_tokens"), pick="present"),
    Field("sampling.logit_bias_present", ("logit_bias",), truthy),
    # the last structured-output key set wins over ``response_format.type`` (_sampling)
    Field("sampling.structured_output", tuple(reversed(STRUCTURED_KEYS)), pick="key"),
    Field(
        "response_format",
        ("response_format.type",),
        pick="present",
        note="→ `sampling.structured_output` when no key above is set and the type is not `text`",
    ),
)
# prompt ids, most direct first: the engine's, else the ids sent (a prompt string is text, never ids)
PROMPT_IDS = (
    Rung(Field("prompt.token_ids", ("response.prompt_token_ids",), ids), "engine", ("chat.completions", "generate")),
    Rung(Field("prompt.token_ids", ("choice.prompt_token_ids",), ids), "engine"),
    Rung(Field("prompt.token_ids", ("request.token_ids",), id_array), "engine_input", ("generate",)),
    Rung(Field("prompt.token_ids", ("request.prompt",), id_array), "engine_input", ("chat.completions", "completions")),
)

# response ids, most direct first (then, with a tokenizer, token strings and text: see _response_ids)
RESPONSE_IDS = (
    Rung(Field("response.token_ids", ("choice.token_ids",), ids), "engine"),
    Rung(
        Field(
            "response.token_ids",
            ("choice.meta_info.output_token_logprobs",),
            entry_ids,
            note="SGLang's OpenAI server with `return_meta_info`; its log-probs too",
        ),
        "engine",
    ),
    Rung(Field("response.token_ids", ("choice.meta_info.output_ids",), ids), "engine"),
    Rung(
        Field("response.token_ids", ("token_strings",), token_id_strings, note="every `token_id:N` string"),
        "engine",
    ),
)


def _sampling(req: dict) -> dict:
    values = read_table(req, SAMPLING_FIELDS)
    s = block(values, "sampling")
    if s["structured_output"] is None and isinstance(req.get("response_format"), dict):
        rf = values["response_format"]
        s["structured_output"] = rf if rf not in (None, "text") else None
    return s


class _Exchange:
    """What one logged exchange says once for all its choices (see :func:`convert_exchange`)."""

    __slots__ = (
        "agl",
        "data",
        "req",
        "resp",
        "meta",
        "headers",
        "chat",
        "generate",
        "traj",
        "base_id",
        "choices",
        "values",
        "step",
        "user_text",
        "usage",
        "opts",
        "tok",
        "ref",
        "call_index",
        "retry",
    )


def _response_of(obj: dict, data: dict, meta: dict) -> dict:
    """The exchange's response object (streamed chunks merged); an HTTP error (body or logged status) is refused."""
    resp = data.get("response")
    if isinstance(resp, list):
        resp = _merge_stream(resp)
    elif isinstance(obj.get("chunks"), list):
        resp = _merge_stream(obj["chunks"])
    if not isinstance(resp, dict):
        raise ValueError("no response object")
    error = error_text(resp)
    if error is not None:
        raise ValueError(f"HTTP error body: {error}")
    status = meta.get("status", obj.get("status"))
    if type(status) is int and status >= 400:
        raise ValueError(f"HTTP status {status}: not a completed model call")
    return resp


def _int_or(*values, default=None):
    return next((v for v in values if type(v) is int), default)


def _exchange(obj: dict, *, ref: str, opts: dict, call_index: int, retry: bool) -> _Exchange:
    x = _Exchange()
    x.agl = isinstance(obj.get("data"), dict)
    x.data = obj["data"] if x.agl else obj
    x.req = x.data.get("request") if isinstance(x.data.get("request"), dict) else {}
    x.meta = meta_of(obj)
    x.resp = _response_of(obj, x.data, x.meta)
    x.headers = headers_of(obj)
    x.chat = "messages" in x.req or str(x.resp.get("object", "")).startswith("chat")
    # vLLM's tokens-in/tokens-out endpoint: ``{token_ids, sampling_params}`` in, ``choices[].token_ids`` out
    x.generate = not x.chat and "prompt" not in x.req and int_list(x.req.get("token_ids")) is not None
    view = {
        "meta": x.meta,
        "headers": x.headers,
        "request": x.req,
        "response": x.resp,
        "event": x.data if x.agl else {},
    }
    x.values = read_table(view, CALL_FIELDS)
    x.traj = x.values["trajectory_id"] or (f"{obj.get('rollout_id')}:{obj.get('attempt_id')}" if x.agl else "unknown")
    x.base_id = x.values["call_id"] or ref
    x.choices = sorted((c for c in x.resp.get("choices") or [] if isinstance(c, dict)), key=lambda c: c.get("index", 0))
    if not x.choices:
        raise ValueError("response has no choices")
    x.step = _int_or(x.values["step"], opts.get("steps", {}).get(x.traj, opts.get("step")), default=-1)
    x.user_text = (
        task_text(x.req.get("messages"))
        if x.chat
        else (x.req.get("prompt") if isinstance(x.req.get("prompt"), str) else None)
    )
    x.usage = x.resp.get("usage") if isinstance(x.resp.get("usage"), dict) else {}
    x.opts, x.tok, x.ref, x.call_index, x.retry = opts, opts.get("tokenizer"), ref, call_index, retry
    return x


def convert_exchange(obj: dict, *, line: int, ref: str, opts: dict, call_index: int, retry: bool) -> list[dict]:
    """One logged exchange → one ``fcr/1`` record per choice: the record's identity and configuration, its prompt
    ids, the per-token evidence (echo cut off), its response ids and its rollout log-probs, each from its own
    helper."""
    x = _exchange(obj, ref=ref, opts=opts, call_index=call_index, retry=retry)
    out = []
    for k, ch in enumerate(x.choices):
        rec = _base_record(x, k, ch)
        prompt_ids = _prompt(x, ch, rec)
        ev = _evidence(ch)
        if not x.chat and x.req.get("echo") is True and ev[0] is not None:
            ev = _cut_echo(x, ch, ev, prompt_ids)
        tok_lps = _response(x, ch, rec, ev)
        _rollout(x, rec, tok_lps, ev)
        if ch.get("routed_experts") is not None:  # --enable-return-routed-experts (docs/routing.md)
            attach_rollout_routes(rec, lambda P, T, ch=ch: vllm_response_routes(ch["routed_experts"], P, T))
        out.append(rec)
    return out


def _base_record(x: _Exchange, k: int, ch: dict) -> dict:
    """The record's identity, role, purpose, model, engine and sampling."""
    call_id = f"{x.base_id}#{ch.get('index', k)}" if len(x.choices) > 1 else str(x.base_id)
    rec = skeleton(
        run_id=x.opts.get("run_id") or x.meta.get("run_id") or "unknown",
        trajectory_id=str(x.traj),
        step=x.step,
        call_id=call_id,
        call_index=x.call_index,
        ref=x.ref,
        tokenizer=x.tok,
        source_format=("agl_model_request" if x.agl else "vllm_openai_chat" if x.chat else "vllm_openai_completions"),
    )
    v = x.values
    if v["role"] is not None:
        rec["role"], rec["role_source"] = v["role"], "header"
    purpose = "retry" if x.retry else v["purpose"]
    if purpose:
        rec["purpose"] = purpose
    for key in ("parent_call_id", "timestamp"):
        if v[key] is not None:
            rec[key] = v[key]
    rec["model"] = {
        "served_name": str(v["model.served_name"] or "unknown"),
        "policy_version": v["model.policy_version"],
    }
    rec["chat_template"] = {"sha256": x.opts.get("chat_template_sha256") or "unknown"} if x.chat else None
    rec["engine"] = {
        "name": x.opts.get("engine") or "vllm",
        "api": "chat.completions" if x.chat else "generate" if x.generate else "completions",
        "logprobs_mode": x.req.get("logprobs_mode", x.opts.get("logprobs_mode")),
        "generation_config_source": x.opts.get("generation_config_source", "unknown"),
    }
    if v["engine.skip_special_tokens"] is not None:
        rec["engine"]["skip_special_tokens"] = v["engine.skip_special_tokens"]
    sp = x.req.get("sampling_params")
    rec["sampling"] = _sampling(sp if x.generate and isinstance(sp, dict) else x.req)
    return rec


def _prompt(x: _Exchange, ch: dict, rec: dict):
    """Prompt ids: the engine's (``prompt_token_ids``), else the ids sent; the task hash and context event. Returns
    the prompt ids known (engine or sent), or None."""
    p = rec["prompt"]
    view = {"request": x.req, "response": x.resp, "choice": ch}
    known, provenance = ladder(view, PROMPT_IDS, "chat.completions" if x.chat else rec["engine"]["api"])
    if known is not None:
        p["token_ids"], p["provenance"] = known, provenance
    p["ids_sha256"] = ids_sha256(p["token_ids"])
    p["task_prompt_sha256_declared"] = x.meta.get("task_prompt_sha256_declared")
    p["task_prompt_sha256_observed"] = text_sha256(x.user_text) if isinstance(x.user_text, str) else None
    if x.meta.get("context_event") is not None:
        p["context_event"] = x.meta["context_event"]
        if x.meta.get("context_source_call_id") is not None:
            p["context_source_call_id"] = x.meta["context_source_call_id"]
    return known


def _evidence(ch: dict):
    """Per-token evidence of a choice: ``(token strings, log-probs, top-K entries, has_top)`` from chat
    ``logprobs.content`` or completions ``logprobs.{tokens, token_logprobs, top_logprobs}`` (all None without)."""
    lp = ch.get("logprobs") if isinstance(ch.get("logprobs"), dict) else {}
    if isinstance(lp.get("content"), list):  # chat
        entries = [e for e in lp["content"] if isinstance(e, dict)]
        tops = [
            [(t.get("token"), t.get("logprob")) for t in (e.get("top_logprobs") or []) if isinstance(t, dict)]
            for e in entries
        ]
        return (
            [e.get("token") for e in entries],
            [e.get("logprob") for e in entries],
            tops,
            any(e.get("top_logprobs") is not None for e in entries),
        )
    if isinstance(lp.get("tokens"), list):  # completions
        strings = list(lp["tokens"])
        raw_tops = lp.get("top_logprobs") or []
        return (
            strings,
            list(lp.get("token_logprobs") or [None] * len(strings)),
            [list(d.items()) if isinstance(d, dict) else [] for d in raw_tops],
            bool(raw_tops),
        )
    return None, None, None, False


def _cut_echo(x: _Exchange, ch: dict, ev, prompt_ids):
    """echo=True: vLLM lists the prompt's tokens first (logprobs.tokens = prompt + output; the first prompt token has
    a null log-prob) and text = prompt text + output text. Keep the output's tail."""
    strings, lps, tops, has_top = ev
    cut = _echo_cut(
        len(strings),
        int_list(ch.get("token_ids")),
        prompt_ids,
        x.usage.get("prompt_tokens") if len(x.choices) == 1 else None,
    )
    return strings[cut:], lps[cut:], (tops[cut:] if has_top and len(tops) >= cut else tops), has_top


def _response_text(x: _Exchange, ch: dict):
    text = ch.get("text") if not x.chat else ((ch.get("message") or {}).get("content"))
    if not x.chat and x.req.get("echo") is True and isinstance(text, str):
        # the echoed prompt text is not the response's; without return_token_ids it leads the text
        # (a prompt sent as ids is echoed as its decoded text, which this importer cannot strip: no text then)
        ptext = x.req.get("prompt") if isinstance(x.req.get("prompt"), str) else None
        text = text[len(ptext) :] if ptext is not None and text.startswith(ptext) else None
    return text


def _response_ids(x: _Exchange, ch: dict, r: dict, strings, tok_lps, text):
    """Response ids down :data:`RESPONSE_IDS`, then (with a tokenizer) strings that map to one vocabulary id each
    (``engine_token_strings``), else the text encoded (``retokenized``). Returns the log-probs that go with them
    (SGLang's ``meta_info`` entries carry their own)."""
    tok = x.tok
    rids, rung = ladder_rung({"choice": ch, "token_strings": strings}, RESPONSE_IDS)
    if rung is not None:
        r["token_ids"], r["provenance"] = rids, rung.provenance
        if rung is RESPONSE_IDS[1]:
            tok_lps = [e[0] for e in ch["meta_info"]["output_token_logprobs"]]
    elif strings and tok is not None and all(isinstance(s, str) and len(tok.ids_for_string(s)) == 1 for s in strings):
        r["token_ids"], r["provenance"] = [tok.ids_for_string(s)[0] for s in strings], "engine_token_strings"
        r["token_strings"] = strings
    elif isinstance(text, str) and tok is not None:
        r["token_ids"], r["provenance"] = tok.encode(text), "retokenized"
    return tok_lps


def _response(x: _Exchange, ch: dict, rec: dict, ev):
    """The response block; returns the log-probs that go with its ids."""
    r = rec["response"]
    text = _response_text(x, ch)
    tok_lps = _response_ids(x, ch, r, ev[0], ev[1], text)
    r["ids_sha256"] = ids_sha256(r["token_ids"])
    r["text"] = text if not x.chat and isinstance(text, str) else None
    ct = x.usage.get("completion_tokens")
    r["usage_completion_tokens"] = ct if len(x.choices) == 1 and type(ct) is int else None
    if ch.get("finish_reason") is not None:
        r["finish_reason"] = str(ch["finish_reason"])
    return tok_lps


def _rollout(x: _Exchange, rec: dict, tok_lps, ev) -> None:
    """Log-probs and top-K: only when they align with the ids, position by position; never fabricated."""
    ids = rec["response"]["token_ids"]
    n = len(ids)
    tops, has_top = ev[2], ev[3]
    extra = {}
    mismatch = token_mismatch(ev[0], ids, x.tok)
    if mismatch:
        extra["logprobs_token_mismatch"] = mismatch
    if tok_lps is not None and len(tok_lps) == n and rec["response"]["provenance"] != "retokenized" and not mismatch:
        rec["rollout"] = {"logprobs": [v if type(v) in (int, float) else None for v in tok_lps]}
        if has_top and len(tops) == n and x.req.get("logprob_token_ids"):
            extra["top_k_not_a_ranking"] = "request.logprob_token_ids: the lists are the requested ids"
        elif has_top and len(tops) == n:
            top_k, dropped = topk_lists(tops, ids, lambda t: map_token(t, x.tok), sampled_listed_first=True)
            rec["rollout"]["top_k"] = top_k
            if dropped:
                extra["top_k_dropped_positions"] = dropped
    else:
        rec["rollout"] = {"logprobs": [None] * n}
        if tok_lps is not None:
            extra["logprobs_unaligned"] = True
    if extra:
        rec["extra"] = extra


def _echo_cut(n_listed, rids, pids, usage_prompt_tokens) -> int:
    """``echo=True`` (completions): how many leading entries of ``logprobs.tokens`` are the echoed prompt — the
    listed count minus the engine's response ids, else the prompt's ids (engine or sent), else the engine's prompt
    token count. When none is known the exchange is refused: the echoed prompt must never pass for a response."""
    for cut in (
        (n_listed - len(rids)) if rids is not None else None,
        len(pids) if pids is not None else None,
        usage_prompt_tokens if type(usage_prompt_tokens) is int else None,
    ):
        if cut is not None and 0 <= cut <= n_listed:
            return cut
    raise ValueError(
        "echo=True: the log does not say where the echoed prompt ends (no token_ids, prompt ids or "
        "usage.prompt_tokens), so the response cannot be told from the prompt"
    )


def import_vllm(
    in_path,
    out_path,
    *,
    run_id=None,
    step=None,
    steps=None,
    tokenizer=None,
    logprobs_mode=None,
    generation_config_source="unknown",
    chat_template_sha256=None,
    role=None,
    engine=None,
) -> dict:
    """Convert a vLLM/AGL exchange log to ``fcr/1``. Returns counts. Two passes (retry marking). ``engine``: the
    server behind an OpenAI-compatible log when it is not vLLM (e.g. ``sglang``; ``engine.name``)."""
    opts = {
        "run_id": run_id,
        "step": step,
        "steps": steps or {},
        "tokenizer": tokenizer,
        "engine": engine,
        "logprobs_mode": logprobs_mode,
        "generation_config_source": generation_config_source,
        "chat_template_sha256": chat_template_sha256,
    }
    last_of: dict = {}
    for line, obj, err in read_jsonl(in_path):
        if isinstance(obj, dict):
            traj, req = _traj_and_request(obj)
            last_of[_request_key(traj, req)] = line
    counters: dict = {}
    stats = {"exchanges": 0, "records": 0, "failed": 0, "retries": 0, "events_skipped": 0}
    with open(out_path, "wb") as out:
        for line, obj, err in read_jsonl(in_path):
            if (
                isinstance(obj, dict)
                and isinstance(obj.get("event_type"), str)
                and obj["event_type"] != "model_request"
            ):  # AGL ≥ 1.0 reward / other events are not model calls
                stats["events_skipped"] += 1
                continue
            stats["exchanges"] += 1
            ref = ref_of(in_path, line)
            recs = None
            if isinstance(obj, dict):
                traj, req = _traj_and_request(obj)
                idx = counters.get(traj, 0)
                meta = meta_of(obj)
                ci = meta.get("call_index", obj.get("sequence_id"))
                ci = ci if type(ci) is int else idx
                counters[traj] = idx + 1
                retry = last_of.get(_request_key(traj, req)) != line
                try:
                    recs = convert_exchange(obj, line=line, ref=ref, opts=opts, call_index=ci, retry=retry)
                    stats["retries"] += int(retry)
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    err = f"{type(exc).__name__}: {exc}"
            else:
                traj, ci = "unknown", counters.get("unknown", 0)
                counters["unknown"] = ci + 1
                err = err or "not a JSON object"
            if recs is None:
                stats["failed"] += 1
                recs = [
                    failed_record(
                        obj if isinstance(obj, dict) else {}, traj=traj, call_index=ci, ref=ref, err=err, opts=opts
                    )
                ]
            emit(out, recs, role=role, stats=stats)
    return stats


def error_text(resp) -> str | None:
    """The message of an HTTP error body (vLLM ``{"error": {"message", "type", "code"}}``, older
    ``{"object": "error", "message", …}``)."""
    if not isinstance(resp, dict):
        return None
    e = resp.get("error")
    if isinstance(e, dict):
        return f"{e.get('type') or 'error'} {e.get('code') or ''}: {e.get('message')}".replace(" :", ":")
    if resp.get("object") == "error":
        return f"{resp.get('type') or 'error'} {resp.get('code') or ''}: {resp.get('message')}".replace(" :", ":")
    return None


def failed_record(obj, *, traj, call_index, ref, err, opts, source_format="vllm_openai") -> dict:
    """A call that cannot be converted is a ``missing`` record (docs/fidelity-rules.md#importers) — which keeps what
    the log does say about it:
    the declared role, purpose and parent (an error answer to a declared policy call is still a declared policy
    call, not an undeclared one), run, step, call id, and the error body's message."""
    meta = meta_of(obj)
    headers = headers_of(obj)
    data = obj["data"] if isinstance(obj.get("data"), dict) else obj
    step = meta.get("step")
    if type(step) is not int:
        step = opts.get("steps", {}).get(traj, opts.get("step"))
    rec = skeleton(
        run_id=opts.get("run_id") or meta.get("run_id") or "unknown",
        trajectory_id=str(traj),
        step=step if type(step) is int else -1,
        call_id=str(meta.get("call_id") or headers.get("x-fcr-call-id") or ref),
        call_index=call_index,
        source_format=source_format,
        ref=ref,
        tokenizer=opts.get("tokenizer"),
    )
    role = headers.get("x-fcr-call-role")
    if role in ROLE_VALUES:
        rec["role"], rec["role_source"] = role, "header"
    purpose = headers.get("x-fcr-purpose") or meta.get("purpose")
    if isinstance(purpose, str):
        rec["purpose"] = purpose
    if isinstance(headers.get("x-fcr-parent-call"), str):
        rec["parent_call_id"] = headers["x-fcr-parent-call"]
    req = data.get("request") if isinstance(data.get("request"), dict) else {}
    if "messages" not in req and isinstance(req.get("prompt"), (str, list)):
        rec["engine"]["api"], rec["chat_template"] = "completions", None
    elif "messages" not in req and ("input_ids" in req or "text" in req):  # SGLang /generate
        rec["engine"].update(name="sglang", api="generate")
        rec["chat_template"] = None
    extra = {"import_error": err}
    status = meta.get("status", obj.get("status"))
    if type(status) is int:
        extra["http_status"] = status
    rec["extra"] = extra
    return rec


def _traj_and_request(obj):
    """The exchange's trajectory (as :data:`CALL_FIELDS` reads it) and request body, for retry marking."""
    agl = isinstance(obj.get("data"), dict)
    data = obj["data"] if agl else obj
    traj = CALL_FIELDS[0].read({"meta": meta_of(obj), "headers": headers_of(obj)}) or (
        f"{obj.get('rollout_id')}:{obj.get('attempt_id')}" if agl else "unknown"
    )
    req = data.get("request") if isinstance(data.get("request"), dict) else {}
    return str(traj), req
