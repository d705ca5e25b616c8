"""verl → Audit Portal: the ``DataProto`` batch after the old-log-prob recompute.

In ``RayPPOTrainer.fit`` (verl 0.9), once ``old_log_probs`` are joined to the batch and the rollout engine returned
``rollout_log_probs`` (``actor_rollout_ref.rollout.calculate_log_probs=True``), the driver calls
``verl.utils.debug.metrics.calculate_debug_metrics(batch)``, importing it at that moment. :func:`install` wraps that
function, so every training step's batch is logged with no change to the trainer:

    from audit_portal_client import Client
    from audit_portal_client.integrations.verl import install
    run = Client(url, key).run("my-project", "ppo-qwen-7b")
    install(run)            # before trainer.fit()
    trainer.fit()
    run.finish()

Or call :func:`log_dataproto` yourself wherever the batch holds both sides (a custom trainer, a recipe).

Fields read (verl's names): ``batch.batch["responses"]`` [B, R] sampled ids, ``["rollout_log_probs"]`` [B, R] the
engine's log-probs, ``["old_log_probs"]`` [B, R] the trainer's recompute, ``["response_mask"]`` [B, R] (else the
response part of ``attention_mask``, as ``compute_response_mask`` does), ``["prompts"]`` [B, P] left-padded with
``attention_mask[:, :P]``; ``meta_info["global_steps"]`` the step; ``non_tensor_batch["uid"]`` the prompt group.
Top-K lists are not in a verl batch: the certificate then uses the sampled-token bound (its caveat says so).

MoE routes (docs/routing.md): verl keeps them as ``batch["routed_experts"]`` [B, P + R, layers, top_k], aligned with
``input_ids`` (row j routes the forward of token j). With ``actor.router_replay.mode = "R3"`` that key holds the
rollout engine's routes; in ``"R2"`` mode the old-log-prob recompute writes the trainer's own routes there. Name what
the keys hold: ``log_dataproto(run, data, rollout_routes_key="routed_experts", routing_replay="R3")`` logs the
rollout's routes; the trainer's (``trainer_routes_key``) only when the trainer recorded the routes it actually used
under a key of its own — verl's batch does not carry them in R3 mode, so such a run's replay audit says UNVERIFIABLE
rather than assume the replay held.
"""

from __future__ import annotations

import numpy as np


def _get(batch, key):
    try:
        return batch[key] if key in batch.keys() else None
    except (KeyError, AttributeError):
        return None


def _response_routes(tensors, key, P, R):
    """The response rows of a routes tensor aligned with ``input_ids`` [B, P + R, layers, top_k]: row P + t − 1
    produced response token t."""
    if key is None:
        return None
    routes = _get(tensors, key)
    if routes is None:
        raise ValueError(f"DataProto.batch lacks {key!r} (the routes key given)")
    if routes.ndim != 4 or routes.shape[1] != P + R or P < 1:
        raise ValueError(
            f"batch[{key!r}]: expected [B, prompt + response = {P + R}, layers, top_k], got {list(routes.shape)}"
        )
    return routes[:, P - 1 : P - 1 + R]


def log_dataproto(
    run,
    data,
    step: int | None = None,
    *,
    rollout_routes_key: str | None = None,
    trainer_routes_key: str | None = None,
    routing_replay: str | None = None,
    num_experts: int | None = None,
) -> int:
    """Log one verl ``DataProto`` (see the module docstring); returns the number of policy calls written.
    ``rollout_routes_key`` / ``trainer_routes_key``: batch keys of routes aligned with ``input_ids``;
    ``routing_replay``: the trainer's replay mode (none / R2 / R3)."""
    tensors = data.batch
    responses = _get(tensors, "responses")
    rollout = _get(tensors, "rollout_log_probs")
    old = _get(tensors, "old_log_probs")
    missing = [
        k for k, v in (("responses", responses), ("rollout_log_probs", rollout), ("old_log_probs", old)) if v is None
    ]
    if missing:
        raise ValueError(
            f"DataProto.batch lacks {', '.join(missing)} (verl: set rollout.calculate_log_probs=True and "
            f"log after the old-log-prob recompute)"
        )
    R = responses.shape[1]
    attention = _get(tensors, "attention_mask")
    mask = _get(tensors, "response_mask")
    if mask is None:
        if attention is None:
            raise ValueError("DataProto.batch has neither response_mask nor attention_mask")
        mask = attention[:, -R:]
    prompts = _get(tensors, "prompts")
    prompt_mask = None
    if prompts is not None and attention is not None and attention.shape[1] == prompts.shape[1] + R:
        prompt_mask = attention[:, : prompts.shape[1]]
    meta = getattr(data, "meta_info", None) or {}
    if step is None:
        step = int(meta.get("global_steps", run.steps_logged))
    uids = (getattr(data, "non_tensor_batch", None) or {}).get("uid")
    traj = None
    if uids is not None:
        traj = [f"{u}-{i}" for i, u in enumerate(np.asarray(uids).tolist())]
    routes = {}
    if rollout_routes_key or trainer_routes_key:
        P = attention.shape[1] - R if attention is not None else (prompts.shape[1] if prompts is not None else 0)
        routes = {
            "rollout_routed_experts": _response_routes(tensors, rollout_routes_key, P, R),
            "trainer_routed_experts": _response_routes(tensors, trainer_routes_key, P, R),
        }
    if hasattr(run, "_warn_once"):  # said once per run: what the certificate cannot use
        run._warn_once(
            "topk",
            "audit-portal: verl's DataProto carries the sampled token's log-probs only (no top-K "
            "on either side): the certificate's ε̂ is the sampled-token estimate, looser than "
            "with top-K (log_step(..., rollout_topk_ids=…) when your rollout returns them)",
        )
    return run.log_step(
        step,
        rollout_logprobs=rollout,
        trainer_logprobs=old,
        response_mask=mask,
        response_ids=responses,
        prompt_ids=prompts,
        prompt_mask=prompt_mask,
        trajectory_ids=traj,
        routing_replay=routing_replay,
        num_experts=num_experts,
        **routes,
    )


def install(run):
    """Log every batch verl passes to ``calculate_debug_metrics`` (see the module docstring). Returns a function
    that removes the hook. A failure to log is reported on the run (``run.last_error``), never raised into verl."""
    import verl.utils.debug.metrics as debug_metrics

    original = debug_metrics.calculate_debug_metrics

    def calculate_debug_metrics(data, *args, **kwargs):
        try:
            log_dataproto(run, data)
        except Exception as exc:  # noqa: BLE001 - training must not stop because the audit log failed
            run.last_error = f"verl hook: {exc.__class__.__name__}: {exc}"
        return original(data, *args, **kwargs)

    debug_metrics.calculate_debug_metrics = calculate_debug_metrics

    def remove():
        debug_metrics.calculate_debug_metrics = original

    return remove
