"""Importer for SGLang native ``/generate`` logs (``python -m workers.fidelity import sglang``).

Input: JSONL, one exchange per line, ``{"request": {...}, "response": ... , "meta": {...}}`` (``meta`` and request
headers as for the vLLM importer: ``trajectory_id, step, call_id, call_index, policy_version,
task_prompt_sha256_declared``, ``X-FCR-*`` headers). The response is SGLang's output dict ``{"text", "output_ids",
"meta_info"}``, a list of them (``n > 1`` / batched prompts), a list of streamed chunks (``request.stream``), or an
HTTP error body. Field names are those of SGLang's tokenizer manager: ``meta_info.{id, finish_reason, prompt_tokens,
completion_tokens, cached_tokens, weight_version, input_token_logprobs, output_token_logprobs,
output_top_logprobs}``, each log-prob entry ``[logprob, token_id, text | null]``.

Mapping (docs/fidelity-rules.md#sglang-generate): response ids = ``output_ids`` (``engine``; checked against the ids inside
``output_token_logprobs``, which are used when ``output_ids`` is absent); rollout log-probs = element 0 of
``output_token_logprobs``; top-K from ``output_top_logprobs`` (SGLang computes it from the distribution, not around
the sampled token: sorted and deduplicated, nothing dropped); prompt ids = request ``input_ids`` (``engine_input``),
else the ids of ``input_token_logprobs`` when it covers the whole prompt (``logprob_start_len: 0``; ``engine``),
else ``missing``; ``response.text`` = ``text``; ``usage_completion_tokens`` = ``completion_tokens``;
``weight_version`` → ``model.policy_version`` when it is an integer (else kept in ``extra``). Streaming: SGLang
accumulates ``meta_info`` log-probs over the stream (every chunk carries all so far) and ``output_ids`` too unless
the server streams increments (``--stream-output``): the last chunk per choice ``index`` is used, or the increments
concatenated when the last chunk's ids are shorter than its log-probs. Sampling parameters from
``request.sampling_params``; ``engine.logprobs_mode`` from configuration (``--logprobs-mode``).
"""

from __future__ import annotations

from workers.fidelity.importers.common import (
    emit,
    ids_sha256,
    int_list,
    meta_of,
    read_jsonl,
    ref_of,
    skeleton,
    text_sha256,
    topk_lists,
)
from workers.fidelity.importers.fields import (
    Field,
    Rung,
    block,
    declared_role,
    ids,
    integer,
    ladder,
    read_table,
    text,
    truthy,
    version,
)
from workers.fidelity.importers.vllm import error_text, failed_record, headers_of
from workers.routing.engines import attach_rollout_routes, sglang_response_routes

SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
)
STRUCTURED_KEYS = ("json_schema", "regex", "ebnf", "structural_tag")


