"""Shared pieces of the importers (docs/fidelity-rules.md#importers): record skeleton, hashing, safe literal parsing, output.

The invariants the importers keep (docs/fidelity-rules.md#importers): idempotent (same input → byte-identical
output: sorted keys, no import-time values), one record per (call, choice), never fabricate log-probs or trainer
fields (absent values stay ``null`` and no ``trainer`` block is written), source pointers preserved (``source.ref`` = ``file:line``), and a parse
failure yields a record with ``provenance: "missing"`` instead of a dropped call.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re

import orjson

from workers.fcr.schema import SENTINEL_CUT, ids_sha256  # the format's one rule for each

IMPORTER_VERSION = "fidelity-importers/1"
MAX_LITERAL_CHARS = 50_000_000
_TOKEN_ID = re.compile(r"^token_id:(\d+)$")


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_META_STR = (
    "run_id",
    "trajectory_id",
    "call_id",
    "purpose",
    "task_prompt_sha256_declared",
    "context_source_call_id",
    "model",
)
_META_INT = ("step", "call_index", "policy_version", "status")
_CONTEXT_EVENTS = ("compaction", "truncation", "retry")


def meta_of(obj) -> dict:
    """An exchange's ``meta`` block with only well-typed values kept (a log line is input, not trusted): ids and
    hashes as non-empty strings, step / call_index / policy_version / status as ints, timestamp a number,
    context_event one of compaction|truncation|retry, headers an object of string values."""
    m = obj.get("meta") if isinstance(obj, dict) else None
    if not isinstance(m, dict):
        return {}
    out = {k: m[k] for k in _META_STR if isinstance(m.get(k), str) and m[k]}
    out.update({k: m[k] for k in _META_INT if type(m.get(k)) is int})
    if type(m.get("timestamp")) in (int, float):
        out["timestamp"] = m["timestamp"]
    if m.get("context_event") in _CONTEXT_EVENTS:
        out["context_event"] = m["context_event"]
    if isinstance(m.get("headers"), dict):
        out["headers"] = m["headers"]
    return out


def task_text(prompt):
    """The task text whose SHA-256 is ``task_prompt_sha256_observed`` (docs/fcr.md#prompt): the first user message
    of a message
    list (its text parts joined), or the prompt itself when it is a string; None otherwise."""
    if isinstance(prompt, str):
        return prompt
    for m in prompt if isinstance(prompt, list) else []:
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return "".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
    return None


def token_id_of(s):
    """``"token_id:N"`` (vLLM ``return_tokens_as_token_ids``) → N, else None."""
    if isinstance(s, str):
        m = _TOKEN_ID.match(s)
        if m:
            return int(m.group(1))
    return None


def map_token(s, tokenizer):
    """A logged token → its id: ``"token_id:N"``, else the one vocabulary entry spelled ``s`` (None when there is no
    tokenizer, no entry or several)."""
    tid = token_id_of(s)
    if tid is not None:
        return tid
    if tokenizer is not None and isinstance(s, str):
        hit = tokenizer.ids_for_string(s)
        if len(hit) == 1:
            return hit[0]
    return None


def token_mismatch(strings, ids, tok) -> list[int]:
    """Positions whose logged token (``"token_id:N"``, or with a tokenizer the one vocabulary entry it spells) is
    another id than the response's: that log-prob is the engine's value for another token (a merged or re-ordered
    log), not for the sampled id. A token that cannot be mapped is not evidence either way."""
    if not isinstance(strings, list) or len(strings) != len(ids):
        return []
    return [t for t, (s, i) in enumerate(zip(strings, ids)) if (m := map_token(s, tok)) is not None and m != i]


def safe_literal(value):
    """Attribute values may be lists/tuples, JSON text or Python-repr text (``"[1, 2]"``, ``"(1, 2)"``,
    ``"[[1, 2]]"``). Parse JSON first, then :func:`ast.literal_eval` — literals only, never ``eval``."""
    if not isinstance(value, str):
        return list(value) if isinstance(value, tuple) else value
    s = value.strip()
    if not s or len(s) > MAX_LITERAL_CHARS:
        return None
    try:
        return json.loads(s)
    except ValueError:
        pass
    try:
        v = ast.literal_eval(s)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return _untuple(v)


def _untuple(v):
    if isinstance(v, tuple):
        return [_untuple(x) for x in v]
    if isinstance(v, list):
        return [_untuple(x) for x in v]
    if isinstance(v, dict):
        return {k: _untuple(x) for k, x in v.items()}
    return v


def int_list(v):
    """A list of non-negative ints (bools excluded), else None."""
    v = safe_literal(v)
    if isinstance(v, list) and all(type(x) is int and x >= 0 for x in v):
        return v
    return None


def _is_num(v) -> bool:
    return (type(v) is int or type(v) is float) and v == v


def topk_list(pairs, sampled_id, *, sampled_listed_first: bool):
    """One position's engine list ``[(id | None, logprob), …]`` → ``(list, problem)``: ``[[id, lp], …]`` sorted
    descending and duplicate-free, or ``(None, reason)`` when an entry cannot be mapped to one id / is not a number.

    Entries at the −9999 floor (an engine's stand-in for −∞: probability 0) are left out — the rest is still the head
    of the ranking. ``sampled_listed_first``: vLLM builds each position's dict as ``{sampled, top-1, …, top-k}`` and
    its servers cut that dict by position (chat keeps the first k entries, completions k + 1), so the sampled token is
    listed whether or not it is in the top k, and may have pushed the k-th out. Such a list is a true top-K list only
    without its sampled entry when that entry is the lowest: then it is dropped (its value is in
    ``rollout.logprobs``), so a certificate's cap (every unlisted token ≤ the lowest listed) stays sound."""
    out, seen = [], {}
    for i, v in pairs:
        if i is None or not _is_num(v):
            return None, "unmapped"
        if v <= SENTINEL_CUT:
            continue
        if i in seen:
            if seen[i] != v:
                return None, "duplicate"
            continue
        seen[i] = v
        out.append([i, v])
    out.sort(key=lambda e: -e[1])
    if sampled_listed_first and out and out[-1][0] == sampled_id:
        out.pop()
    return out, None


def topk_lists(tops, sampled_ids, map_id, *, sampled_listed_first: bool):
    """Per-position engine lists ``[[(token, lp), …], …]`` → ``(top_k, dropped_positions)`` through
    :func:`topk_list`; a position whose list cannot be used becomes ``[]`` and is listed in ``dropped``."""
    top_k, dropped = [], []
    for t, entries in enumerate(tops):
        lst, _ = topk_list(
            [(map_id(x), v) for x, v in entries], sampled_ids[t], sampled_listed_first=sampled_listed_first
        )
        if lst is None:
            top_k.append([])
            dropped.append(t)
        else:
            top_k.append(lst)
    return top_k, dropped


def tokenizer_block(tokenizer) -> dict:
    if tokenizer is None:
        return {"id": "unknown", "sha256": "unknown"}
    return {"id": tokenizer.id, "sha256": tokenizer.sha256}


def skeleton(*, run_id, trajectory_id, step, call_id, call_index, source_format, ref, tokenizer=None) -> dict:
    """A structurally valid record with every id array ``missing`` — the parse-failure fallback
    (docs/fidelity-rules.md#importers)."""
    return {
        "schema": "fcr/1",
        "run_id": run_id,
        "trajectory_id": trajectory_id,
        "step": step,
        "call_id": call_id,
        "call_index": call_index,
        "role": "unknown",
        "role_source": "default",
        "model": {"served_name": "unknown", "policy_version": None},
        "tokenizer": tokenizer_block(tokenizer),
        "chat_template": None,
        "engine": {
            "name": "unknown",
            "api": "chat.completions",
            "logprobs_mode": None,
            "generation_config_source": "unknown",
        },
        "sampling": {},
        "prompt": {
            "token_ids": [],
            "provenance": "missing",
            "ids_sha256": ids_sha256([]),
            "task_prompt_sha256_declared": None,
            "task_prompt_sha256_observed": None,
        },
        "response": {
            "token_ids": [],
            "provenance": "missing",
            "ids_sha256": ids_sha256([]),
            "text": None,
            "usage_completion_tokens": None,
        },
        "rollout": {"logprobs": []},
        "source": {"format": source_format, "ref": ref, "importer_version": IMPORTER_VERSION},
    }


def dump(rec) -> bytes:
    return orjson.dumps(rec, option=orjson.OPT_SORT_KEYS) + b"\n"


def emit(out, recs, *, role, stats) -> None:
    """Write records; a configured ``role`` (``--role``) declares every call whose log did not (``config``)."""
    for rec in recs:
        if role is not None and rec["role_source"] == "default":
            rec["role"], rec["role_source"] = role, "config"
        out.write(dump(rec))
        stats["records"] += 1


_BINARY_FORMATS = (
    (b"PK\x03\x04", "a zip archive — torch.save's format (e.g. slime's --save-debug-rollout-data .pt dump)"),
    (b"\x93NUMPY", "a NumPy .npy array"),
)


def refuse_binary(path) -> None:
    """Refuse, naming the format, an input that is not JSON lines: a torch dump (zip, or a legacy pickle) read as
    text would turn into one ``missing`` record per byte run. Importers read logs as JSONL only and never unpickle
    (a pickle runs code when loaded): convert such dumps with the framework first (slime: ``Sample.to_dict()``)."""
    with open(path, "rb") as f:
        head = f.read(8)
    for magic, what in _BINARY_FORMATS:
        if head.startswith(magic):
            raise ValueError(
                f"{os.fspath(path)} is {what}, not JSON lines; importers do not load binary dumps — "
                f"write one JSON object per line (slime: Sample.to_dict())"
            )
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        raise ValueError(
            f"{os.fspath(path)} is a Python pickle (protocol {head[1]}; torch.save's legacy format), "
            f"not JSON lines; importers never unpickle — write one JSON object per line "
            f"(slime: Sample.to_dict())"
        )


def read_jsonl(path):
    """Yield ``(line_no, obj or None, error or None)`` for every non-blank line (gzip by magic). A binary dump (zip,
    pickle, .npy) is refused first, naming its format (:func:`refuse_binary`). Read through the one door for run
    logs (workers/fcr/source.py), so its limits and its policy for a damaged file are the other readers'."""
    from workers.fcr.reader import FcrParseError
    from workers.fcr.source import RunLogSource

    refuse_binary(path)
    try:
        for line_no, raw in RunLogSource(path).lines():
            if raw.isspace():
                continue
            try:
                yield line_no, orjson.loads(raw), None
            except orjson.JSONDecodeError as exc:
                yield line_no, None, f"not valid JSON ({exc})"
    except FcrParseError as exc:
        yield exc.line, None, exc.reason


def ref_of(path, line) -> str:
    return f"{os.path.basename(os.fspath(path))}:{line}"
