"""Importers for trainer-side rollout outputs: verl agent loops, slime samples, SkyRL generator outputs.

All three hold one *trajectory* as prompt ids + response ids, where the response interleaves what the model sampled
(mask 1) with what the environment or a tool inserted (mask 0), plus the rollout log-probs the engine returned:

* **verl** ``AgentLoopOutput`` (``model_dump()``, one per line): ``prompt_ids``, ``response_ids``, ``response_mask``
  (1 = LLM-generated, 0 = tool response), ``response_logprobs`` (None unless the rollout computed them),
  ``reward_score``, ``num_turns``, ``extra_fields``. A verl **DataProto row** (one sample of a training batch, each
  tensor a list) is read too: ``prompts`` left-padded and ``responses`` right-padded to fixed widths,
  ``attention_mask`` over both (it locates the padding), ``response_mask`` (0 on tool tokens and padding),
  ``rollout_log_probs`` (the engine's) and ``old_log_probs`` (the trainer's recomputation: both sides at once).
* **slime** ``Sample.to_dict()`` (one per line): ``tokens`` (prompt + response), ``response_length``, ``loss_mask``
  (over the response; None = all 1), ``rollout_log_probs`` (over the response), ``weight_versions``, ``status``,
  ``index`` / ``group_index``.
* **SkyRL** ``GeneratorOutput`` (one batch per line, column lists: ``prompt_token_ids``, ``response_ids``,
  ``loss_masks``, ``rollout_logprobs``, ``trajectory_ids`` [{``instance_id``, ``repetition_id``}], ``stop_reasons``,
  ``is_last_step``) or one trajectory per line with the same keys in the singular. SkyRL returns
  ``rollout_logprobs = None`` when token identity was lost (text post-processing): those responses are marked
  ``retokenized``, never verifiable.

Each maximal run of mask-1 positions is one model call (``role: policy``, ``role_source: config`` — the trainer's
own loop trained exactly these tokens); its prompt is the trajectory prompt plus everything before the run
(provenance ``engine_input``: these frameworks send token ids to the engine), its response the run (``engine``), its
log-probs the run's slice. The task text the rollout was given — verl ``raw_prompt`` / ``messages``, slime
``prompt``, SkyRL ``prompts`` (its ``GeneratorInput`` conversations, added beside the output) — gives
``task_prompt_sha256_observed`` (first user message); the trainer's declared hash comes with ``join``. Mask-0 tokens are never a call's response. Optional line keys ``trajectory_id``, ``step``,
``run_id`` override the derived ones. ``ids_from="text"`` declares that the ids were rebuilt from text offline
(response provenance ``retokenized``). No trainer block is written: join the trainer side (``join``).
"""

from __future__ import annotations

import os
import re

from workers.fidelity.importers.common import (
    dump,
    ids_sha256,
    read_jsonl,
    ref_of,
    skeleton,
    task_text,
    text_sha256,
)
from workers.fidelity.importers.fields import (
    Field,
    extras,
    ids,
    integer,
    number,
    read_table,
    sha256_hex,
    text,
    text_or_messages,
    version,
)


def split_calls(response_ids, mask):
    """``[(start, end), …]`` of the maximal mask-1 runs."""
    runs, start = [], None
    for t, m in enumerate(mask):
        if m and start is None:
            start = t
        elif not m and start is not None:
            runs.append((start, t))
            start = None
    if start is not None:
        runs.append((start, len(mask)))
    return runs


