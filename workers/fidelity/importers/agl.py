"""Importer for Agent Lightning spans (LightningStore v0.2/v0.3 dumps; docs/fidelity-rules.md#agent-lightning-spans).

Input: JSONL, one span per line, with the LightningStore span fields ``rollout_id, attempt_id, sequence_id, span_id,
parent_id`` (or ``parent.span_id``), ``name``, ``attributes`` (flattened OpenTelemetry keys), ``start_time``.

1. Spans are grouped by (``rollout_id``, ``attempt_id``) → ``trajectory_id = "rollout_id:attempt_id"`` and ordered by
   ``sequence_id`` (then ``start_time``); ``call_index`` is the rank in that order.
2. LLM spans are selected by regex (defaults ``openai\\.chat\\.completion`` and ``raw_gen_ai_request``); client/proxy
   duplicates are deduplicated by response id (``gen_ai.response.id`` or ``llm.hosted_vllm.id``), preferring the span
   that carries token ids.
3. Prompt ids: ``prompt_token_ids`` | ``llm.hosted_vllm.prompt_token_ids`` |
   ``agentlightning.operation.output.prompt_token_ids``. Response ids: ``response_token_ids`` |
   ``llm.hosted_vllm.response_token_ids`` (element 0 of the list of lists) | ``…choices.0.token_ids`` |
   ``…choices.0.provider_specific_fields.token_ids`` | ``llm.hosted_vllm.choices`` (a list; element 0). Values may be
   lists, tuples, JSON or **Python-repr strings**: parsed by :func:`~.common.safe_literal` (JSON, then
   ``ast.literal_eval`` — literals only, never ``eval``). Provenance ``engine``.
4. Log-probs from the ``…logprobs.content`` attribute (JSON string of the OpenAI content list).
5. Role: ``policy``/``config`` when an ancestor span's name matches ``agent_match``; otherwise ``unknown``/``default``
   (the anonymous requests outside the trained agent). Without ``agent_match`` every call is ``unknown``.
6. Sampling/model from ``gen_ai.request.{model, temperature, top_p, max_tokens}`` / ``llm.hosted_vllm.model``;
   ``step`` from the ``batch_idx`` attribute or a supplied rollout→step map (else −1). Reward spans are ignored.

Memory: the spans of the whole input are held (AGL dumps are per run / per rollout batch).
"""

from __future__ import annotations

import re

from workers.fidelity.importers.fields import (
    Field,
    Rung,
    block,
    first_of_lists,
    ids,
    integer,
    ladder,
    read_table,
)
from workers.fidelity.importers.common import (
    dump,
    ids_sha256,
    int_list,
    map_token,
    token_mismatch,
    read_jsonl,
    ref_of,
    safe_literal,
    skeleton,
    tokenizer_block,
    topk_lists,
)

DEFAULT_LLM_MATCH = r"openai\.chat\.completion|raw_gen_ai_request"
PROMPT_KEYS = (
    "prompt_token_ids",
    "llm.hosted_vllm.prompt_token_ids",
    "agentlightning.operation.output.prompt_token_ids",
)
RESPONSE_ID_KEYS = ("gen_ai.response.id", "agentlightning.operation.output.id", "llm.hosted_vllm.id")
AGL_OPERATION = "agentlightning.operation"


def agent_name(span) -> str | None:
    """The agent a span stands for, derived from its attributes the way Agent Lightning's trace adapter does it
    (not from the span's name): OpenAI Agents SDK ``agent.name``; AgentOps ``@agent`` spans (``agentops.span.kind``
    = agent) ``operation.name``; AutoGen ``recipient_agent_type``; LangGraph ``langchain.chain.type``;
    agent-framework ``executor.id``; Weave agent ops (``type`` = agent) ``agentlightning.operation.input.name``;
    Weave + LangChain ``lc_name`` on ``langchain.Chain.*`` spans."""
    a = _attrs(span)

    def text(key):
        v = a.get(key)
        return v if isinstance(v, str) else None

    if text("agent.name") is not None:
        return text("agent.name")
    if a.get("agentops.span.kind") == "agent" and text("operation.name") is not None:
        return text("operation.name")
    for key in ("recipient_agent_type", "langchain.chain.type", "executor.id"):
        if text(key) is not None:
            return text(key)
    if a.get("type") == "agent" and text("agentlightning.operation.input.name") is not None:
        return text("agentlightning.operation.input.name")
    if str(span.get("name", "")).startswith("langchain.Chain.") and text("lc_name") is not None:
        return text("lc_name")
    return None


