"""``python -m workers.fidelity`` — audit and import commands (docs/fidelity-rules.md, docs/fidelity.md#cli).

    python -m workers.fidelity audit RUN.jsonl [--mode merged] [--tokenizer tokenizer.json] [--toy-vocab VOCAB.json]
                                    [--masks-out PATH [--masks-format jsonl|bin]] [--tau-align X]
                                    [--max-staleness N] [--allow-inferred-roles] [--require-certificate]
                                    [--require-loss-mask] [--json]
    python -m workers.fidelity import vllm|sglang|agl|agl-events|verl|slime|skyrl|nemo-rl IN OUT [--run-id ID] [--step N]
                                    [--tokenizer tokenizer.json] [--agent-match REGEX] [--logprobs-mode MODE]
                                    [--generation-config-source SRC] [--role policy|background] [--engine E]
                                    [--ids-from engine|text] [--run-config JSON|@FILE] [--tag T ...]
    python -m workers.fidelity join INFERENCE.jsonl TRAINER.(jsonl|parquet) OUT.jsonl [--allow-untrained]

``audit`` exits 1 when the verdict is FAIL, 2 on usage or input errors (missing file), 0 on PASS. ``join`` exits 2
when the join is refused (each problem named on stderr; nothing written).
"""

from __future__ import annotations

import argparse
import json
import sys

import orjson


# the stacks of workers/fidelity/importers/registry.py (tests/docs/test_importers_table.py keeps them equal)
IMPORT_KINDS = ["vllm", "sglang", "agl", "agl-events", "verl", "slime", "skyrl", "nemo-rl"]