def trajectory_records(
    *,
    prompt_ids,
    response_ids,
    mask,
    logprobs,
    traj,
    step,
    run_id,
    ref,
    fmt,
    opts,
    policy_version=None,
    extra=None,
    first_index=0,
    prompt=None,
    token_versions=None,
    unverified=(),
    ids_reencoded=False,
    trainer=None,
    declared=None,
) -> list[dict]:
    """One ``fcr/1`` record per model call of a trajectory (see the module docstring); call indices start at
    ``first_index`` (SkyRL step-wise rows continue a trajectory). ``token_versions`` (one int or None per response
    token) is the version that sampled each token of a partial rollout; ``unverified`` lists ``(start, end, reason)``
    response spans whose log-prob is not shown to be the engine's (docs/fcr.md#rollout-and-trainer)."""
    if prompt_ids is None or response_ids is None:
        raise ValueError("prompt or response ids missing or not lists of non-negative ints")
    n = len(response_ids)
    mask = [1] * n if mask is None else mask
    if not (isinstance(mask, list) and len(mask) == n and all(m in (0, 1) and type(m) is int for m in mask)):
        raise ValueError(
            f"mask must be 0/1 per response token ({n}), got {type(mask).__name__} of "
            f"{len(mask) if isinstance(mask, list) else '?'}"
        )
    row = dict(
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        logprobs=logprobs,
        traj=traj,
        step=step,
        run_id=run_id,
        ref=ref,
        fmt=fmt,
        opts=opts,
        policy_version=policy_version,
        extra=extra,
        prompt=prompt,
        token_versions=token_versions,
        unverified=unverified,
        ids_reencoded=ids_reencoded,
        trainer=trainer,
        declared=declared,
        lps_ok=isinstance(logprobs, list) and len(logprobs) == n,
        retok=opts.get("ids_from") == "text" or (fmt == "skyrl" and logprobs is None) or ids_reencoded,
    )
    return [_call_record(row, k, a, b) for k, (a, b) in enumerate(split_calls(response_ids, mask), start=first_index)]


def _call_record(row: dict, k: int, a: int, b: int) -> dict:
    """The record of the model call at response positions ``[a, b)`` of a trajectory (``row``: what
    :func:`trajectory_records` was given, with ``lps_ok`` and ``retok`` decided once)."""
    opts, traj, response_ids = row["opts"], row["traj"], row["response_ids"]
    rec = skeleton(
        run_id=row["run_id"],
        trajectory_id=traj,
        step=row["step"],
        call_id=f"{traj}#{k}",
        call_index=k,
        source_format=row["fmt"],
        ref=row["ref"],
        tokenizer=opts.get("tokenizer"),
    )
    rec["role"], rec["role_source"], rec["purpose"] = "policy", "config", "main_loop"
    rec["engine"] = {
        "name": opts.get("engine") or "unknown",
        "api": "generate",
        "logprobs_mode": opts.get("logprobs_mode"),
        "generation_config_source": opts.get("generation_config_source", "unknown"),
    }
    p = list(row["prompt_ids"]) + list(response_ids[:a])
    rec["prompt"].update(token_ids=p, provenance="engine_input", ids_sha256=ids_sha256(p))
    text = task_text(row["prompt"])
    if text is not None:  # what the rollout was asked (the trainer declares its hash through ``join``)
        rec["prompt"]["task_prompt_sha256_observed"] = text_sha256(text)
    if k == 0 and row["declared"] is not None:  # the task hash a row declares beside its batch (root call only)
        rec["prompt"]["task_prompt_sha256_declared"] = row["declared"]
    r = list(response_ids[a:b])
    rec["response"].update(
        token_ids=r, provenance="retokenized" if row["retok"] else "engine", ids_sha256=ids_sha256(r)
    )
    lp = [v if type(v) in (int, float) else None for v in row["logprobs"][a:b]] if row["lps_ok"] else [None] * len(r)
    rec["rollout"] = {"logprobs": [None] * len(r) if row["retok"] and not row["ids_reencoded"] else lp}
    rec["model"]["policy_version"] = _call_versions(rec, row["policy_version"], row["token_versions"], a, b)
    spans = [[max(s, a) - a, min(e, b) - a, why] for s, e, why in row["unverified"] if s < b and e > a]
    if spans:
        rec["rollout"]["logprob_unverified"] = spans
    if row["trainer"] is not None:  # a step dump that holds the trainer's side too (NeMo RL)
        rec["trainer"] = _trainer_block(row["trainer"], a, b, traj)
    rec["extra"] = dict(row["extra"] or {}, response_span=[a, b])
    if row["logprobs"] is not None and not row["lps_ok"]:
        rec["extra"]["logprobs_unaligned"] = True
    return rec


