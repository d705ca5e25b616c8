"""Importer for Agent Lightning ≥ 1.0 events and triplets (``python -m workers.fidelity import agl-events``).

Input: JSONL, one item per line, any mix of

* **events** as the server stores them (``GET /rollouts/{id}/events``): ``{event_type, rollout_id, attempt_id,
  timestamp, data}``. ``model_request`` events carry ``data.request`` / ``data.response`` (the gateway's exchange with
  the model server: converted by the vLLM importer's mapping, docs/fidelity-rules.md#vllm-openai-compatible-logs)
  and ``data.server.{model, endpoint, version}``.
  With ``?format=triplet`` the server trims them to ``data.{prompt_token_ids, response_token_ids,
  response_log_probs, server.{model, version}}`` (plus ``error`` / ``http_status`` when the call failed) — ids the
  engine returned, so provenance ``engine``; no top-K, no sampling parameters. Every other event type (``reward``,
  …) is not a model call: counted in ``events_skipped`` by type, never written as a failed call.
* **Triplet objects** (``agentlightning.types.Triplet``, ``model_dump()``): ``{prompt: {token_ids, raw_content},
  response: {token_ids, raw_content, logprobs?}, reward, metadata: {response_id, agent_name, …}}``, in file order
  (optionally with ``rollout_id`` / ``attempt_id`` / ``sequence_id`` beside them). ``response.logprobs`` is the
  OpenAI ``logprobs.content`` list.

Roles: events carry no role; ``role`` (configuration, e.g. ``--role policy`` for a gateway that only serves the
trained agent) declares one for every call with ``role_source: config``; Triplets whose ``metadata.agent_name``
matches ``agent_match`` are ``policy``/``config``. Trajectory = ``rollout_id:attempt_id``; ``call_index`` =
``sequence_id`` when given, else the order within the trajectory. ``policy_version`` from ``data.server.version`` or
``data.model_version``.
"""

from __future__ import annotations

import re

from workers.fidelity.importers.common import (
    emit,
    ids_sha256,
    map_token,
    read_jsonl,
    ref_of,
    skeleton,
    token_mismatch,
    topk_lists,
)
from workers.fidelity.importers.fields import Field, ids, integer, nonempty_text, read_table, text, version
from workers.fidelity.importers.vllm import convert_exchange


def _num_or_none(v):
    return v if (type(v) is int or type(v) is float) else None


def _logprob_record(rec, lps, content, tok, extra):
    """Sampled log-probs (aligned with the ids, else all null) and top-K from an OpenAI content list."""
    n = len(rec["response"]["token_ids"])
    if (
        content is not None
        and isinstance(content, list)
        and len(content) == n
        and all(isinstance(e, dict) for e in content)
    ):
        mismatch = token_mismatch([e.get("token") for e in content], rec["response"]["token_ids"], tok)
        if mismatch:  # an entry for another token than the sampled id: not that id's log-prob
            extra["logprobs_token_mismatch"] = mismatch
            rec["rollout"]["logprobs"] = [None] * n
            extra["logprobs_unaligned"] = True
            return
        lps = [e.get("logprob") for e in content]
        if any(e.get("top_logprobs") is not None for e in content):
            tops = [
                [(x.get("token"), x.get("logprob")) for x in e.get("top_logprobs") or [] if isinstance(x, dict)]
                for e in content
            ]
            top_k, dropped = topk_lists(
                tops, rec["response"]["token_ids"], lambda x: map_token(x, tok), sampled_listed_first=True
            )
            rec["rollout"]["top_k"] = top_k
            if dropped:
                extra["top_k_dropped_positions"] = dropped
    if lps is None and isinstance(content, list) and all(type(v) in (int, float) for v in content):
        lps = content  # rollout-manager triplets keep the sampled log-probs as a plain list
    if isinstance(lps, list) and len(lps) == n:
        rec["rollout"]["logprobs"] = [_num_or_none(v) for v in lps]
    else:
        rec["rollout"]["logprobs"] = [None] * n
        if lps is not None:
            extra["logprobs_unaligned"] = True


