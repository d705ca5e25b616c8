"""The importers, one entry per stack (docs/fidelity.md#importers-upstream-read-fields-mapped-what-is-refused).

``IMPORTER_META`` is an import-free registry, the way ``workers.contracts.protocols.PROTOCOL_META`` declares the
contract classes: for each ``python -m workers.fidelity import <name>``, the stack, the upstream code its shapes were
written from, the field tables it converts through (``"module:ATTRIBUTE"``, resolved by :func:`tables_of`: tuples of
:class:`~workers.fidelity.importers.fields.Field` or provenance ladders of
:class:`~workers.fidelity.importers.fields.Rung`) and what it refuses or keeps unverifiable, and why. A new stack is a
new entry plus its tables; a new upstream field name is one more source in a table.

The importers table of docs/fidelity.md is :func:`docs_table` (``python -m workers.fidelity.importers.registry``
prints it; ``tests/docs/test_importers_table.py`` checks that the doc holds exactly that).
"""

from __future__ import annotations

import importlib

_M = "workers.fidelity.importers"

IMPORTER_META = {
    "vllm": {
        "stack": "vLLM OpenAI server",
        "upstream": "`vllm/entrypoints/openai` chat and completion serving, `GenerateRequest`/`GenerateResponseChoice` "
        "of the tokens-in/tokens-out endpoint (index, 2026-12)",
        "tables": (
            f"{_M}.vllm:CALL_FIELDS",
            f"{_M}.vllm:PROMPT_IDS",
            f"{_M}.vllm:RESPONSE_IDS",
            f"{_M}.vllm:SAMPLING_FIELDS",
        ),
        "named": "then, with a tokenizer, token strings one vocabulary id each (`engine_token_strings`), else the "
        "text encoded (`retokenized`); `logprobs.content` / `token_logprobs` and top-K, kept only when aligned with "
        "the ids; streamed chunks merged; `routed_experts`",
        "refused": "a log-prob entry whose token maps to another id than the response's (`token_id:N`, or one "
        "vocabulary entry with a tokenizer): every log-prob of the choice dropped (`logprobs_token_mismatch` names the "
        "positions); `echo`: the echoed prompt is cut by the engine's response ids, the prompt ids or "
        "`usage.prompt_tokens`, else the exchange is refused (a `missing` record naming echo); an echoed text that "
        "cannot be cut is dropped; an HTTP error body or a logged status ≥ 400 is a `missing` record, and a call "
        "with no tokens is never verifiable",
    },
    "sglang": {
        "stack": "SGLang `/generate`",
        "upstream": "`srt/managers/tokenizer_manager_components/output_processor.py` (incremental streaming), "
        "`io_struct.py` (`return_prompt_token_ids`, `routed_experts_start_len`) (index, 2026-12)",
        "tables": (
            f"{_M}.sglang:CALL_FIELDS",
            f"{_M}.sglang:PROMPT_IDS",
            f"{_M}.sglang:RESPONSE_FIELDS",
            f"{_M}.sglang:SAMPLING_FIELDS",
            f"{_M}.sglang:ROUTE_FIELDS",
        ),
        "named": "`meta_info.output_token_logprobs` / `output_top_logprobs`; a whole-prompt `input_token_logprobs` "
        "(`engine`); `meta_info.weight_versions` spans (per-token versions); streamed chunks merged (cumulative, or "
        "incremental: ids, text and log-probs concatenated)",
        "refused": "ids in the log-probs that disagree with `output_ids` (log-probs dropped); routed experts with a "
        "declared `routed_experts_start_len` ≠ 0 or a non-int32 `routed_experts_dtype` "
        "(`extra.routed_experts_unusable`, named)",
    },
    "agl": {
        "stack": "Agent Lightning spans",
        "upstream": "`agentlightning/adapter/triplet.py` @ d9c069d (LightningStore v0.2/v0.3 span dumps)",
        "tables": (
            f"{_M}.agl:PROMPT_IDS",
            f"{_M}.agl:RESPONSE_IDS",
            f"{_M}.agl:LOGPROB_CONTENT",
            f"{_M}.agl:SPAN_FIELDS",
        ),
        "named": "the role from the nearest enclosing "
        "agent matched by `--agent-match`; client/proxy duplicates merged by response id",
        "refused": "spans without ids; `logprobs.content` entries for another token than the sampled id "
        "(`logprobs_token_mismatch`: log-probs dropped); an LLM call under a reward span is `background`/`reward`, never the "
        "trained agent's",
    },
    "agl-events": {
        "stack": "Agent Lightning ≥ 1.0 events and triplets",
        "upstream": "`agentlightning/adapter/triplet.py` @ d9c069d and the adapter's `TokensTriplet` mixin (fork)",
        "tables": (
            f"{_M}.agl_events:EVENT_TRIPLET_FIELDS",
            f"{_M}.agl_events:TRIPLET_FIELDS",
            f"{_M}.agl_events:TOKENS_TRIPLET_FIELDS",
        ),
        "named": "full `model_request` events through the vLLM mapping; a rollout line with its `triplets` (the "
        "rollout's version fills a triplet that names none)",
        "refused": "failed calls (`error`, `http_status` ≥ 400) are `missing` records; a triplet's "
        "`logprobs.content` entry for another token than the sampled id drops its log-probs "
        "(`logprobs_token_mismatch`); `reward` and other events "
        "are not calls (counted in `events_skipped`)",
    },
    "verl": {
        "stack": "verl",
        "upstream": "`recipe/fully_async_policy/agent_loop/partial_single_turn_agent_loop.py` "
        "(volcengine/verl @ 0da6fc8); DataProto rows: `verl/experimental/agent_loop/agent_loop.py` `_postprocess`, "
        "`verl/trainer/ppo/ray_trainer.py` and `rollout_corr_helper.py` `apply_bypass_mode` (volcengine/verl @ b178a3c)",
        "tables": (f"{_M}.trajectories:VERL_FIELDS", f"{_M}.trajectories:VERL_DATAPROTO_FIELDS"),
        "named": "`param_version_start`/`_end`, else `min_global_steps`/`max_global_steps` → one version or "
        "per-token versions; a DataProto row (`prompts`/`responses`/`attention_mask`): padding located by "
        "`attention_mask` (never by the pad id), `response_mask`, `rollout_log_probs` and `old_log_probs` cut to the "
        "real response, both sides at once (a `trainer` block, `loss_mask_used` 1 on each call); step from "
        "`global_steps`",
        "refused": "a sample resumed across weight updates (start ≠ end, or only one of them known): every "
        "token's version unknown "
        "(`token_policy_versions` null → `MIXED_POLICY_VERSION`), never the end version; no `response_mask` (which "
        "tokens a tool inserted is unknown): `missing` record; `--ids-from text`; DataProto rows whose lengths "
        "disagree (`attention_mask` ≠ prompts + responses, `response_mask` ≠ responses or 1 on padding, a log-prob "
        "list shorter than the real response or longer than the padded one, `input_ids` ≠ prompts + responses, "
        "padding with holes): `missing` record naming the lengths; `old_log_probs` equal to `rollout_log_probs` on "
        "every model token (bypass mode copies them): no `trainer` block (`extra.old_log_probs: rollout_copy`)",
    },
    "slime": {
        "stack": "slime",
        "upstream": "`slime/utils/types.py` (THUDM/slime @ 7985bf2), the SGLang rollout's "
        "`weight_versions.append`, per-call `{version, abs_start, abs_end}` spans (fork)",
        "tables": (f"{_M}.trajectories:SLIME_FIELDS",),
        "named": "`weight_versions` one per engine call (one version: the sample's; several: each token unknown) "
        "or spans (each token its own version)",
        "refused": "a torch dump (zip or pickle, `--save-debug-rollout-data`) is refused naming the format, never "
        "unpickled; `--ids-from text`",
    },
    "skyrl": {
        "stack": "SkyRL",
        "upstream": "`skyrl-train/skyrl_train/generators/skyrl_gym_generator.py` @ 63bda56",
        "tables": (f"{_M}.trajectories:SKYRL_FIELDS", f"{_M}.trajectories:SKYRL_BATCH_COLUMNS"),
        "named": "a `GeneratorOutput` batch is its columns renamed onto the one-trajectory table",
        "refused": "the appended EOS (last token logged 0.0, stop reason not `length`, or `appended_eos_token`): "
        "`logprob_unverified` placeholder; a `postprocessed_action` (per trajectory or in `env_metrics`): ids "
        "`retokenized`, log-probs `reencoded`; `rollout_logprobs: null`: `retokenized`; no loss mask (which tokens the "
        "environment inserted is unknown): `missing` record",
    },
    "nemo-rl": {
        "stack": "NeMo RL",
        "upstream": '`nemo_rl/algorithms/grpo.py` `log_batched_dict_as_jsonl(…, "train_data_step{N}.jsonl")` '
        "(NVIDIA-NeMo/RL @ ddbdb1e)",
        "tables": (f"{_M}.trajectories:NEMO_RL_FIELDS",),
        "named": "both sides from one record (rollout and `trainer` blocks); step from the file name",
        "refused": "an exact 0.0 generation log-prob on a model token (NeMo RL's stand-in where the engine "
        "reported nothing): `logprob_unverified` not_reported; a dump without token ids or with short arrays: "
        "`missing` record",
    },
}