def _trainer_block(trainer, a, b, traj) -> dict:
    """The trainer's side of one call from a step dump: its recomputed log-probs, the mask it applied (its token
    mask × the sample's weight) and the training sequence the calls shared (``sample_id``)."""
    lps = trainer["logprobs"][a:b]
    block = {
        "logprobs": [v if type(v) in (int, float) else None for v in lps],
        "loss_mask_used": [1 if trainer["used"] else 0] * (b - a),
        "sample_id": traj,
    }
    if type(trainer.get("policy_version")) is int:
        block["policy_version"] = trainer["policy_version"]
    return block


def _call_versions(rec, policy_version, token_versions, a, b):
    """The call's ``model.policy_version``: the sample's one version, or, for a partial rollout, the version of
    every token of the call when they share one; otherwise None and ``rollout.token_policy_versions`` says which
    version (or null: unknown) sampled each token — never the sample's last version."""
    if token_versions is None:
        return policy_version
    tv = token_versions[a:b]
    if tv and tv[0] is not None and tv.count(tv[0]) == len(tv):
        return tv[0]
    rec["rollout"]["token_policy_versions"] = tv
    return None


def _traj(
    values: dict, *, version=None, token_versions=None, extra=None, unverified=(), ids_reencoded=False, trainer=None
):
    """The row :func:`trajectory_records` takes, from the fields a stack's table read (``values``) and what its
    named transforms derived."""
    return {
        "key": values.get("trajectory_id"),
        "prompt_ids": values.get("prompt.token_ids"),
        "response_ids": values.get("response.token_ids"),
        "mask": values.get("calls.mask"),
        "logprobs": values.get("rollout.logprobs"),
        "prompt": values.get("prompt.task_text"),
        "policy_version": version,
        "token_versions": token_versions,
        "extra": dict(extras(values), **(extra or {})),
        "unverified": list(unverified),
        "ids_reencoded": ids_reencoded,
        "trainer": trainer,
        "declared": values.get("prompt.task_prompt_sha256_declared"),
    }


def span_versions(start, end, n):
    """verl fully-async ``param_version_start`` / ``param_version_end`` → (one version, per-token versions): a sample
    resumed across weight updates (start ≠ end) has tokens from several versions and the log does not say which
    produced which, so every token's version is unknown (None). So is a sample that logs only one of the two (verl
    sets both; an end left None is seen in partial rollouts): it may have been resumed, and the version it names is
    not shown to be every token's."""
    s, e = version(start), version(end)
    if s is None and e is None:
        return None, None
    if s == e:
        return s, None
    return None, [None] * n


# verl ``AgentLoopOutput.model_dump()`` (volcengine/verl, recipe/fully_async_policy): one sample per line
VERL_FIELDS = (
    # verl's ``uid`` is the prompt's group id, shared by its n GRPO samples: never a trajectory id (``traj_uid`` is)
    Field("trajectory_id", ("trajectory_id", "traj_uid", "request_id"), pick="truthy", note="else file:line"),
    Field("extra.group_uid", ("uid",), text, optional=True, note="the prompt group (GRPO's n samples)"),
    Field("prompt.token_ids", ("prompt_ids",), ids),
    Field("response.token_ids", ("response_ids",), ids),
    Field("calls.mask", ("response_mask",), note="1 = model token; each run of 1s is one call; absent: refused"),
    Field("rollout.logprobs", ("response_logprobs", "log_probs")),
    Field("prompt.task_text", ("raw_prompt", "messages"), pick="present", note="task_prompt_sha256_observed"),
    Field("version_start", ("param_version_start", "extra_fields.param_version_start")),
    Field("version_end", ("param_version_end", "extra_fields.param_version_end")),
    Field("steps_min", ("min_global_steps", "extra_fields.min_global_steps")),
    Field("steps_max", ("max_global_steps", "extra_fields.max_global_steps")),
    Field("model.policy_version", ("param_version", "extra_fields.param_version"), version),
    Field("extra.num_turns", ("num_turns",), optional=True),
    Field("extra.reward_score", ("reward_score",), optional=True),
)


