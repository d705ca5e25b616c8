"""The call drill-down's per-token view: ids (decoded with the project's registered tokenizer when one matches the
record's ``tokenizer.sha256``), span status and reasons, the two log-probs and the trainer's mask — read from the
uploaded file, never from Postgres."""

from __future__ import annotations

import math

from audit_portal.fidelity import selectors, services

MAX_TOKENS = 4096  # a drill-down page stays readable and light; longer calls say where they were cut


def _num(values, i):
    if not isinstance(values, list) or i >= len(values):
        return None
    v = values[i]
    return (
        v
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        else (None if v is None or isinstance(v, bool) else str(v))
    )


def visible(text: str) -> str:
    """A token's text as shown: line breaks and tabs get a visible mark (a bare newline has no box to hover), and
    an empty decoding shows as ∅."""
    if text == "":
        return "∅"
    return text.replace("\r", "␍").replace("\t", "→\t").replace("\n", "↵\n")


def call_tokens(call, record: dict) -> dict:
    project = call.report.project
    response = record.get("response") if isinstance(record.get("response"), dict) else {}
    ids = response.get("token_ids") if isinstance(response.get("token_ids"), list) else []
    declared = (record.get("tokenizer") or {}).get("sha256") if isinstance(record.get("tokenizer"), dict) else None
    registered = selectors.tokenizer_for_sha(project, declared)
    tok, tokenizer_error = None, None
    if registered is not None:
        try:
            tok = services.load_tokenizer(registered)
        except Exception as exc:  # noqa: BLE001 - show ids rather than fail the page
            tokenizer_error = f"{type(exc).__name__}: {exc}"
    rollout = record.get("rollout") if isinstance(record.get("rollout"), dict) else {}
    trainer = record.get("trainer") if isinstance(record.get("trainer"), dict) else {}
    mask = trainer.get("loss_mask_used") if isinstance(trainer.get("loss_mask_used"), list) else None
    status = [None] * len(ids)
    for start, end, reasons in call.spans:
        for t in range(max(0, start), min(end, len(ids))):
            status[t] = reasons
    shown = ids[:MAX_TOKENS]
    tokens = []
    for i, token_id in enumerate(shown):
        text = None
        if tok is not None and isinstance(token_id, int) and not isinstance(token_id, bool) and token_id >= 0:
            try:
                text = tok.decode([token_id])
            except Exception:  # noqa: BLE001 - an id outside the vocabulary (R0 reports it) shows as its number
                text = None
        reasons = status[i]
        tokens.append(
            {
                "position": i,
                "id": token_id,
                "text": text,
                "display": str(token_id) if text is None else visible(text),
                "verifiable": reasons == [],
                "reasons": reasons if reasons is not None else ["SPAN_NOT_STORED"],  # past MAX_STORED_SPANS
                "rollout_logprob": _num(rollout.get("logprobs"), i),
                "trainer_logprob": _num(trainer.get("logprobs"), i),
                "loss_mask_used": None if mask is None or i >= len(mask) else mask[i] == 1,
            }
        )
    return {
        "tokenizer": (
            {"name": registered.name, "sha256": registered.sha256, "kind": registered.kind} if tok is not None else None
        ),
        "declared_tokenizer_sha256": declared,
        "tokenizer_error": tokenizer_error,
        "n_tokens": len(ids),
        "shown": len(shown),
        "truncated": len(ids) > len(shown),
        "tokens": tokens,
    }
