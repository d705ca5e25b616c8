"""``python -m workers.certify RUN.jsonl [--json] [--threshold X] [--budget E] [--mode tv|kl|k2max|k3mean]
[--precision fp32|bf16|fp16|fp64|exact] [--eta η] [--constants paper|tight] [--reward-range R] [--no-caps]``

Prints a human summary (or the full certificate with ``--json``). Exit status: 0 ok; 1 some record is DATA_ERROR
(or the file cannot be read); 2 a requested ``--threshold`` fails (some certified token TV upper end — KL in kl
mode — exceeds it) or a requested ``--budget`` is exceeded by the best bound at the run's measured values.
"""

from __future__ import annotations

import argparse
import sys

import orjson

from workers.certify.verdict import run_verdict

EXIT_OK, EXIT_DATA_ERROR, EXIT_THRESHOLD = 0, 1, 2


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m workers.certify", description="Divergence certificate of an fcr/1 run log."
    )
    p.add_argument("path", help="fcr/1 JSONL file (plain or gzip)")
    p.add_argument("--json", action="store_true", help="print the full certificate as JSON")
    p.add_argument("--threshold", type=float, help="per-token threshold (TV eps in tv mode, KL delta in kl mode)")
    p.add_argument("--budget", type=float, help="surrogate-error budget E (derives the threshold if none is given)")
    p.add_argument("--mode", default="tv", choices=["tv", "kl", "k2max", "k3mean"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16", "fp64", "exact"])
    p.add_argument("--eta", type=float, help="explicit log-space error bound per logged value (overrides --precision)")
    p.add_argument("--constants", default="paper", choices=["paper", "tight"])
    p.add_argument("--reward-range", type=float, default=1.0)
    p.add_argument("--avg-threshold", type=float, help="TRM average criterion (mean per-token bound)")
    p.add_argument("--no-caps", action="store_true", help="top-K lists are arbitrary subsets (no caps)")
    p.add_argument("--chunk-tokens", type=int, default=1 << 16)
    return p


def _fmt(x, spec=".4g"):
    return "n/a" if x is None else format(x, spec)


def human(cert: dict) -> str:
    s = cert["summary"]
    b = cert["bounds"]
    verdict = run_verdict(s, b, cert.get("options"))
    lines = [
        f"verdict: {verdict.label}. {verdict.sentence}",
        f"records {s['records']}  policy {s['policy_records']}  sequences {s['sequences']} "
        f"(certified {s['sequences_certified']})  tokens {s['tokens']}",
        f"threshold {s['threshold']:.4g} ({s['threshold_source']}, mode {cert['options']['mode']})  "
        f"acceptance {_fmt(s['acceptance_rate'], '.1%')}",
        "sequences: " + "  ".join(f"{k} {v}" for k, v in s["status_counts"]["sequences"].items()),
        "tokens:    " + "  ".join(f"{k} {v}" for k, v in s["status_counts"]["tokens"].items()),
        f"eps_hat {_fmt(s['eps_hat'])}  delta_hat {_fmt(s['delta_hat'])} (n/a = unbounded)  T_ref {s['T_ref']}  "
        f"mean A(y) {_fmt(s['mean_A_y'])}",
    ]
    if b:
        lines.append(
            f"B* = {_fmt(b.get('best'))} ({b.get('argmin')}); "
            + ", ".join(f"{k} {_fmt(v)}" for k, v in b.items() if k not in ("best", "argmin"))
        )
    if cert.get("budget"):
        bu = cert["budget"]
        lines.append(f"budget {bu['budget']:.4g}: within budget = {bu['within_budget']}")
    for e in cert["errors"][:10]:
        lines.append(f"DATA_ERROR line {e['line']} call {e['call_id']}: {e['reason']}")
    if s["data_errors"] > 10:
        lines.append(f"... {s['data_errors'] - 10} more data errors")
    lines += ["caveat: " + c for c in cert["caveats"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from workers.certify.file import certify_file

    try:
        cert = certify_file(
            args.path,
            threshold=args.threshold,
            budget=args.budget,
            mode=args.mode,
            precision=args.precision,
            eta=args.eta,
            constants=args.constants,
            reward_range=args.reward_range,
            avg_threshold=args.avg_threshold,
            caps=not args.no_caps,
            chunk_tokens=args.chunk_tokens,
        )
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_DATA_ERROR
    if args.json:
        sys.stdout.write(orjson.dumps(cert, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(human(cert))
    s = cert["summary"]
    if s["data_errors"]:
        return EXIT_DATA_ERROR
    if args.threshold is not None and not s["threshold_passed"]:
        return EXIT_THRESHOLD
    if args.budget is not None and not (cert["budget"] and cert["budget"]["within_budget"]):
        return EXIT_THRESHOLD
    return EXIT_OK