# verl DataProto rows (volcengine/verl, ``verl/experimental/agent_loop/agent_loop.py`` ``_postprocess`` and
# ``verl/trainer/ppo/ray_trainer.py``): one sample of a batch per line, each tensor a list. Read on top of
# VERL_FIELDS (ids, group, versions, task text come from the same non-tensor names).
VERL_DATAPROTO_FIELDS = (
    Field("prompts", ("prompts",), ids, note="left-padded to prompt_length: the real prompt is its attention_mask 1s"),
    Field("responses", ("responses",), ids, note="right-padded to response_length: cut at the attention_mask's 1s"),
    Field("attention_mask", ("attention_mask",), note="over prompts + responses; 1 on real tokens"),
    Field("input_ids", ("input_ids",), ids, note="when logged, must be prompts + responses"),
    Field("rollout_log_probs", ("rollout_log_probs",), note="→ `rollout.logprobs` on real response positions"),
    Field(
        "prompt.task_prompt_sha256_declared",
        ("task_prompt_sha256_declared",),
        sha256_hex,
        note="root call; a hash written beside the batch at dispatch (verl writes none)",
    ),
    Field("old_log_probs", ("old_log_probs",), note="→ `trainer.logprobs`; a copy of rollout_log_probs: not written"),
)


def _padded_span(mask, left: bool) -> int:
    """The count of real positions of a 0/1 attention mask padded on one side (left: 0…0 1…1, right: 1…1 0…0);
    a mask with holes is not padding verl writes, and is refused."""
    n = sum(mask)
    real = mask[len(mask) - n :] if left else mask[:n]
    if any(m != 1 for m in real):
        raise ValueError(
            f"attention_mask's {'prompt' if left else 'response'} part is not {'left' if left else 'right'}-padded"
        )
    return n


def _real_list(values: dict, name: str, n: int, width: int):
    """A per-response-position list cut to the ``n`` real response tokens; None when not logged. One shorter than
    the real response (values missing) or longer than the padded response is refused, naming the lengths."""
    v = values[name]
    if v is None:
        return None
    if not isinstance(v, list) or not n <= len(v) <= width:
        got = len(v) if isinstance(v, list) else type(v).__name__
        raise ValueError(f"{name} has {got} values; the response has {n} real tokens padded to {width}")
    return v[:n]


def verl_dataproto(values: dict) -> dict:
    """A verl DataProto row → the AgentLoopOutput fields :func:`_verl_rows` reads (in ``values``), plus the trainer
    side. Padding is located by ``attention_mask`` (never by the pad id, which is also a real token, e.g. EOS):
    the prompt is the left-padded ``prompts`` where its mask is 1, the response the first ``n`` of ``responses``.
    Lengths that disagree are refused, naming them."""
    p, r, am = values["prompts"], values["responses"], values["attention_mask"]
    if p is None or r is None:
        raise ValueError("prompts / responses missing or not lists of token ids")
    P, R = len(p), len(r)
    if not (isinstance(am, list) and len(am) == P + R and all(type(m) is int and m in (0, 1) for m in am)):
        got = len(am) if isinstance(am, list) else type(am).__name__
        raise ValueError(f"attention_mask must be 0/1 over prompts + responses ({P} + {R}), got {got}")
    if values["input_ids"] is not None and values["input_ids"] != p + r:
        raise ValueError("input_ids is not prompts + responses")
    k, n = _padded_span(am[:P], left=True), _padded_span(am[P:], left=False)
    mask = values["calls.mask"]
    if not isinstance(mask, list) or len(mask) != R:
        got = len(mask) if isinstance(mask, list) else type(mask).__name__
        raise ValueError(f"response_mask has {got} positions; responses has {R}")
    if any(mask[n:]):
        raise ValueError(f"response_mask marks padding (past the {n} real response tokens) as model tokens")
    values.update(
        {
            "prompt.token_ids": p[P - k :],
            "response.token_ids": r[:n],
            "calls.mask": mask[:n],
            "rollout.logprobs": _real_list(values, "rollout_log_probs", n, R),
        }
    )
    return _verl_trainer(values, _real_list(values, "old_log_probs", n, R))