def tables_of(name: str) -> dict:
    """``{"module:ATTRIBUTE": table}`` of importer ``name`` (imports its module)."""
    out = {}
    for ref in IMPORTER_META[name]["tables"]:
        module, attr = ref.split(":")
        out[ref] = getattr(importlib.import_module(module), attr)
    return out


def _describe(row) -> str:
    if hasattr(row, "describe"):
        return row.describe()
    return str(row)


def _same_name(row) -> str | None:
    """The block (``sampling``) of a row that copies one source of the same name into it, else None."""
    src = getattr(row, "sources", ())
    if len(src) != 1 or row.note or row.pick != "set":
        return None
    block, _, name = row.target.rpartition(".")
    return block if block in ("sampling", "extra") and src[0].rpartition(".")[2] == name else None


def _describe_table(table) -> list[str]:
    if isinstance(table, dict):  # a column rename (SkyRL batch → one trajectory)
        return [f"`{src}` → `{dst}`" for src, dst in table.items() if src != dst]
    out, same = [], {}
    for row in table:
        block = _same_name(row)
        if block is None:
            out.append(_describe(row))
        else:
            if block not in same:
                same[block] = []
                out.append(block)  # placeholder, filled below in table order
            same[block].append(row.sources[0])
    return [f"{' / '.join(f'`{s}`' for s in same[r])} → `{r}.*` (same names)" if r in same else r for r in out]


def fields_mapped(name: str) -> str:
    """The docs table's "fields mapped" cell: every table row of the importer, then what named transforms add."""
    rows = [r for t in tables_of(name).values() for r in _describe_table(t)]
    return "; ".join(rows + [IMPORTER_META[name]["named"]])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def docs_table() -> str:
    """The importers table of docs/fidelity.md: stack, upstream read, fields mapped, refused and why."""
    lines = [
        "| stack (`import …`) | upstream read | fields mapped (source → fcr/1) | refused or unverifiable, and why |",
        "|---|---|---|---|",
    ]
    for name, meta in IMPORTER_META.items():
        cells = (f"{meta['stack']} (`{name}`)", meta["upstream"], fields_mapped(name), meta["refused"])
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(docs_table(), end="")