def _parser():
    p = argparse.ArgumentParser(prog="python -m workers.fidelity", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("audit", help="audit an fcr/1 file (exit 1 if the closed-failure audit fails)")
    a.add_argument("path")
    a.add_argument("--mode", choices=["transition", "merged"], default="transition")
    a.add_argument("--tokenizer", action="append", default=[], help="tokenizer.json to register (repeatable)")
    a.add_argument(
        "--toy-vocab",
        action="append",
        default=[],
        help="id→string vocabulary JSON of a toy tokenizer (docs/fcr.md#toy-tokenizer)",
    )
    a.add_argument("--masks-out")
    a.add_argument("--masks-format", choices=["jsonl", "bin"], default="jsonl")
    a.add_argument("--tau-align", type=float, default=1.0)
    a.add_argument("--max-staleness", type=int)
    a.add_argument("--delta", type=float, default=0.15)
    a.add_argument("--allow-inferred-roles", action="store_true")
    a.add_argument("--require-certificate", action="store_true")
    a.add_argument("--require-loss-mask", action="store_true")
    a.add_argument("--no-certificates", action="store_true")
    a.add_argument("--max-calls", type=int, help="cap calls[] in the report (coverage still sees every call)")
    a.add_argument(
        "--min-coverage",
        type=_fraction,
        metavar="F",
        help="FAIL unless at least this fraction (0..1, or a percentage like 90%%) of policy tokens is "
        "verifiable (a CI gate; without it the verdict is the closed-failure check only)",
    )
    a.add_argument("--json", action="store_true", help="print the full JSON report")
    i = sub.add_parser("import", help="convert vLLM / Agent Lightning logs to fcr/1")
    i.add_argument("kind", choices=IMPORT_KINDS)
    i.add_argument("src")
    i.add_argument("dst")
    i.add_argument("--run-id")
    i.add_argument("--step", type=int)
    i.add_argument("--tokenizer")
    i.add_argument("--toy-vocab")
    i.add_argument("--agent-match")
    i.add_argument("--logprobs-mode")
    i.add_argument("--generation-config-source", default="unknown", choices=["request_only", "hf_defaults", "unknown"])
    i.add_argument("--chat-template-sha256")
    i.add_argument(
        "--engine",
        help="the inference engine behind the log (engine.name): verl/slime/skyrl rollouts, "
        "or an OpenAI-compatible log served by something other than vLLM (vllm importer)",
    )
    i.add_argument(
        "--ids-from",
        choices=["engine", "text"],
        default="engine",
        help="verl/slime/skyrl: 'text' when the rollout rebuilt ids from text offline (never verifiable)",
    )
    i.add_argument(
        "--role",
        choices=["policy", "background"],
        help="declare the role of every call whose log does not (role_source 'config'), e.g. a gateway "
        "that serves only the trained agent",
    )
    i.add_argument("--moe-layers", type=int, help="sglang: MoE layer count, to reshape meta_info.routed_experts")
    i.add_argument(
        "--run-config",
        help="the run's parameters, a JSON object or @file holding one: written on every record as run_config "
        "(docs/fcr.md#run-parameters), so the portal shows them on the run",
    )
    i.add_argument("--tag", action="append", default=[], help="a tag of the run, written as run_tags (repeatable)")
    i.add_argument("--json", action="store_true")
    j = sub.add_parser(
        "join",
        help="attach the trainer side (log-probs, loss masks, sample ids, task hashes) to an imported inference log",
    )
    j.add_argument("inference", help="fcr/1 JSONL from an importer or the gateway")
    j.add_argument("trainer", help="trainer side: JSONL (fcr-trainer/1 rows) or Parquet with the same columns")
    j.add_argument("out")
    j.add_argument(
        "--allow-untrained",
        action="store_true",
        help="keep policy calls that have no trainer row (the audit excludes them) instead of refusing",
    )
    j.add_argument("--json", action="store_true")
    g = sub.add_parser("gateway", help="negotiated-protocol proxy (docs/fcr.md#negotiated-protocol)")
    g.add_argument("--upstream", required=True)
    g.add_argument("--host", default="127.0.0.1")
    g.add_argument("--port", type=int, default=8089)
    g.add_argument("--log", required=True, help="fcr/1 output file (appended)")
    g.add_argument("--undeclared", choices=["reject", "route_frozen"], default="reject")
    g.add_argument("--frozen-upstream")
    g.add_argument("--run-id", default="run")
    g.add_argument("--step", type=int, default=0)
    g.add_argument("--top-logprobs", type=int, default=5)
    g.add_argument("--tokenizer")
    g.add_argument(
        "--logprobs-mode",
        choices=["raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits"],
        help="the upstream server's declared --logprobs-mode",
    )
    g.add_argument("--generation-config-source", default="unknown", choices=["request_only", "hf_defaults", "unknown"])
    return p


def _tokenizers(paths, toy_vocabs):
    from workers.fidelity.tokenizer import FidelityTokenizer

    toks = [FidelityTokenizer.from_file(p) for p in paths]
    for v in toy_vocabs:
        toks.append(FidelityTokenizer.toy(json.load(open(v, encoding="utf-8"))))
    return toks


def _fraction(text: str) -> float:
    """``0.9`` or ``90%`` → 0.9 (argparse type for ``--min-coverage``)."""
    from workers.fidelity.verdict import check_min_coverage

    t = text.strip()
    try:
        value = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
        return check_min_coverage(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            str(exc) if "min_coverage" in str(exc) else f"expected a fraction or a percentage, got {text!r}"
        ) from None


def human(rep: dict) -> str:
    cov = rep["coverage"]
    gate = rep.get("min_coverage")
    lines = [
        rep["headline"],
        f"fidelity audit ({rep['mode']}): {rep['verdict_label']}"
        + (f"  [closed failure{' + coverage ≥ ' + format(gate, '.0%') if gate is not None else ' only'}]"),
        f"  calls: {cov['calls']['total']}  closed-failure violations: {rep['closed_failure_violations']}",
    ]
    for r in rep["verdict_reasons"]:
        lines.append(f"  FAIL: {r}")
    excl = cov["excluded_policy_tokens_by_primary_reason"]
    if excl:
        lines.append("  excluded policy tokens by primary reason: " + ", ".join(f"{k}={v}" for k, v in excl.items()))
    for w in rep["protocol_warnings"]:
        lines.append(f"  warning: {w}")
    if rep["loss_mask"]["export"]:
        e = rep["loss_mask"]["export"]
        lines.append(f"  loss masks: {e['path']} ({e['format']}, {e['calls']} calls, {e['tokens_on']} tokens on)")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "audit":
        from workers.fidelity.audit import audit_file

        try:
            toks = _tokenizers(args.tokenizer, args.toy_vocab)
            rep = audit_file(
                args.path,
                mode=args.mode,
                tokenizer=toks,
                masks_out=args.masks_out,
                masks_format=args.masks_format,
                tau_align=args.tau_align,
                max_staleness=args.max_staleness,
                delta=args.delta,
                allow_inferred_roles=args.allow_inferred_roles,
                require_certificate=args.require_certificate,
                require_loss_mask=args.require_loss_mask,
                certificates=not args.no_certificates,
                max_calls_in_report=args.max_calls,
                min_coverage=args.min_coverage,
            )
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.json:
            sys.stdout.buffer.write(orjson.dumps(rep, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
        else:
            print(human(rep))
        return 0 if rep["verdict"] == "PASS" else 1
    if args.cmd == "import":
        from workers.fcr import run_params
        from workers.fidelity.importers import import_agl, import_agl_events, import_vllm

        toks = _tokenizers([args.tokenizer] if args.tokenizer else [], [args.toy_vocab] if args.toy_vocab else [])
        tok = toks[0] if toks else None
        common = dict(
            run_id=args.run_id,
            tokenizer=tok,
            logprobs_mode=args.logprobs_mode,
            generation_config_source=args.generation_config_source,
            chat_template_sha256=args.chat_template_sha256,
            role=args.role,
        )
        try:
            declared = run_params.parse_declared(args.run_config, args.tag)  # refused before anything is written
            if args.kind == "vllm":
                stats = import_vllm(args.src, args.dst, step=args.step, engine=args.engine, **common)
            elif args.kind == "sglang":
                from workers.fidelity.importers.sglang import import_sglang

                stats = import_sglang(args.src, args.dst, step=args.step, moe_layers=args.moe_layers, **common)
            elif args.kind in ("verl", "slime", "skyrl", "nemo-rl"):
                from workers.fidelity.importers.trajectories import import_trajectories

                stats = import_trajectories(
                    args.src,
                    args.dst,
                    fmt=args.kind,
                    step=args.step,
                    engine=args.engine,
                    ids_from=args.ids_from,
                    **common,
                )
            elif args.kind == "agl-events":
                stats = import_agl_events(args.src, args.dst, step=args.step, agent_match=args.agent_match, **common)
            else:
                stats = import_agl(
                    args.src,
                    args.dst,
                    agent_match=args.agent_match,
                    steps={} if args.step is None else _AllSteps(args.step),
                    **common,
                )
            run_params.stamp_file(args.dst, declared)
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(
            json.dumps(stats)
            if args.json
            else f"imported {stats['records']} record(s) from {args.src} to {args.dst} ({stats})"
        )
        return 0
    if args.cmd == "join":
        from workers.fidelity.join import JoinError, join

        try:
            stats = join(args.inference, args.trainer, args.out, allow_untrained=args.allow_untrained)
        except (OSError, JoinError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(
            json.dumps(stats)
            if args.json
            else f"joined {stats['joined']} of {stats['records']} record(s) into {args.out} ({stats})"
        )
        return 0
    if args.cmd == "gateway":
        from workers.fidelity.gateway import serve

        return serve(args)
    return 2


class _AllSteps(dict):
    """A rollout→step map that answers one step for every rollout (``--step`` on the AGL importer)."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def get(self, key, default=None):
        return self.step