def _verl_trainer(values: dict, old) -> dict:
    """The trainer side of a DataProto row: verl's recomputed ``old_log_probs`` under the ``response_mask`` it
    trains with. In rollout-correction bypass mode verl sets ``old_log_probs = rollout_log_probs`` (no
    recomputation): equal on every model token, it is the engine's value again, not a trainer's, and no trainer
    block is written (``extra.old_log_probs: rollout_copy``) — a copy would read as perfect agreement."""
    if old is None:
        return {}
    lp, mask = values["rollout.logprobs"], values["calls.mask"]
    if lp is not None and all(old[t] == lp[t] for t, m in enumerate(mask) if m == 1):
        return {"extra": {"old_log_probs": "rollout_copy"}}
    return {"trainer": {"logprobs": old, "used": True, "policy_version": None}}


def required_mask(values: dict, name: str):
    """verl's ``response_mask`` and SkyRL's loss masks are the only record of which response tokens a tool or the
    environment inserted (logged with a 0.0 stand-in log-prob): without one, which tokens the model sampled is
    unknown, and the response is never read as all model tokens (slime's ``loss_mask: null`` is upstream's "all 1")."""
    if values["calls.mask"] is None:
        raise ValueError(f"{name} missing: which response tokens the model sampled is unknown (never read as all)")
    return values


def _verl_rows(values: dict):
    """The fully-async recipe's ``param_version_start``/``_end``, else verl's ``min_global_steps``/``max_global_steps``
    (the weights versions that generated the sample's first and last tokens), else ``param_version``."""
    dataproto = any(values.get(k) is not None for k in ("prompts", "responses", "attention_mask"))
    side = verl_dataproto(values) if dataproto else {}
    n = len(required_mask(values, "response_mask")["response.token_ids"] or ())
    lo, hi = values["version_start"], values["version_end"]
    if lo is None and hi is None:
        lo, hi = values["steps_min"], values["steps_max"]
    one, tv = span_versions(lo, hi, n)
    if one is None and tv is None:
        one = values["model.policy_version"]
    extra = dict(side.get("extra", {}), **({"policy_versions": [version(lo), version(hi)]} if tv is not None else {}))
    return [_traj(values, version=one, token_versions=tv, extra=extra, trainer=side.get("trainer"))]


def slime_versions(wv, prompt_len, n):
    """slime ``weight_versions`` → (one version, per-token versions). Older slime appends one version string per
    engine call (no token positions): one distinct version is the sample's; several (a partial rollout) leave every
    token's version unknown. Newer samples hold per call a list of ``{version, abs_start, abs_end}`` spans over
    ``tokens``: each response token gets its span's version (None where no span covers it)."""
    if not isinstance(wv, list) or not wv:
        return None, None
    spans = [s for call in wv for s in (call if isinstance(call, list) else [call]) if isinstance(s, dict)]
    if not spans:
        distinct = {version(v) for v in wv}
        if len(distinct) == 1:
            return distinct.pop(), None
        return None, [None] * n
    tv = [None] * n
    for s in spans:
        v, a, b = version(s.get("version")), s.get("abs_start"), s.get("abs_end")
        if type(a) is int and type(b) is int:
            for t in range(max(a - prompt_len, 0), min(b - prompt_len, n)):
                tv[t] = v
    return None, tv


# slime ``Sample.to_dict()`` (THUDM/slime, slime/utils/types.py): one sample per line
SLIME_FIELDS = (
    Field("tokens", ("tokens",), ids, note="prompt + response, split at `response_length`"),
    Field("response_length", ("response_length",), integer),
    Field("calls.mask", ("loss_mask",), note="over the response; null = all 1"),
    Field("rollout.logprobs", ("rollout_log_probs",)),
    Field("prompt.task_text", ("prompt",)),
    Field("weight_versions", ("weight_versions",), note="per engine call, or {version, abs_start, abs_end} spans"),
    Field("trajectory_id", ("trajectory_id",), pick="truthy"),
    Field("index", ("index",)),
    Field("group_index", ("group_index",)),
    Field("extra.status", ("status",), text, optional=True),
)


