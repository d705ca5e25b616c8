"""NeMo RL → Audit Portal: the GRPO ``train_data`` batch once the trainer's log-probs are in it.

NeMo RL's GRPO loop (``nemo_rl/algorithms/grpo.py``) flattens each step's message logs into one
``BatchedDataDict`` for the policy and, before the loss, adds the trainer's recompute as ``prev_logprobs``. That dict
holds both sides, token-aligned over the whole conversation:

* ``input_ids`` [B, S] — every token of the conversation (prompt, assistant turns, tool/environment turns), right
  padded; ``input_lengths`` [B] the real length;
* ``generation_logprobs`` [B, S] — the rollout engine's log-prob of token j at column j (0 where the engine did not
  sample the token);
* ``prev_logprobs`` [B, S] — the trainer's log-prob of token j at column j (NeMo RL itself compares
  ``generation_logprobs[:, 1:]`` with ``prev_logprobs[:, 1:]``);
* ``token_mask`` [B, S] — 1 on tokens the policy generated (assistant turns); ``sample_mask`` [B] — 0 for a sample
  dropped from the loss;
* ``routed_experts`` [B, S, layers, top_k] — only with ``policy.router_replay.enabled`` (R3): the experts vLLM chose
  when it *processed* token j (row j), which is the forward that produced token j + 1. Missing routes are −1; rows
  from ``input_lengths − 1`` on (the last token, never run through the engine, and padding) are filled with the
  placeholder ``0, 1, …, top_k − 1``, not a real route.

:func:`log_train_data` maps that onto ``Run.log_step``: each contiguous run of ``token_mask`` in a sample is one policy
call whose prompt is everything before it (multi-turn conversations become one call per assistant turn); a response
token at column j gets route row j − 1, so placeholder rows are never logged. Call it where the dict is complete, e.g.
right after ``train_data["prev_logprobs"] = ...`` in your copy of the loop:

    from audit_portal_client.integrations.nemo_rl import log_train_data
    log_train_data(run, train_data, step, routing_replay="R3" if router_replay else None, num_experts=128)

What it cannot see: in R3 mode NeMo RL replays ``routed_experts`` inside Megatron and does not hand back the routes
the trainer actually used, so the log carries the rollout's routes only and the replay verdict is UNVERIFIABLE, never
an assumed PASS. Pass ``trainer_routes_key`` when your trainer stores the routes it used (same layout as
``routed_experts``) — e.g. captured with NeMo RL's ``NRL_R3_TRACE_VERIFY_FORWARD`` check — and the audit compares
them. NeMo RL logs no top-K lists: the certificate uses the sampled-token bound (its caveat says so).
"""

from __future__ import annotations

import numpy as np

from audit_portal_client.fcr import to_numpy

REQUIRED = ("input_ids", "input_lengths", "generation_logprobs", "prev_logprobs", "token_mask")


def _get(data, key):
    try:
        return data[key] if key in data else None
    except (KeyError, TypeError):
        return None


def _shifted_routes(data, key, B, S):
    """Routes aligned with input positions (row j: the forward of token j) → aligned with the token each forward
    produced (column j: row j − 1); column 0 is −1 (no forward produced the first token)."""
    if key is None:
        return None
    routes = to_numpy(_get(data, key), key)
    if routes is None:
        raise ValueError(f"train_data lacks {key!r} (the routes key given)")
    if routes.ndim != 4 or routes.shape[:2] != (B, S):
        raise ValueError(
            f"train_data[{key!r}]: expected [B, S, layers, top_k] = [{B}, {S}, …], got {list(routes.shape)}"
        )
    out = np.full(routes.shape, -1, dtype=np.int64 if not np.issubdtype(routes.dtype, np.integer) else routes.dtype)
    out[:, 1:] = routes[:, :-1]
    return out


def log_train_data(
    run,
    train_data,
    step: int,
    *,
    routing_replay: str | None = None,
    rollout_routes_key: str | None = "routed_experts",
    trainer_routes_key: str | None = None,
    num_experts: int | None = None,
) -> int:
    """Log one NeMo RL ``train_data`` dict (see the module docstring); returns the number of policy calls written.
    ``rollout_routes_key`` is read only when the dict has it (R3 runs); ``routing_replay`` is the trainer's declared
    mode (none / R2 / R3)."""
    missing = [k for k in REQUIRED if _get(train_data, k) is None]
    if missing:
        raise ValueError(f"train_data lacks {', '.join(missing)} (log after prev_logprobs is computed)")
    ids = to_numpy(train_data["input_ids"], "input_ids").astype(np.int64)
    if ids.ndim != 2:
        raise ValueError(f"input_ids: expected [B, S], got {list(ids.shape)}")
    B, S = ids.shape
    lengths = to_numpy(train_data["input_lengths"], "input_lengths").astype(np.int64).reshape(-1)
    if lengths.shape != (B,) or (lengths < 0).any() or (lengths > S).any():
        raise ValueError(f"input_lengths: expected {B} lengths in [0, {S}], got {lengths.tolist()}")
    mask = to_numpy(train_data["token_mask"], "token_mask").astype(bool)
    if mask.shape != (B, S):
        raise ValueError(f"token_mask: expected [{B}, {S}], got {list(mask.shape)}")
    mask = mask & (np.arange(S)[None, :] < lengths[:, None])  # padding is never a response token
    mask[:, 0] = False  # the first token has no log-prob on either side
    sample = _get(train_data, "sample_mask")
    if sample is not None:
        mask &= to_numpy(sample, "sample_mask").reshape(B, 1).astype(bool)  # samples dropped from the loss
    routes = {}
    if rollout_routes_key and _get(train_data, rollout_routes_key) is not None:
        routes["rollout_routed_experts"] = _shifted_routes(train_data, rollout_routes_key, B, S)
    if trainer_routes_key:
        routes["trainer_routed_experts"] = _shifted_routes(train_data, trainer_routes_key, B, S)
    if hasattr(run, "_warn_once"):  # said once per run: what the certificate cannot use
        run._warn_once(
            "topk",
            "audit-portal: NeMo RL's train_data carries the sampled token's log-probs only (no "
            "top-K on either side): the certificate's ε̂ is the sampled-token estimate, looser "
            "than with top-K",
        )
    return run.log_step(
        step,
        rollout_logprobs=train_data["generation_logprobs"],
        trainer_logprobs=train_data["prev_logprobs"],
        response_mask=mask,
        response_ids=ids,
        routing_replay=routing_replay,
        num_experts=num_experts,
        **routes,
    )
