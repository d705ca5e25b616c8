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
"""
from __future__ import annotations

import numpy as np


def _get(batch, key):
    try:
        return batch[key] if key in batch.keys() else None
    except (KeyError, AttributeError):
        return None


def log_dataproto(run, data, step: int | None = None) -> int:
    """Log one verl ``DataProto`` (see the module docstring); returns the number of policy calls written."""
    tensors = data.batch
    responses = _get(tensors, "responses")
    rollout = _get(tensors, "rollout_log_probs")
    old = _get(tensors, "old_log_probs")
    missing = [k for k, v in (("responses", responses), ("rollout_log_probs", rollout), ("old_log_probs", old))
               if v is None]
    if missing:
        raise ValueError(f"DataProto.batch lacks {', '.join(missing)} (verl: set rollout.calculate_log_probs=True and "
                         f"log after the old-log-prob recompute)")
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
    return run.log_step(step, rollout_logprobs=rollout, trainer_logprobs=old, response_mask=mask,
                        response_ids=responses, prompt_ids=prompts, prompt_mask=prompt_mask, trajectory_ids=traj)


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