def _slime_rows(values: dict):
    tokens, n = values["tokens"], values["response_length"]
    if tokens is None or n is None or not 0 <= n <= len(tokens):
        raise ValueError("tokens / response_length missing or inconsistent")
    split = len(tokens) - n
    one, tv = slime_versions(values["weight_versions"], split, n)
    if values["trajectory_id"] is None and values["index"] is not None:
        values["trajectory_id"] = f"{values['group_index']}:{values['index']}"
    values["prompt.token_ids"], values["response.token_ids"] = tokens[:split], tokens[split:]
    return [_traj(values, version=one, token_versions=tv)]


def skyrl_unverified(r, m, lp, stop, appended_eos):
    """SkyRL appends an EOS (loss mask 1) with rollout log-prob 0.0 when a response did not end with one and did
    not stop for length: that value is a placeholder, not the engine's. The output does not say whether it
    appended; a last model token logged with exactly 0.0 and a stop reason other than ``length`` is taken as one."""
    if not (isinstance(r, list) and r and isinstance(lp, list) and len(lp) == len(r)):
        return []
    last_model = isinstance(m, list) and len(m) == len(r) and m[-1] == 1 or m is None
    if appended_eos is True or (last_model and stop != "length" and type(lp[-1]) in (int, float) and lp[-1] == 0):
        return [(len(r) - 1, len(r), "placeholder")]
    return []


def skyrl_reencoded(flag) -> bool:
    """An environment's ``postprocessed_action`` replaced the sampled text and SkyRL re-encoded its ids, keeping the
    sampled log-probs: logged per trajectory as a truthy ``postprocessed_action`` (or in its ``env_metrics``)."""
    if isinstance(flag, dict):
        flag = flag.get("postprocessed_action")
    return bool(flag)


def skyrl_key(tid):
    """SkyRL's ``TrajectoryID`` ``{instance_id, repetition_id}`` → ``"instance_repetition"``; a plain id as logged."""
    if isinstance(tid, dict):
        return f"{tid.get('instance_id')}_{tid.get('repetition_id')}"
    return tid if isinstance(tid, str) and tid or type(tid) is int else None


# SkyRL ``GeneratorOutput`` (NovaSky-AI/SkyRL, skyrl_gym_generator.py), one trajectory per line; a batch line holds
# the same fields as column lists under the names of SKYRL_BATCH_COLUMNS
SKYRL_FIELDS = (
    Field("trajectory_id", ("trajectory_id",), skyrl_key),
    Field("prompt.token_ids", ("prompt_token_ids",), ids),
    Field("response.token_ids", ("response_ids",), ids),
    Field("calls.mask", ("loss_mask", "loss_masks"), pick="present", note="absent: refused"),
    Field("rollout.logprobs", ("rollout_logprobs",), note="null: token identity lost → retokenized"),
    Field("prompt.task_text", ("prompt", "prompts"), pick="present"),
    Field("extra.stop_reason", ("stop_reason",), text, optional=True),
    Field("appended_eos", ("appended_eos_token",), note="the EOS SkyRL appended: placeholder log-prob"),
    Field("postprocessed", ("postprocessed_action",), skyrl_reencoded, note="ids re-encoded: reencoded"),
    Field("env_postprocessed", ("env_metrics",), skyrl_reencoded, note="its `postprocessed_action`"),
)
SKYRL_BATCH_COLUMNS = {
    "prompt_token_ids": "prompt_token_ids",
    "response_ids": "response_ids",
    "loss_masks": "loss_mask",
    "rollout_logprobs": "rollout_logprobs",
    "trajectory_ids": "trajectory_id",
    "stop_reasons": "stop_reason",
    "prompts": "prompt",
    "appended_eos_token": "appended_eos_token",
    "postprocessed_action": "postprocessed_action",
    "env_metrics": "env_metrics",
}