# ``?format=triplet`` ``model_request`` event ``data``
EVENT_TRIPLET_FIELDS = (
    Field("prompt.token_ids", ("prompt_token_ids",), ids),
    Field("response.token_ids", ("response_token_ids",), ids),
    Field("rollout.logprobs", ("response_log_probs",)),
    Field("model.served_name", ("server.model",), pick="truthy"),
    Field("model.policy_version", ("server.version", "model_version"), integer, pick="present"),
    Field("error", ("error",), note="a failed call keeps no ids"),
    Field("http_status", ("http_status",), integer, note="≥ 400: a failed call"),
)
# the weights version a triplet names, in its metadata first (an int or a string of digits)
_VERSION_KEYS = ("policy_version", "model_version", "weight_version", "version")
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens")  # those logged with the request, as logged
# ``Triplet.model_dump()``: log-probs as OpenAI ``logprobs.content`` or a plain list
TRIPLET_FIELDS = (
    Field("prompt.token_ids", ("prompt.token_ids",), ids),
    Field("response.token_ids", ("response.token_ids",), ids),
    Field("rollout.logprobs", ("response.logprobs",)),
    Field("call_id", ("metadata.response_id",), nonempty_text),
    Field("role", ("metadata.agent_name",), text, note="policy when it matches --agent-match"),
    Field(
        "model.policy_version",
        tuple(f"metadata.{k}" for k in _VERSION_KEYS) + _VERSION_KEYS,
        version,
        pick="valid",
    ),
    Field("model.served_name", ("metadata.request.model",), text),
    Field("request", ("metadata.request",), note="its temperature, top_p, max_tokens → sampling"),
)
# the adapter's ``TokensTriplet.model_dump()``
TOKENS_TRIPLET_FIELDS = (
    Field("prompt.token_ids", ("observation.token_ids",), ids),
    Field("response.token_ids", ("completion.token_ids",), ids),
    Field("rollout.logprobs", ("completion.logprobs",)),
    Field("call_id", ("raw_call.response.id", "metadata.response_id"), nonempty_text, pick="truthy"),
    Field("model.served_name", ("raw_call.request.model", "raw_call.response.model"), text, pick="truthy"),
    Field(
        "model.policy_version",
        tuple(f"{p}{k}" for p in ("metadata.", "", "raw_call.") for k in _VERSION_KEYS),
        version,
        pick="valid",
    ),
    Field("request", ("raw_call.request",), note="its temperature, top_p, max_tokens → sampling"),
)


def _ids_record(rec, pids, rids):
    if pids is not None:
        rec["prompt"].update(token_ids=pids, provenance="engine", ids_sha256=ids_sha256(pids))
    if rids is not None:
        rec["response"].update(token_ids=rids, provenance="engine", ids_sha256=ids_sha256(rids))