# ``request.sampling_params`` (SGLang's names) → ``sampling``
SAMPLING_FIELDS = tuple(Field(f"sampling.{k}", (f"sampling_params.{k}",)) for k in SAMPLING_KEYS) + (
    Field("sampling.max_tokens", ("sampling_params.max_new_tokens",)),
    Field("sampling.seed", ("sampling_params.sampling_seed",)),
    Field("sampling.logit_bias_present", ("sampling_params.logit_bias",), truthy),
    Field("sampling.structured_output", tuple(f"sampling_params.{k}" for k in STRUCTURED_KEYS), pick="key"),
)
# prompt ids, most direct first (a whole-prompt ``input_token_logprobs`` is the last resort, see _prompt)
PROMPT_IDS = (
    Rung(
        Field("prompt.token_ids", ("output.prompt_token_ids", "meta_info.prompt_token_ids"), ids, pick="present"),
        "engine",
    ),
    Rung(Field("prompt.token_ids", ("request.input_ids",), ids), "engine_input"),
)
RESPONSE_FIELDS = (
    Field("response.token_ids", ("output.output_ids",), ids, note="else the ids of `output_token_logprobs`"),
    Field("response.text", ("output.text",), text),
    Field("response.usage_completion_tokens", ("meta_info.completion_tokens",), integer),
    Field("response.finish_reason", ("meta_info.finish_reason.type", "meta_info.finish_reason"), pick="present"),
)
# what the exchange says about the call: ``meta`` (typed by meta_of), ``headers`` (X-FCR-*, lower case), the request
# and the output's ``meta_info``
CALL_FIELDS = (
    Field("trajectory_id", ("meta.trajectory_id", "headers.x-fcr-trajectory"), pick="truthy"),
    Field("role", ("headers.x-fcr-call-role",), declared_role, note="`role_source: header`"),
    Field("purpose", ("headers.x-fcr-purpose",), text),
    Field("parent_call_id", ("headers.x-fcr-parent-call",), text),
    Field("step", ("meta.step",), integer, note="else `--step`"),
    Field("model.served_name", ("request.model", "meta.model"), pick="truthy"),
    Field(
        "model.policy_version",
        ("meta.policy_version", "meta_info.weight_version"),
        version,
        pick="valid",
        note="`weight_version` an int or digits; else kept in extra",
    ),
)


def _sampling(req: dict) -> dict:
    return block(read_table(req, SAMPLING_FIELDS), "sampling")


def _merge_stream(chunks) -> list[dict]:
    """Streamed chunks → one output per choice ``index`` (see the module docstring)."""
    by_index: dict = {}
    for ch in chunks:
        if isinstance(ch, dict):
            by_index.setdefault(ch.get("index", 0), []).append(ch)
    return [_merge_group(by_index[i]) for i in sorted(by_index, key=lambda x: (str(type(x)), x))]


def _mi(chunk) -> dict:
    return chunk.get("meta_info") if isinstance(chunk.get("meta_info"), dict) else {}


def _is_incremental(group) -> bool:
    """SGLang's ``--incremental-streaming-output``: every chunk carries only its new ``output_ids``, ``text`` and
    output log-probs (``completion_tokens`` stays cumulative). Cumulative chunks each extend the previous one."""
    ids = [c.get("output_ids") if isinstance(c.get("output_ids"), list) else [] for c in group]
    ct = _mi(group[-1]).get("completion_tokens")
    if type(ct) is int and len(group) > 1:
        if len(ids[-1]) == ct:
            return False
        if sum(map(len, ids)) == ct:
            return True
    return any(len(b) < len(a) or b[: len(a)] != a for a, b in zip(ids, ids[1:]))


def _merge_group(group) -> dict:
    """One choice's chunks → its output: ids concatenated when they are increments, else the last chunk's; each
    output log-prob list likewise, judged by whether its lengths add up to the ids (newer incremental streaming
    slices them too) or the last one already covers them (older ``--stream-output``: cumulative log-probs)."""
    last = dict(group[-1])
    if len(group) == 1:
        return last
    ids_inc = _is_incremental(group)
    if ids_inc:
        last["output_ids"] = [t for c in group for t in (c.get("output_ids") or [])]
    n = len(last.get("output_ids") or [])
    mi = dict(_mi(last))
    sliced = False
    for key in ("output_token_logprobs", "output_top_logprobs"):
        parts = [_mi(c).get(key) if isinstance(_mi(c).get(key), list) else [] for c in group]
        if len(parts[-1]) != n and sum(map(len, parts)) == n:
            mi[key] = [e for part in parts for e in part]
            sliced = True
    if sliced and "input_token_logprobs" not in mi and "input_token_logprobs" in _mi(group[0]):
        mi["input_token_logprobs"] = _mi(group[0])["input_token_logprobs"]
    if ids_inc and sliced and all(isinstance(c.get("text"), str) for c in group):
        last["text"] = "".join(c["text"] for c in group)
    last["meta_info"] = mi
    return last