def _skyrl_rows(values: dict):
    r, lp = required_mask(values, "loss_mask")["response.token_ids"], values["rollout.logprobs"]
    reenc = values["postprocessed"] or values["env_postprocessed"]
    unverified = skyrl_unverified(r, values["calls.mask"], lp, values.get("extra.stop_reason"), values["appended_eos"])
    if reenc and r and lp is not None:
        unverified.append((0, len(r), "reencoded"))
    return [_traj(values, unverified=unverified, ids_reencoded=reenc)]


def skyrl_batch(obj) -> list[dict] | None:
    """A ``GeneratorOutput`` batch (column lists, one entry per trajectory) → one object per trajectory under the
    single-trajectory names; None when ``obj`` is one trajectory."""
    p = obj.get("prompt_token_ids")
    if not (isinstance(p, list) and p and isinstance(p[0], list)):
        return None
    B = len(p)
    cols = {}
    for name, single in SKYRL_BATCH_COLUMNS.items():
        v = obj.get(name)
        if v is None:
            continue
        if not isinstance(v, list) or len(v) != B:
            raise ValueError(f"{name} must be a list of {B} entries (one per trajectory)")
        cols[single] = v
    return [{single: v[i] for single, v in cols.items()} for i in range(B)]


# NeMo RL ``train_data_step{N}.jsonl`` (NVIDIA-NeMo/RL, nemo_rl/algorithms/grpo.py): one sample per line, every
# per-token array over the whole padded sequence
NEMO_RL_FIELDS = (
    Field("token_ids", ("token_ids", "input_ids"), ids, pick="present", note="prompt: before the first model token"),
    Field("input_lengths", ("input_lengths", "input_length"), pick="present"),
    Field("calls.mask", ("token_mask", "token_loss_mask"), pick="present"),
    Field("rollout.logprobs", ("generation_logprobs",), note="exact 0.0 on a model token: not_reported"),
    Field("trainer.logprobs", ("prev_logprobs",)),
    Field("trainer.loss_mask_used", ("sample_mask", "sample_loss_mask"), pick="present", note="× token mask"),
    Field("trajectory_id", ("trajectory_id", "sample_id"), pick="truthy"),
    Field("prompt.task_text", ("content",), text_or_messages),
    Field("model.policy_version", ("policy_version",), version),
    Field("trainer.policy_version", ("trainer_policy_version",), version),
    Field("extra.rewards", ("rewards",), number, optional=True),
    Field("extra.reward", ("reward",), number, optional=True),
)


def nemo_stand_ins(gen, mask):
    """NeMo RL writes 0 where the engine reported no log-prob: an exact 0.0 on a model token cannot be shown to be
    the engine's value (a loss mask of 1 is no evidence) — ``(t, t + 1, "not_reported")`` for each."""
    return [
        (t, t + 1, "not_reported") for t, v in enumerate(gen) if mask[t] == 1 and type(v) in (int, float) and v == 0
    ]


def _nemo_rows(values: dict):
    """Both sides are imported at once; the prompt is everything before the first model token."""
    ids_, n, mask = values["token_ids"], values["input_lengths"], values["calls.mask"]
    gen, prev = values["rollout.logprobs"], values["trainer.logprobs"]
    if ids_ is None or type(n) is not int or not 0 < n <= len(ids_):
        raise ValueError("token_ids / input_lengths missing or inconsistent (log token_ids with the step's train data)")
    for name, v in (("token_mask", mask), ("generation_logprobs", gen), ("prev_logprobs", prev)):
        if not isinstance(v, list) or len(v) < n:
            raise ValueError(f"{name} must be a list covering the {n} tokens of the sequence")
    first = next((t for t in range(n) if mask[t] == 1), n)
    resp_mask = [1 if m == 1 else 0 if m == 0 else m for m in mask[first:n]]
    values.update(
        {
            "prompt.token_ids": ids_[:first],
            "response.token_ids": ids_[first:n],
            "calls.mask": resp_mask,
            "rollout.logprobs": list(gen[first:n]),
        }
    )
    used = values["trainer.loss_mask_used"]
    trainer = {
        "logprobs": list(prev[first:n]),
        "used": used not in (0, 0.0, False),
        "policy_version": values["trainer.policy_version"],
    }
    return [
        _traj(
            values,
            version=values["model.policy_version"],
            unverified=nemo_stand_ins(gen[first:n], resp_mask),
            trainer=trainer,
        )
    ]