def is_reward_span(span) -> bool:
    """A reward span: AgentOps' reward payload (``{"type": "reward", …}`` in ``agentops.task.output``), a
    ``reward`` attribute on an ``agentlightning.reward`` span, or the 0.3 ``agentlightning.operation`` span named
    ``reward``."""
    a = _attrs(span)
    out = safe_literal(a.get("agentops.task.output")) if isinstance(a.get("agentops.task.output"), str) else None
    if isinstance(out, dict) and out.get("type") == "reward":
        return True
    if span.get("name") == "agentlightning.reward":
        return True
    return span.get("name") == AGL_OPERATION and a.get("agentlightning.operation.name") == "reward"


def _attrs(span) -> dict:
    a = span.get("attributes")
    return a if isinstance(a, dict) else {}


def _sid(v):
    """A span or response id as a string (ids in dumps are strings or ints); anything else is no id."""
    return v if isinstance(v, str) and v else str(v) if type(v) is int else None


def _parent(span):
    if span.get("parent_id"):
        return _sid(span["parent_id"])
    p = span.get("parent")
    return _sid(p.get("span_id")) if isinstance(p, dict) else None


def _response_id(attrs):
    return _sid(_first(attrs, RESPONSE_ID_KEYS))


def _first(attrs, keys):
    for k in keys:
        if k in attrs and attrs[k] is not None:
            return attrs[k]
    return None


def _hosted_choice_ids(choices):
    """``llm.hosted_vllm.choices`` (a Python-repr list of choices): the first choice's ``token_ids`` or
    ``provider_specific_fields.token_ids``."""
    ch = safe_literal(choices)
    if isinstance(ch, list) and ch and isinstance(ch[0], dict):
        psf = ch[0].get("provider_specific_fields") or {}
        for cand in (ch[0].get("token_ids"), psf.get("token_ids") if isinstance(psf, dict) else None):
            got = int_list(cand)
            if got is not None:
                return got
    return None


def _first_choice_ids(v):
    return int_list(first_of_lists(v))


# span attributes (flattened keys) → fcr fields
PROMPT_IDS = (Rung(Field("prompt.token_ids", PROMPT_KEYS, ids, flat=True), "engine"),)
RESPONSE_IDS = (
    Rung(
        Field(
            "response.token_ids",
            (
                "response_token_ids",
                "llm.hosted_vllm.response_token_ids",
                "agentlightning.operation.output.response_token_ids.0",
            ),
            _first_choice_ids,
            flat=True,
            note="a list of lists: the first choice",
        ),
        "engine",
    ),
    Rung(
        Field(
            "response.token_ids",
            ("choices.0.token_ids", "choices.0.provider_specific_fields.token_ids"),
            ids,
            pick="suffix",
            flat=True,
        ),
        "engine",
    ),
    Rung(Field("response.token_ids", ("llm.hosted_vllm.choices",), _hosted_choice_ids, flat=True), "engine"),
)
SPAN_FIELDS = (
    Field(
        "model.served_name",
        ("gen_ai.request.model", "llm.hosted_vllm.model", "gen_ai.response.model"),
        pick="truthy",
        flat=True,
    ),
    Field("model.policy_version", ("model_version",), integer, flat=True),
    Field("sampling.temperature", ("gen_ai.request.temperature",), flat=True),
    Field("sampling.top_p", ("gen_ai.request.top_p",), flat=True),
    Field("sampling.max_tokens", ("gen_ai.request.max_tokens",), flat=True),
    Field("step", ("batch_idx",), integer, flat=True, note="else the rollout→step map"),
)


def prompt_ids(attrs):
    return ladder(attrs, PROMPT_IDS)[0]


def response_ids(attrs):
    return ladder(attrs, RESPONSE_IDS)[0]


def _literal_list(v):
    v = safe_literal(v)
    return v if isinstance(v, list) else None


def _hosted_choice_content(choices):
    """``llm.hosted_vllm.choices[0].logprobs.content`` (a Python-repr list of choices)."""
    ch = safe_literal(choices)
    if isinstance(ch, list) and ch and isinstance(ch[0], dict) and isinstance(ch[0].get("logprobs"), dict):
        v = ch[0]["logprobs"].get("content")
        return v if isinstance(v, list) else None
    return None