def _entries(lst):
    """``[[lp, id, text], …]`` → (ids, lps) or None when the shape is wrong."""
    if not isinstance(lst, list):
        return None
    ids, lps = [], []
    for e in lst:
        if not (isinstance(e, (list, tuple)) and len(e) >= 2):
            return None
        lps.append(e[0] if (type(e[0]) is float or type(e[0]) is int) else None)
        ids.append(e[1])
    return ids, lps


def _outputs(req: dict, resp) -> list[dict]:
    """The exchange's outputs: one dict, a list (``n > 1`` / batched prompts) or streamed chunks merged; an HTTP
    error body is refused."""
    err = error_text(resp) if isinstance(resp, dict) else None
    if err is not None:
        raise ValueError(f"HTTP error body: {err}")
    if isinstance(resp, list):
        outs = _merge_stream(resp) if req.get("stream") else [o for o in resp if isinstance(o, dict)]
    elif isinstance(resp, dict):
        outs = [resp]
    else:
        raise ValueError("no response object")
    if not outs:
        raise ValueError("response has no outputs")
    return outs


def _call_ids(meta: dict, headers: dict, outs: list, ref: str) -> list[str]:
    """One call id per output: the declared one (``#k`` for several outputs), else SGLang's own ``meta_info.id`` when
    every output has a distinct one, else the first id or the source line."""
    declared = meta.get("call_id") or headers.get("x-fcr-call-id")
    rids = [(o.get("meta_info") or {}).get("id") if isinstance(o.get("meta_info"), dict) else None for o in outs]
    if not declared and all(isinstance(x, str) and x for x in rids) and len(set(rids)) == len(rids):
        return rids
    base = str(declared or rids[0] or ref)
    return [base] if len(outs) == 1 else [f"{base}#{k}" for k in range(len(outs))]


def convert(obj, *, ref, opts, call_index) -> list[dict]:
    """One logged ``/generate`` exchange → one ``fcr/1`` record per output."""
    req = obj.get("request") if isinstance(obj.get("request"), dict) else {}
    meta = meta_of(obj)
    outs = _outputs(req, obj.get("response"))
    headers = headers_of(obj)
    ctx = {
        "req": req,
        "meta": meta,
        "headers": headers,
        "opts": opts,
        "ref": ref,
        "call_index": call_index,
        "traj": str(CALL_FIELDS[0].read({"meta": meta, "headers": headers}) or "unknown"),
    }
    recs = []
    for out, call_id in zip(outs, _call_ids(meta, headers, outs, ref)):
        mi = out.get("meta_info") if isinstance(out.get("meta_info"), dict) else {}
        rec = _base_record(ctx, call_id, mi)
        extra: dict = {}
        if mi.get("weight_version") is not None and rec["model"]["policy_version"] is None:
            extra["weight_version"] = str(mi["weight_version"])
        _prompt(rec["prompt"], req, meta, out, mi)
        _response(rec, out, mi, extra)
        _span_versions(rec, mi.get("weight_versions"), len(rec["response"]["token_ids"]), extra)
        if extra:
            rec["extra"] = extra
        if mi.get("routed_experts") is not None:  # return_routed_experts (docs/routing.md)
            attach_rollout_routes(
                rec,
                lambda P, T, mi=mi: sglang_response_routes(
                    mi["routed_experts"], P, T, num_layers=opts.get("moe_layers"), **_route_layout(req, mi)
                ),
            )
        recs.append(rec)
    return recs


