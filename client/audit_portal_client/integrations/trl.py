"""TRL's ``GRPOTrainer`` → Audit Portal, with one call: ``AuditPortalCallback(run).attach(trainer)``.

What is logged per optimisation micro-batch (the tensors GRPO already holds):

* trainer side: the per-token log-probs of the *training* forward pass (``_get_per_token_logps_and_entropies`` with
  gradients enabled, inside ``_compute_loss``), detached;
* rollout side, the first that exists: ``sampling_per_token_logps`` (the inference engine's own numbers: vLLM with
  ``vllm_importance_sampling_correction``), else ``old_per_token_logps`` (TRL's recompute at generation time, when
  generation and optimisation steps are misaligned), else the log-probs of the generating policy recomputed without
  gradients right after generation (what ``old_per_token_logps`` would be);
* ``completion_mask`` (times ``tool_mask`` for tool calls), ``completion_ids``, ``prompt_ids``/``prompt_mask``.

Top-K (``topk``, default 5): the K most likely tokens and their log-probs at every completion position, on both
sides — what makes the certificate informative (without them two identical fp32 forwards still certify a loose ε̂).
TRL computes its log-probs with a fused LM head that never materialises the logits, so the callback runs one more
no-grad forward per micro-batch (row by row: one row's ``[T, vocab]`` logits at a time) with the same weights, inputs
and temperature: after generation for the rollout side (when the rollout log-probs are the no-grad recompute), and
on the training micro-batch for the trainer side. When the rollout side comes from vLLM (``sampling_per_token_logps``)
or ``old_per_token_logps``, the engine's top-K is not in TRL's batch: no top-K is logged and ``topk_note`` says why
(also logged once). ``topk=0`` turns it off.

``on_train_end`` calls ``run.finish()`` (``finish_on_end=False`` to call it yourself); its result is ``callback.result``.
Tested against trl==1.16.0 / transformers==5.24.0 (client/tests/test_trl.py and the repository's e2e test).
"""

from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback

ROLLOUT_KEY = "audit_portal_rollout_logps"
ROLLOUT_TOPK_IDS, ROLLOUT_TOPK_LPS = "audit_portal_rollout_topk_ids", "audit_portal_rollout_topk_logps"
log = logging.getLogger("audit_portal_client")


class AuditPortalCallback(TrainerCallback):
    def __init__(
        self,
        run,
        *,
        finish_on_end: bool = True,
        budget: float | None = None,
        finish_timeout: float = 900,
        topk: int = 5,
    ):
        self.run, self.finish_on_end, self.budget, self.finish_timeout = run, finish_on_end, budget, finish_timeout
        self.topk = int(topk)
        self.topk_note: str | None = None if self.topk else "top-K turned off (topk=0)"
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
                if self.topk:
                    out[ROLLOUT_TOPK_IDS], out[ROLLOUT_TOPK_LPS] = self._topk(
                        out["prompt_ids"], out["prompt_mask"], out["completion_ids"], out["completion_mask"]
                    )
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
                trainer_topk = None
                if self.topk and inputs.get(ROLLOUT_TOPK_IDS) is not None:
                    trainer_topk = self._topk(
                        inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"], inputs["completion_mask"]
                    )
                self._log(inputs, captured["logps"], trainer_topk)
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
            logps = t._get_per_token_logps_and_entropies(
                t.model,
                input_ids,
                attention_mask,
                out["completion_ids"].size(1),
                batch_size=out["completion_ids"].size(0),
            )[0]
        return logps

    def _topk(self, prompt_ids, prompt_mask, completion_ids, completion_mask):
        """``(ids [B, C, K], log-probs [B, C, K])`` at each completion position: one no-grad forward of the current
        weights, a row at a time, logits divided by TRL's temperature (as its own log-probs are)."""
        t = self.trainer
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        C = completion_ids.size(1)
        ids, lps = [], []
        with torch.no_grad():
            for r in range(input_ids.size(0)):
                logits = t.model(input_ids=input_ids[r : r + 1], attention_mask=attention_mask[r : r + 1]).logits
                logp = torch.log_softmax(logits[:, -C - 1 : -1, :].float() / float(getattr(t, "temperature", 1.0)), -1)
                top = torch.topk(logp, min(self.topk, logp.size(-1)), dim=-1)
                ids.append(top.indices)
                lps.append(top.values)
        return torch.cat(ids).detach(), torch.cat(lps).detach()

    def _log(self, inputs, trainer_logps, trainer_topk=None):
        for key, source in (
            ("sampling_per_token_logps", "engine sampling log-probs"),
            ("old_per_token_logps", "old_per_token_logps"),
            (ROLLOUT_KEY, "recomputed at generation (no grad)"),
        ):
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
        topk = {}
        recomputed = key == ROLLOUT_KEY
        if trainer_topk is not None and recomputed and inputs.get(ROLLOUT_TOPK_IDS) is not None:
            topk = dict(
                rollout_topk_ids=inputs[ROLLOUT_TOPK_IDS],
                rollout_topk_logprobs=inputs[ROLLOUT_TOPK_LPS],
                trainer_topk_ids=trainer_topk[0],
                trainer_topk_logprobs=trainer_topk[1],
            )
        elif self.topk and self.topk_note is None:
            self.topk_note = (
                f"no top-K: the rollout log-probs come from {self.rollout_source}, whose top-K TRL "
                f"does not keep in its batch"
            )
            log.warning("audit-portal: %s", self.topk_note)
        self.run.log_step(
            step,
            rollout_logprobs=rollout,
            trainer_logprobs=trainer_logps,
            response_mask=mask,
            response_ids=inputs["completion_ids"],
            prompt_ids=inputs["prompt_ids"],
            prompt_mask=inputs["prompt_mask"],
            **topk,
        )
        self.batches_logged += 1

    def on_save(self, args, state, control, **kwargs):
        """A checkpoint: the steps so far go to the spool now, so a job resumed from it finds them there."""
        self.run.flush()

    def on_train_end(self, args, state, control, **kwargs):
        if self.finish_on_end and self.batches_logged:
            self.result = self.run.finish(budget=self.budget, timeout=self.finish_timeout)
