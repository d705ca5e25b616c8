"""``python -m workers.training audit|tightness`` (no Django)."""

from __future__ import annotations

import argparse
import json
import sys

from workers.jsonsafe import json_safe


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workers.training")
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("audit", help="training-step audit: rollout vs trainer numerics, exact vs top-K certificates")
    a.add_argument("--device", default="cpu")
    a.add_argument("--json", action="store_true", help="print the full JSON result")
    a.add_argument("--batch", type=int, default=16)
    a.add_argument("--length", type=int, default=16)
    a.add_argument("--topk", type=int, default=8)
    a.add_argument(
        "--numerics",
        default="bf16_autocast",
        help="rollout numerics: bf16_autocast | bf16_weights | fp32 (+ ',sdpa', ',incremental')",
    )
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--losses", default=None, help="comma-separated subset of the audited losses (default: all)")
    a.add_argument("--out", default=None, help="also write the JSON to this file")
    t = sub.add_parser("tightness", help="exact bound tightness by enumeration")
    t.add_argument("--V", type=int, default=6)
    t.add_argument("--T", type=int, default=6)
    t.add_argument("--reward", default="adversarial", choices=["random", "count", "adversarial"])
    t.add_argument("--out", default="bench/out", help="folder for tightness.json / .html")
    t.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "audit":
        from workers.training.audit import audit

        res = audit(
            device=args.device,
            batch=args.batch,
            length=args.length,
            topk=args.topk,
            numerics=args.numerics,
            seed=args.seed,
            losses=args.losses.split(",") if args.losses else None,
        )
        text = json.dumps(json_safe(res), indent=1)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        if args.json:
            print(text)
        else:
            from workers.training.audit import summary_lines

            print("\n".join(summary_lines(res)))
        return 0
    from workers.training.tightness import run

    res = run(args.out, V=args.V, T=args.T, reward=args.reward)
    if args.json:
        print(json.dumps(json_safe({c: {k: v for k, v in r.items()} for c, r in res.items()}), indent=1))
    else:
        for c, r in res.items():
            print(f"constants={c}: all bounds hold: {r['all_hold']}")
            for row in r["rows"]:
                print(
                    f"  {row['kind']:>10} size={row['size']:<8.3g} eps={row['eps']:.3g} |err|={row['abs_error']:.3g} "
                    f"B*={row['bounds']['best']:.3g} ({row['argmin']}) B*/|err|={row['ratio']['best']:.3g}"
                )
        print(f"wrote {args.out}/tightness.json, tightness.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