STACKS = {
    "verl": (VERL_FIELDS + VERL_DATAPROTO_FIELDS, _verl_rows),
    "slime": (SLIME_FIELDS, _slime_rows),
    "skyrl": (SKYRL_FIELDS, _skyrl_rows),
    "nemo-rl": (NEMO_RL_FIELDS, _nemo_rows),
}


def rows_of(fmt: str, obj: dict) -> list[dict]:
    """One input line of stack ``fmt`` → its trajectory rows: the stack's table read, then its named transforms."""
    table, assemble = STACKS[fmt]
    items = (skyrl_batch(obj) if fmt == "skyrl" else None) or [obj]
    return [row for item in items for row in assemble(read_table(item, table))]


def import_trajectories(
    in_path,
    out_path,
    *,
    fmt,
    run_id=None,
    step=None,
    tokenizer=None,
    engine=None,
    logprobs_mode=None,
    generation_config_source="unknown",
    ids_from="engine",
    **_ignored,
) -> dict:
    """Convert verl / slime / SkyRL rollout outputs (``fmt``) to ``fcr/1``; returns counts. A line that cannot be
    read becomes a ``missing`` record (docs/fidelity-rules.md#importers)."""
    if fmt not in STACKS:
        raise ValueError(f"unknown trajectory format {fmt!r}")
    if ids_from not in ("engine", "text"):
        raise ValueError("ids_from must be 'engine' or 'text'")
    if step is None and fmt == "nemo-rl":  # NeMo RL names its dumps train_data_step{N}.jsonl
        m = re.search(r"train_data_step(\d+)", os.path.basename(os.fspath(in_path)))
        step = int(m.group(1)) if m else None
    opts = {
        "tokenizer": tokenizer,
        "engine": engine,
        "logprobs_mode": logprobs_mode,
        "generation_config_source": generation_config_source,
        "ids_from": ids_from,
    }
    stats = {"lines": 0, "trajectories": 0, "records": 0, "failed": 0, "turns_without_model_tokens": 0}
    next_index: dict = {}
    with open(out_path, "wb") as out:
        for line, obj, err in read_jsonl(in_path):
            stats["lines"] += 1
            ref = ref_of(in_path, line)
            recs = None
            try:
                if not isinstance(obj, dict):
                    raise ValueError(err or "not a JSON object")
                st = obj.get("step", obj.get("global_step", obj.get("global_steps", step)))
                st = st if type(st) is int else -1
                rid = obj.get("run_id") if isinstance(obj.get("run_id"), str) else run_id or "unknown"
                recs = []
                for j, row in enumerate(rows_of(fmt, obj)):
                    key = row.pop("key")
                    traj = str(key) if key is not None else f"{ref}/{j}"
                    # SkyRL step-wise rows repeat a trajectory id (one row per turn, in order): indices continue
                    got = trajectory_records(
                        traj=traj,
                        step=st,
                        run_id=rid,
                        ref=ref,
                        fmt=fmt,
                        opts=opts,
                        first_index=next_index.get(traj, 0),
                        **row,
                    )
                    next_index[traj] = next_index.get(traj, 0) + len(got)
                    stats["trajectories"] += 1
                    stats["turns_without_model_tokens"] += int(not got)
                    recs.extend(got)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                err = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
                recs = None
            if recs is None:
                stats["failed"] += 1
                rec = skeleton(
                    run_id=run_id or "unknown",
                    trajectory_id=ref,
                    step=step if type(step) is int else -1,
                    call_id=ref,
                    call_index=0,
                    source_format=fmt,
                    ref=ref,
                    tokenizer=tokenizer,
                )
                rec["engine"]["api"] = "generate"
                rec["extra"] = {"import_error": err}
                recs = [rec]
            for rec in recs:
                out.write(dump(rec))
                stats["records"] += 1
    return stats