def import_agl_events(
    in_path,
    out_path,
    *,
    run_id=None,
    step=None,
    steps=None,
    role=None,
    agent_match=None,
    tokenizer=None,
    logprobs_mode=None,
    generation_config_source="unknown",
    chat_template_sha256=None,
) -> dict:
    """Convert AGL events / triplets to ``fcr/1``; returns counts (``events_skipped`` by event type)."""
    if role not in (None, "policy", "background"):
        raise ValueError(f"role must be 'policy' or 'background', got {role!r}")
    agent_re = re.compile(agent_match) if agent_match else None
    opts = {
        "run_id": run_id,
        "step": step,
        "steps": steps or {},
        "tokenizer": tokenizer,
        "logprobs_mode": logprobs_mode,
        "generation_config_source": generation_config_source,
        "chat_template_sha256": chat_template_sha256,
    }
    stats = {"items": 0, "records": 0, "failed": 0, "events_skipped": {}}
    counters: dict = {}
    with open(out_path, "wb") as out:
        for line, obj, err in read_jsonl(in_path):
            stats["items"] += 1
            ref = ref_of(in_path, line)
            if (
                isinstance(obj, dict)
                and isinstance(obj.get("event_type"), str)
                and obj["event_type"] != "model_request"
            ):
                skipped = stats["events_skipped"]
                skipped[obj["event_type"]] = skipped.get(obj["event_type"], 0) + 1
                continue
            traj = (
                f"{obj.get('rollout_id')}:{obj.get('attempt_id')}"
                if isinstance(obj, dict) and obj.get("rollout_id") is not None
                else "unknown"
            )
            idx = counters.get(traj, 0)
            counters[traj] = idx + 1
            seq = obj.get("sequence_id") if isinstance(obj, dict) else None
            call_index = seq if type(seq) is int else idx
            recs = None
            try:
                if not isinstance(obj, dict):
                    raise ValueError(err or "not a JSON object")
                recs = _convert(obj, traj=traj, call_index=call_index, ref=ref, opts=opts, agent_re=agent_re)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                err = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            if recs is None:
                stats["failed"] += 1
                rec = skeleton(
                    run_id=run_id or "unknown",
                    trajectory_id=traj,
                    step=step if type(step) is int else -1,
                    call_id=ref,
                    call_index=call_index,
                    source_format="agl_event",
                    ref=ref,
                    tokenizer=tokenizer,
                )
                rec["extra"] = {"import_error": err}
                recs = [rec]
            emit(out, recs, role=role, stats=stats)
    return stats


def _convert(obj, *, traj, call_index, ref, opts, agent_re) -> list[dict]:
    if isinstance(obj.get("triplets"), list):  # a rollout with its triplets (``Rollout.triplets`` / a daemon dump)
        return _rollout_triplets(obj, traj=traj, ref=ref, opts=opts, agent_re=agent_re)
    data = obj.get("data")
    if isinstance(data, dict) and isinstance(data.get("response"), (dict, list)):
        return convert_exchange(obj, line=0, ref=ref, opts=opts, call_index=call_index, retry=False)
    step = opts["steps"].get(traj.split(":")[0], opts["steps"].get(traj, opts["step"]))
    kw = {
        "traj": traj,
        "call_index": call_index,
        "ref": ref,
        "opts": opts,
        "step": step if type(step) is int else -1,
        "extra": {},
    }
    if isinstance(data, dict):  # ?format=triplet model_request
        rec = _event_triplet(obj, data, **kw)
    elif isinstance(obj.get("observation"), dict) and isinstance(obj.get("completion"), dict):  # TokensTriplet
        rec = _tokens_triplet(obj, **kw)
    elif isinstance(obj.get("prompt"), dict) and isinstance(obj.get("response"), dict):  # a Triplet object
        rec = _triplet(obj, agent_re=agent_re, **kw)
    else:
        raise ValueError("neither an Agent Lightning event nor a Triplet")
    rec["chat_template"] = {"sha256": opts["chat_template_sha256"] or "unknown"}
    rec["engine"] = {
        "name": "vllm",
        "api": "chat.completions",
        "logprobs_mode": opts["logprobs_mode"],
        "generation_config_source": opts["generation_config_source"],
    }
    if kw["extra"]:
        rec["extra"] = kw["extra"]
    return [rec]


def _event_triplet(obj, data, *, traj, call_index, ref, opts, step, extra) -> dict:
    """A ``?format=triplet`` ``model_request`` event: engine ids and sampled log-probs, ``data.server`` version; a
    failed call (``error``, ``http_status`` ≥ 400) keeps no ids."""
    rec = skeleton(
        run_id=opts["run_id"] or "unknown",
        trajectory_id=traj,
        step=step,
        call_id=f"{traj}:{call_index}",
        call_index=call_index,
        source_format="agl_event_triplet",
        ref=ref,
        tokenizer=opts["tokenizer"],
    )
    values = read_table(data, EVENT_TRIPLET_FIELDS)
    rec["model"] = {
        "served_name": str(values["model.served_name"] or "unknown"),
        "policy_version": values["model.policy_version"],
    }
    status = values["http_status"]
    if values["error"] is not None or (status is not None and status >= 400):
        extra["import_error"] = f"model call failed: {values['error'] or status}"
    else:
        _ids_record(rec, values["prompt.token_ids"], values["response.token_ids"])
    _logprob_record(rec, values["rollout.logprobs"], None, opts["tokenizer"], extra)
    if type(obj.get("timestamp")) in (int, float):
        rec["timestamp"] = obj["timestamp"]
    return rec