# the OpenAI ``logprobs.content`` list of a span: a flattened attribute (JSON text), or inside the proxy's choices;
# its log-probs and top-K are kept only when aligned with the response ids
LOGPROB_CONTENT = (
    Rung(
        Field("rollout.logprobs", ("logprobs.content",), _literal_list, pick="suffix", flat=True, note="and top-K"),
        "engine",
    ),
    Rung(
        Field("rollout.logprobs", ("llm.hosted_vllm.choices",), _hosted_choice_content, flat=True, note="and top-K"),
        "engine",
    ),
)


def _logprob_content(attrs):
    return ladder(attrs, LOGPROB_CONTENT)[0]


def _dedupe(group, lines, stats) -> list:
    """One span per response id (client/proxy duplicates), preferring the span that carries token ids; the kept
    span is given the attributes only its duplicates have (e.g. request parameters on the client span). Ordered by
    ``sequence_id``, then ``start_time``, then line."""
    chosen, order, dups = {}, [], {}
    for s in group:
        a = _attrs(s)
        sid = _sid(s.get("span_id"))
        rid = _response_id(a) or (f"span:{sid}" if sid else f"line:{lines[id(s)]}")
        has_ids = response_ids(a) is not None
        dups.setdefault(rid, []).append(s)
        if rid not in chosen:
            chosen[rid] = (has_ids, s)
            order.append(rid)
        else:
            stats["duplicates_dropped"] += 1
            if has_ids and not chosen[rid][0]:
                chosen[rid] = (has_ids, s)
    kept = []
    for rid in order:
        s = chosen[rid][1]
        if len(dups[rid]) > 1:
            merged = {}
            for d in dups[rid]:
                merged.update({k: v for k, v in _attrs(d).items() if k not in merged})
            merged.update(_attrs(s))
            s = dict(s, attributes=merged)
            lines[id(s)] = lines[id(chosen[rid][1])]
        kept.append(s)
    kept.sort(
        key=lambda s: (
            s.get("sequence_id") if type(s.get("sequence_id")) is int else 1 << 62,
            str(s.get("start_time")),
            lines[id(s)],
        )
    )
    return kept


def import_agl(
    in_path,
    out_path,
    *,
    run_id=None,
    agent_match=None,
    llm_match=DEFAULT_LLM_MATCH,
    steps=None,
    tokenizer=None,
    logprobs_mode=None,
    generation_config_source="unknown",
    chat_template_sha256=None,
    role=None,
) -> dict:
    llm_re = re.compile(llm_match)
    agent_re = re.compile(agent_match) if agent_match else None
    spans, lines = [], {}
    bad_lines = []
    for line, obj, err in read_jsonl(in_path):
        if isinstance(obj, dict):
            spans.append(obj)
            lines[id(obj)] = line
        else:
            bad_lines.append((line, err or "not a JSON object"))
    by_id = {_sid(s.get("span_id")): s for s in spans if _sid(s.get("span_id")) is not None}
    groups: dict = {}
    for s in spans:
        if isinstance(s.get("name"), str) and llm_re.search(s["name"]):
            groups.setdefault((str(s.get("rollout_id")), str(s.get("attempt_id"))), []).append(s)
    stats = {
        "spans": len(spans),
        "llm_spans": sum(len(g) for g in groups.values()),
        "records": 0,
        "duplicates_dropped": 0,
        "failed": 0,
    }
    out_records = []
    for (rollout, attempt), group in sorted(groups.items()):
        kept = _dedupe(group, lines, stats)
        for call_index, s in enumerate(kept):
            rec = _convert(
                s,
                rollout,
                attempt,
                call_index,
                by_id,
                agent_re,
                in_path,
                lines[id(s)],
                run_id,
                steps or {},
                tokenizer,
                logprobs_mode,
                generation_config_source,
                chat_template_sha256,
                stats,
            )
            if role is not None and rec["role_source"] == "default":
                rec["role"], rec["role_source"] = role, "config"
            out_records.append(rec)
    for line, err in bad_lines:  # docs/fidelity-rules.md#importers: a parse failure is a record, never a dropped call
        rec = skeleton(
            run_id=run_id or "unknown",
            trajectory_id="unknown",
            step=-1,
            call_id=ref_of(in_path, line),
            call_index=line,
            source_format="agl_span",
            ref=ref_of(in_path, line),
            tokenizer=tokenizer,
        )
        rec["extra"] = {"import_error": err}
        out_records.append(rec)
        stats["failed"] += 1
    with open(out_path, "wb") as fh:
        for rec in out_records:
            fh.write(dump(rec))
    stats["records"] = len(out_records)
    return stats