def _base_record(ctx: dict, call_id: str, mi: dict) -> dict:
    """Identity, role, purpose, model (``weight_version`` → ``policy_version`` when an integer), engine, sampling."""
    meta, opts = ctx["meta"], ctx["opts"]
    v = read_table({"meta": meta, "headers": ctx["headers"], "request": ctx["req"], "meta_info": mi}, CALL_FIELDS)
    step = v["step"] if v["step"] is not None else opts.get("step")
    rec = skeleton(
        run_id=opts.get("run_id") or meta.get("run_id") or "unknown",
        trajectory_id=ctx["traj"],
        step=step if type(step) is int else -1,
        call_id=call_id,
        call_index=ctx["call_index"],
        source_format="sglang_generate",
        ref=ctx["ref"],
        tokenizer=opts.get("tokenizer"),
    )
    if v["role"] is not None:
        rec["role"], rec["role_source"] = v["role"], "header"
    for key in ("purpose", "parent_call_id"):
        if v[key] is not None:
            rec[key] = v[key]
    rec["model"] = {
        "served_name": str(v["model.served_name"] or "unknown"),
        "policy_version": v["model.policy_version"],
    }
    rec["engine"] = {
        "name": "sglang",
        "api": "generate",
        "logprobs_mode": opts.get("logprobs_mode"),
        "generation_config_source": opts.get("generation_config_source", "unknown"),
    }
    rec["sampling"] = _sampling(ctx["req"])
    return rec


def _prompt(p: dict, req: dict, meta: dict, out: dict, mi: dict) -> None:
    """Prompt ids: the engine's (``return_prompt_token_ids``), the request's ``input_ids``, or the ids of an
    ``input_token_logprobs`` that covers the whole prompt (``logprob_start_len: 0``)."""
    known, provenance = ladder({"output": out, "meta_info": mi, "request": req}, PROMPT_IDS)
    inp, pt = _entries(mi.get("input_token_logprobs")), mi.get("prompt_tokens")
    if known is None and inp is not None and type(pt) is int and len(inp[0]) == pt and int_list(inp[0]) is not None:
        known, provenance = inp[0], "engine"
    if known is not None:
        p["token_ids"], p["provenance"] = known, provenance
    p["ids_sha256"] = ids_sha256(p["token_ids"])
    p["task_prompt_sha256_declared"] = meta.get("task_prompt_sha256_declared")
    text_in = req.get("text") if isinstance(req.get("text"), str) else None
    p["task_prompt_sha256_observed"] = text_sha256(text_in) if text_in is not None else None  # as completions


def _response(rec: dict, out: dict, mi: dict, extra: dict) -> None:
    """Response ids (``output_ids``, else the ids of ``output_token_logprobs``), text, counts, finish reason; then
    the rollout log-probs and top-K when their ids are exactly the response's."""
    r = rec["response"]
    got = _entries(mi.get("output_token_logprobs"))
    values = read_table({"output": out, "meta_info": mi}, RESPONSE_FIELDS)
    ids_ = values["response.token_ids"]
    if ids_ is None and got is not None:
        ids_ = int_list(got[0])
    if ids_ is not None:
        r["token_ids"], r["provenance"] = ids_, "engine"
    r["ids_sha256"] = ids_sha256(r["token_ids"])
    r["text"] = values["response.text"]
    r["usage_completion_tokens"] = values["response.usage_completion_tokens"]
    if isinstance(values["response.finish_reason"], str):
        r["finish_reason"] = values["response.finish_reason"]
    n = len(r["token_ids"])
    if got is None or len(got[0]) != n or got[0] != r["token_ids"]:
        rec["rollout"] = {"logprobs": [None] * n}
        if got is not None:
            extra["logprobs_unaligned"] = True
        return
    rec["rollout"] = {"logprobs": got[1]}
    tops = mi.get("output_top_logprobs")
    if isinstance(tops, list) and len(tops) == n:
        pos = [[(e[1], e[0]) for e in (t or []) if isinstance(e, (list, tuple)) and len(e) >= 2] for t in tops]
        top_k, dropped = topk_lists(
            pos, r["token_ids"], lambda x: x if type(x) is int and x >= 0 else None, sampled_listed_first=False
        )
        rec["rollout"]["top_k"] = top_k
        if dropped:
            extra["top_k_dropped_positions"] = dropped


