"""``python -m workers.routing audit RUN [--json] [--min-flipped-layers N] [--threshold X] [--require-replay]``

Routing audit of an fcr/1 run log (JSONL, gzip or fcr-parquet/1): flip rates, coverage, the R3 replay verdict and the
attribution split (docs/routing.md). Exit status: 0 ok; 1 the replay verdict is FAIL (with ``--require-replay`` also
UNVERIFIABLE or NOT_DECLARED); 2 a record cannot be read (line, call, field and reason on stderr).
"""

from __future__ import annotations

import argparse
import sys

import orjson

from workers.routing.file import DEFAULT_THRESHOLD, RoutingFileError, audit_file

EXIT_OK, EXIT_REPLAY, EXIT_DATA = 0, 1, 2


def _fmt(x, spec=".4g"):
    return "n/a" if x is None else format(x, spec)


def human(r: dict) -> str:
    v = r["replay"]
    att = r["attribution"]
    lines = [
        f"calls {r['calls']} (with routes {r['calls_with_routes']})  layers {r['layers']}  top_k {r['top_k']}  "
        f"tokens {r['tokens']}",
        f"flip rate {_fmt(r['flip_rate'])}  tokens with a flip {_fmt(r['token_flip_share'])}  coverage: pairs "
        f"{_fmt(r['coverage']['pairs'])} tokens {_fmt(r['coverage']['tokens'])}",
        "per layer: " + " ".join(f"{row['layer']}:{_fmt(row['flip_rate'], '.3g')}" for row in r["per_layer"]),
        f"replay {v['state']}: {v['reason']}",
    ]
    for c in v["failed"][:10]:
        lines.append(
            f"  FAIL call {c['call_id']}: {c['pairs_flipped']} flipped pair(s) at layer(s) "
            f"{', '.join(map(str, c['layers_flipped']))}"
        )
    for g in ("agree", "flipped", "unverifiable"):
        a = att[g]
        lines.append(
            f"{g:>12}: tokens {a['tokens']}  eps_hat {_fmt(a.get('eps_hat'))}  mean |dlogp| "
            f"{_fmt(a.get('abs_dlogp', {}).get('mean'))}  acceptance "
            f"{_fmt(a.get('acceptance', {}).get('rate'), '.1%')}"
        )
    lines.append(
        f"flipped tokens carry {_fmt(att['flipped_share']['tv_hi'], '.1%')} of sum tv_hi, "
        f"{_fmt(att['flipped_share']['abs_dlogp'], '.1%')} of sum |dlogp|"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workers.routing", description="Routing audit of an MoE run log.")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("audit")
    a.add_argument("path")
    a.add_argument("--json", action="store_true")
    a.add_argument("--min-flipped-layers", type=int, default=2)
    a.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="per-token TV threshold (acceptance)")
    a.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16", "fp64", "exact"])
    a.add_argument("--require-replay", action="store_true", help="exit 1 unless the R3 replay verdict is PASS")
    args = p.parse_args(argv)
    try:
        r = audit_file(
            args.path, min_flipped_layers=args.min_flipped_layers, threshold=args.threshold, precision=args.precision
        )
    except (RoutingFileError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_DATA
    sys.stdout.write(orjson.dumps(r, option=orjson.OPT_INDENT_2).decode() + "\n" if args.json else human(r) + "\n")
    state = r["replay"]["state"]
    if state == "FAIL" or (args.require_replay and state != "PASS"):
        return EXIT_REPLAY
    return EXIT_OK
