"""TRL's ``GRPOTrainer`` → Audit Portal, with one call: ``AuditPortalCallback(run).attach(trainer)``.

What is logged per optimisation micro-batch (the tensors GRPO already holds):

* trainer side: the per-token log-probs of the *training* forward pass (``_get_per_token_logps_and_entropies`` with
  gradients enabled, inside ``_compute_loss``), detached;
* rollout side, the first that exists: ``sampling_per_token_logps`` (the inference engine's own numbers: vLLM with
  ``vllm_importance_sampling_correction``), else ``old_per_token_logps`` (TRL's recompute at generation time, when
  generation and optimisation steps are misaligned), else the log-probs of the generating policy recomputed without
  gradients right after generation (what ``old_per_token_logps`` would be);
* ``completion_mask`` (times ``tool_mask`` for tool calls), ``completion_ids``, ``prompt_ids``/``prompt_mask``.

``on_train_end`` calls ``run.finish()`` (``finish_on_end=False`` to call it yourself); its result is ``callback.result``.
Tested against trl==1.16.0 / transformers==5.24.0 (client/tests/test_trl.py and the repository's e2e test).
"""
from __future__ import annotations

import torch
from transformers import TrainerCallback

ROLLOUT_KEY = "audit_portal_rollout_logps"


class AuditPortalCallback(TrainerCallback):
    def __init__(self, run, *, finish_on_end: bool = True, budget: float | None = None, finish_timeout: float = 900):
        self.run, self.finish_on_end, self.budget, self.finish_timeout = run, finish_on_end, budget, finish_timeout
        self.trainer = None
        self.result = None
        self.rollout_source: str | None = None
        self.batches_logged = 0

    def attach(self, trainer) -> "AuditPortalCallback":
        """Install on a ``GRPOTrainer`` (wraps two of its methods on this instance only) and add the callback."""
        self.trainer = trainer
        gen, loss = trainer._generate_and_score_completions, trainer._compute_loss

        def generate_and_score(*args, **kwargs):
            out = gen(*args, **kwargs)
            if out.get("sampling_per_token_logps") is None and out.get("old_per_token_logps") is None:
                out[ROLLOUT_KEY] = self._recompute(out)
            return out

        def compute_loss(model, inputs):
            captured = {}
            inner = trainer._get_per_token_logps_and_entropies

            def per_token_logps(*a, **kw):
                res = inner(*a, **kw)
                if torch.is_grad_enabled():  # the training forward, not a no-grad reference pass
                    captured["logps"] = res[0].detach()
                return res

            trainer._get_per_token_logps_and_entropies = per_token_logps
            try:
                result = loss(model, inputs)
            finally:
                del trainer._get_per_token_logps_and_entropies  # back to the class method
            if "logps" in captured:
                self._log(inputs, captured["logps"])
            return result

        trainer._generate_and_score_completions = generate_and_score
        trainer._compute_loss = compute_loss
        trainer.add_callback(self)
        return self

    def _recompute(self, out):
        t = self.trainer
        input_ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attention_mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():
            logps = t._get_per_token_logps_and_entropies(t.model, input_ids, attention_mask,
                                                            out["completion_ids"].size(1),
                                                            batch_size=out["completion_ids"].size(0))[0]
        return logps

    def _log(self, inputs, trainer_logps):
        for key, source in (("sampling_per_token_logps", "engine sampling log-probs"),
                            ("old_per_token_logps", "old_per_token_logps"),
                            (ROLLOUT_KEY, "recomputed at generation (no grad)")):
            rollout = inputs.get(key)
            if rollout is not None:
                self.rollout_source = source
                break
        else:
            return
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        step = self.trainer.state.global_step
        self.run.log_step(step, rollout_logprobs=rollout, trainer_logprobs=trainer_logps, response_mask=mask,
                          response_ids=inputs["completion_ids"], prompt_ids=inputs["prompt_ids"],
                          prompt_mask=inputs["prompt_mask"])
        self.batches_logged += 1

    def on_save(self, args, state, control, **kwargs):
        """A checkpoint: the steps so far go to the spool now, so a job resumed from it finds them there."""
        self.run.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self.finish_on_end and self.batches_logged:
            self.result = self.run.finish(budget=self.budget, timeout=self.finish_timeout)