def _span_versions(rec: dict, spans, n: int, extra: dict) -> None:
    """``meta_info.weight_versions`` — ``[{version, start, end}, …]`` over the output tokens, which engines that
    update weights mid-request report (a request generated across versions): each token gets its span's version
    (None where no span covers it) in ``rollout.token_policy_versions`` and ``model.policy_version`` is the one
    version only when every token has it — never the request's last ``weight_version``."""
    if not isinstance(spans, list) or not spans or not n:
        return
    tv = [None] * n
    for sp in spans:
        if not isinstance(sp, dict):
            continue
        v, a, b = sp.get("version"), sp.get("start"), sp.get("end")
        v = v if type(v) is int else int(v) if isinstance(v, str) and v.isdigit() else None
        if type(a) is int and type(b) is int:
            for t in range(max(a, 0), min(b, n)):
                tv[t] = v
    if tv[0] is not None and tv.count(tv[0]) == n:
        rec["model"]["policy_version"] = tv[0]
    else:
        rec["model"]["policy_version"] = None
        rec["rollout"]["token_policy_versions"] = tv
        extra["weight_versions"] = sorted({str(v) for v in tv if v is not None})


# what an exchange declares about its routed-experts payload (the decoder refuses what it cannot place)
ROUTE_FIELDS = (
    Field(
        "start_len",
        ("meta_info.routed_experts_start_len", "request.routed_experts_start_len"),
        pick="present",
        note="rows start at that token, not at 0",
    ),
    Field("dtype", ("meta_info.routed_experts_dtype", "request.routed_experts_dtype"), pick="present"),
)


def _route_layout(req: dict, mi: dict) -> dict:
    """``routed_experts_start_len`` and ``routed_experts_dtype`` as declared (docs/routing.md)."""
    return read_table({"meta_info": mi, "request": req}, ROUTE_FIELDS)


def import_sglang(
    in_path,
    out_path,
    *,
    run_id=None,
    step=None,
    tokenizer=None,
    logprobs_mode=None,
    generation_config_source="unknown",
    role=None,
    moe_layers=None,
    **_ignored,
) -> dict:
    """Convert an SGLang ``/generate`` exchange log to ``fcr/1``; returns counts. ``moe_layers``: the model's MoE
    layer count, needed to reshape ``meta_info.routed_experts`` (flat int32)."""
    opts = {
        "run_id": run_id,
        "step": step,
        "tokenizer": tokenizer,
        "logprobs_mode": logprobs_mode,
        "generation_config_source": generation_config_source,
        "moe_layers": moe_layers,
    }
    stats = {"exchanges": 0, "records": 0, "failed": 0}
    counters: dict = {}
    with open(out_path, "wb") as out:
        for line, obj, err in read_jsonl(in_path):
            stats["exchanges"] += 1
            ref = ref_of(in_path, line)
            meta = meta_of(obj)
            headers = headers_of(obj) if isinstance(obj, dict) else {}
            traj = str(CALL_FIELDS[0].read({"meta": meta, "headers": headers}) or "unknown")
            idx = counters.get(traj, 0)
            counters[traj] = idx + 1
            ci = meta.get("call_index") if type(meta.get("call_index")) is int else idx
            recs = None
            if isinstance(obj, dict):
                try:
                    recs = convert(obj, ref=ref, opts=opts, call_index=ci)
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    err = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            if recs is None:
                stats["failed"] += 1
                recs = [
                    failed_record(
                        obj if isinstance(obj, dict) else {},
                        traj=traj,
                        call_index=ci,
                        ref=ref,
                        err=err or "not a JSON object",
                        opts=opts,
                        source_format="sglang_generate",
                    )
                ]
                recs[0]["engine"].update(name="sglang", api="generate")
                recs[0]["chat_template"] = None
            emit(out, recs, role=role, stats=stats)
    return stats