def _triplet(obj, *, agent_re, traj, call_index, ref, opts, step, extra) -> dict:
    """A ``Triplet`` object: ids, log-probs (OpenAI content or a plain list), version, and the role from the agent
    name matched against ``agent_re``."""
    values = read_table(obj, TRIPLET_FIELDS)
    rec = _triplet_skeleton(values, "agl_triplet", traj=traj, call_index=call_index, ref=ref, opts=opts, step=step)
    _ids_record(rec, values["prompt.token_ids"], values["response.token_ids"])
    _logprob_record(rec, None, values["rollout.logprobs"], opts["tokenizer"], extra)
    agent = values["role"]
    if agent is not None and agent_re is not None:
        if agent_re.search(agent):
            rec["role"], rec["role_source"] = "policy", "config"
        else:
            rec["inferred_purpose"] = f"agent:{agent}"
    req = values["request"] if isinstance(values["request"], dict) else {}
    rec["sampling"] = {k: req.get(k) for k in SAMPLING_KEYS if k in req}
    return rec


def _triplet_skeleton(values, source_format, *, traj, call_index, ref, opts, step) -> dict:
    rec = skeleton(
        run_id=opts["run_id"] or "unknown",
        trajectory_id=traj,
        step=step,
        call_id=values["call_id"] or f"{traj}:{call_index}",
        call_index=call_index,
        source_format=source_format,
        ref=ref,
        tokenizer=opts["tokenizer"],
    )
    rec["model"]["policy_version"] = values["model.policy_version"]
    if values["model.served_name"] is not None:
        rec["model"]["served_name"] = values["model.served_name"]
    return rec


def _tokens_triplet(obj, *, traj, call_index, ref, opts, step, extra) -> dict:
    """AGL's adapter ``TokensTriplet`` (``model_dump()``): ``observation.token_ids`` (the prompt ids the proxy got
    back from the engine), ``completion.{token_ids, logprobs}`` (the engine's ids and sampled log-probs), ``reward``,
    ``done``, ``raw_call`` (the chat-completion exchange; its request and response give model and version)."""
    values = read_table(obj, TOKENS_TRIPLET_FIELDS)
    rec = _triplet_skeleton(
        values, "agl_tokens_triplet", traj=traj, call_index=call_index, ref=ref, opts=opts, step=step
    )
    _ids_record(rec, values["prompt.token_ids"], values["response.token_ids"])
    _logprob_record(rec, values["rollout.logprobs"], None, opts["tokenizer"], extra)
    req = values["request"] if isinstance(values["request"], dict) else {}
    rec["sampling"] = {k: req.get(k) for k in SAMPLING_KEYS if k in req}
    return rec


def _rollout_triplets(obj, *, traj, ref, opts, agent_re) -> list[dict]:
    """A rollout line that carries its ``triplets`` (each a ``Triplet`` or ``TokensTriplet``): one record per
    triplet, in order; the rollout's own version fields fill a triplet that names none."""
    shared = {k: obj[k] for k in _VERSION_KEYS if k in obj}
    recs = []
    for i, t in enumerate(obj["triplets"]):
        if not isinstance(t, dict):
            raise ValueError(f"triplets[{i}] is not an object")
        item = {**shared, **t, "rollout_id": obj.get("rollout_id"), "attempt_id": obj.get("attempt_id")}
        recs.extend(_convert(item, traj=traj, call_index=i, ref=f"{ref}/{i}", opts=opts, agent_re=agent_re))
    return recs