def _convert(
    s,
    rollout,
    attempt,
    call_index,
    by_id,
    agent_re,
    in_path,
    line,
    run_id,
    steps,
    tok,
    logprobs_mode,
    gcs,
    template_sha,
    stats,
):
    a = _attrs(s)
    values = read_table(a, SPAN_FIELDS)
    traj = f"{rollout}:{attempt}"
    step = values["step"]
    if step is None:
        step = steps.get(rollout, steps.get(traj))
    if type(step) is not int:
        step = -1
    rid = _response_id(a)
    call_id = rid if rid is not None else f"{traj}:{_sid(s.get('span_id')) or line}"
    rec = skeleton(
        run_id=run_id or "unknown",
        trajectory_id=traj,
        step=step,
        call_id=call_id,
        call_index=call_index,
        source_format="agl_span",
        ref=f"{ref_of(in_path, line)} span {s.get('span_id')}",
        tokenizer=tok,
    )
    _span_role(rec, s, by_id, agent_re)
    rec["model"] = {
        "served_name": str(values["model.served_name"] or "unknown"),
        "policy_version": values["model.policy_version"],
    }
    rec["tokenizer"] = tokenizer_block(tok)
    rec["chat_template"] = {"sha256": template_sha or "unknown"}
    rec["engine"] = {
        "name": "vllm",
        "api": "chat.completions",
        "logprobs_mode": logprobs_mode,
        "generation_config_source": gcs,
    }
    rec["sampling"] = block(values, "sampling")
    pids = prompt_ids(a)
    if pids is not None:
        rec["prompt"].update(token_ids=pids, provenance="engine", ids_sha256=ids_sha256(pids))
    rids = response_ids(a)
    if rids is not None:
        rec["response"].update(token_ids=rids, provenance="engine", ids_sha256=ids_sha256(rids))
    if pids is None or rids is None:
        stats["failed"] += 1
    extra = {"span_id": s.get("span_id"), "sequence_id": s.get("sequence_id")}
    _span_logprobs(rec, _logprob_content(a), tok, extra)
    rec["extra"] = extra
    return rec


def _span_role(rec, s, by_id, agent_re) -> None:
    """The role from the nearest enclosing agent (docs/fidelity-rules.md#agent-lightning-spans), named as Agent
    Lightning names agents; an LLM call under a reward span (an LLM judge) is never the trained agent's."""
    if agent_re is None:
        return
    seen, p, agent, in_reward = set(), _parent(s), None, False
    while p is not None and p not in seen:
        seen.add(p)
        ps = by_id.get(p)
        if ps is None:
            break
        in_reward = in_reward or is_reward_span(ps)
        if agent is None:
            agent = agent_name(ps)
        p = _parent(ps)
    if in_reward:
        rec["role"], rec["role_source"], rec["purpose"] = "background", "config", "reward"
    elif agent is not None and agent_re.search(agent):
        rec["role"], rec["role_source"] = "policy", "config"
    elif agent is not None:
        rec["inferred_purpose"] = f"agent:{agent}"


def _span_logprobs(rec, content, tok, extra) -> None:
    """Sampled log-probs and top-K from the span's ``logprobs.content`` when it aligns with the ids (else nulls)."""
    ids = rec["response"]["token_ids"]
    n = len(ids)
    if not (content is not None and len(content) == n and all(isinstance(e, dict) for e in content)):
        rec["rollout"] = {"logprobs": [None] * n}
        return
    mismatch = token_mismatch([e.get("token") for e in content], ids, tok)
    if mismatch:  # an entry for another token than the sampled id: not that id's log-prob
        rec["rollout"] = {"logprobs": [None] * n}
        extra.update(logprobs_unaligned=True, logprobs_token_mismatch=mismatch)
        return
    rec["rollout"] = {"logprobs": [v if type(v) in (int, float) else None for v in (e.get("logprob") for e in content)]}
    if any(e.get("top_logprobs") is not None for e in content):
        tops = [
            [(x.get("token"), x.get("logprob")) for x in e.get("top_logprobs") or [] if isinstance(x, dict)]
            for e in content
        ]
        top_k, dropped = topk_lists(
            tops, ids, lambda x: map_token(x, tok), sampled_listed_first=True
        )  # vLLM behind the proxy: sampled listed first
        rec["rollout"]["top_k"] = top_k
        if dropped:
            extra["top_k_dropped_positions"] = dropped
