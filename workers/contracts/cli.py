"""Command line (docs/contracts.md#api-and-command-line): ``python -m workers.contracts
{list,check,calibrate,incidents,grade}``.

``check`` prints the verdict (JSON with ``--json``) and exits 0 only on PASS; 3 on QUALITY_WARNING (it passes
but uses more than half its budget; ``--allow-quality-warning`` makes that 0), 1 on any other verdict, 2 on
usage errors (unknown contract, malformed implementation reference), 4 when the harness itself could not run
(the sandbox cannot be created here, docs/contracts.md "Isolation"): no verdict was measured."""

from __future__ import annotations

import argparse
import json


def _print(obj, as_json: bool, text: str):
    if as_json:
        from .verdict import signature_json  # inf/NaN deep inside signatures become strings/null, never invalid JSON

        print(json.dumps(signature_json(obj), indent=2, sort_keys=True, allow_nan=False))
    else:
        print(text)


def cmd_list(args) -> int:
    from .loader import load_suite

    contracts = load_suite(args.specs)
    rows = [
        {
            "id": c.id,
            "class": c.cls,
            "family": c.family,
            "version": c.version,
            "title": c.title,
            "signature": c.signature,
            "tolerance": {"level": c.level, "statistic": c.statistic, "bound": c.bound.text},
            "sha256": c.sha256,
        }
        for c in contracts
    ]
    text = "\n".join(
        f"{r['class']:9s} {r['version']:7s} {r['tolerance']['level']}  {r['id']:45s} {r['title']}" for r in rows
    )
    _print(rows, args.json, text)
    return 0


def cmd_check(args) -> int:
    from .runner import get_contract, run_contract
    from .sandbox import HarnessFailure, SandboxUnavailable

    try:
        contract = get_contract(args.contract, args.specs)
    except KeyError as exc:
        _print({"error": "unknown_contract", "message": str(exc.args[0])}, args.json, f"error: {exc.args[0]}")
        return 2
    if ":" not in args.impl:
        msg = f"--impl {args.impl!r} must be 'package.module:function' or '/path/file.py:function'"
        _print({"error": "bad_impl_reference", "message": msg}, args.json, f"error: {msg}")
        return 2
    try:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
        flags = json.loads(args.flags) if args.flags else None
        v = run_contract(
            contract,
            args.impl,
            device=args.device,
            seeds=seeds,
            flags=flags,
            time_limit_s=args.time_limit,
            trace_path=args.trace,
            declared_unit_roundoff=args.declare_unit_roundoff,
        )
    except (ValueError, TypeError) as exc:  # malformed --seeds / --flags
        _print({"error": "bad_arguments", "message": str(exc)}, args.json, f"error: {exc}")
        return 2
    except (HarnessFailure, SandboxUnavailable) as exc:
        _print({"error": "harness_failure", "message": str(exc)}, args.json, f"harness failure (no verdict): {exc}")
        return 4
    d = v.to_dict(include_trace=args.with_trace)
    text = (
        f"{v.verdict}  {contract.id} v{contract.version}  {contract.statistic}={d['statistic']}  bound={d['bound']}  "
        f"margin={d['margin']}\n  {v.reason}\n  signature: {json.dumps(d['signature'])}"
    )
    _print(d, args.json, text)
    if v.verdict == "PASS" or (v.verdict == "QUALITY_WARNING" and args.allow_quality_warning):
        return 0
    return 3 if v.verdict == "QUALITY_WARNING" else 1


def cmd_calibrate(args) -> int:
    from .calibration import calibrate_all, format_table

    contracts = list(args.contract or [])
    if args.declared:  # the declared-property contracts (specs/declared), by full id
        from .loader import load_declared

        contracts += [c.id for c in load_declared()]
    report = calibrate_all(contracts=contracts or None)
    _print(report, args.json, format_table(report))
    return 0 if report["ok"] else 1


def cmd_incidents(args) -> int:
    from .incidents import format_incidents, run_incidents

    report = run_incidents()
    _print(report, args.json, format_incidents(report))
    return 0 if all(i["reproduced"] for i in report["incidents"]) else 1


def cmd_grade(args) -> int:
    from .grading import grade

    with open(args.verdicts) as fh:
        verdicts = json.load(fh)
    deployment = json.loads(args.deployment_flags) if args.deployment_flags else None
    from .loader import load_suite

    g = grade(verdicts, deployment_flags=deployment, contracts=load_suite(args.specs))
    _print(g, args.json, json.dumps(g, indent=2))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workers.contracts", description="Kernel contract suite")
    p.add_argument("--specs", default=None, help="directory of contract files (default: the shipped suite)")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("list", help="list the contracts")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("check", help="run one contract against an implementation")
    s.add_argument("--contract", required=True, help="contract id or class, e.g. C-PRC-01")
    s.add_argument("--impl", required=True, help="package.module:function or /path/file.py:function")
    s.add_argument("--device", default="cpu")
    s.add_argument("--seeds", default=None, help="comma-separated explicit seeds (default: public + hidden)")
    s.add_argument("--flags", default=None, help="numeric environment as JSON, e.g. '{\"allow_tf32\": true}'")
    s.add_argument("--time-limit", type=float, default=None)
    s.add_argument("--trace", default=None, help="append the per-measurement trace (JSONL) to this file")
    s.add_argument("--with-trace", action="store_true", help="include the trace in the JSON output")
    s.add_argument(
        "--declare-unit-roundoff",
        default=None,
        help="open track: grade against a declared lower precision, e.g. '2**-8' (bounds scaled)",
    )
    s.add_argument(
        "--allow-quality-warning",
        action="store_true",
        help="exit 0 on QUALITY_WARNING too (default: exit 3, so CI sees a used-up budget)",
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_check)

    s = sub.add_parser("calibrate", help="three-state calibration of the suite")
    s.add_argument("--contract", action="append", help="limit to these ids/classes (repeatable)")
    s.add_argument("--declared", action="store_true", help="the declared-property contracts (specs/declared)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_calibrate)

    s = sub.add_parser(
        "incidents", help="reproduce the three incidents (docs/contract-language.md#incidents-each-class-explains)"
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_incidents)

    s = sub.add_parser("grade", help="grade a JSON list of verdicts (docs/contract-language.md#grades)")
    s.add_argument("verdicts")
    s.add_argument("--deployment-flags", default=None)
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=cmd_grade)

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except Exception as exc:  # a CLI prints an error, not a traceback
        from .loader import ContractError

        if isinstance(exc, ContractError):
            _print({"error": "contract_error", **exc.to_dict()}, getattr(args, "json", False), f"error: {exc}")
            return 2
        raise
