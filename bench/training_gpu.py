"""Training-step audit with real CUDA bf16 kernels against fp32 (one short script, well inside 5 minutes on an H200).

    python bench/training_gpu.py                       # writes $OUT/training_audit_gpu.json (default bench/out)
    OUT=/tmp/x python bench/training_gpu.py --budget-s 200

Needs only torch + this repository (no Django). For each rollout numerics configuration it runs
:func:`workers.training.audit.audit` on ``cuda``: sampling under the rollout numerics (bf16 autocast / bf16 weights /
SDPA attention / a different batch composition), recompute in fp32 (TF32 off), exact full-vocabulary TV and KL per
token, the exact certificate next to the top-K-only certificate of the same data, and one optimiser step per loss.
The model is the package's seeded causal transformer at a larger size (no downloads). Configurations that do not
fit the time budget are skipped and listed; an exception in one configuration is recorded, not fatal.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from workers.training.audit import audit
from workers.jsonsafe import json_safe
from workers.training.model import ModelConfig

CONFIGS = (
    "fp32",
    "bf16_autocast",
    "bf16_weights",
    "bf16_autocast,sdpa",
    "bf16_autocast,extra_batch",
    "bf16_weights,sdpa,extra_batch",
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--d-model", dest="d_model", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--topk", type=int, default=20)
    ap.add_argument(
        "--budget-s",
        dest="budget_s",
        type=float,
        default=210.0,
        help="stop starting new configurations after this many seconds",
    )
    ap.add_argument(
        "--configs",
        default=",".join(c.replace(",", "+") for c in CONFIGS),
        help="rollout numerics, '+'-joined options, comma-separated",
    )
    args = ap.parse_args(argv)
    out_dir = os.environ.get("OUT") or "bench/out"
    os.makedirs(out_dir, exist_ok=True)
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("CUDA not available; running on CPU with a small model", file=sys.stderr)
        dev = "cpu"
        args.vocab, args.d_model, args.layers, args.batch, args.length, args.topk = 64, 64, 2, 8, 8, 8
    torch.backends.cuda.matmul.allow_tf32 = False  # trainer numerics = true fp32
    torch.backends.cudnn.allow_tf32 = False
    cfg = ModelConfig(
        vocab=args.vocab,
        d_model=args.d_model,
        n_layers=args.layers,
        n_heads=args.heads,
        max_len=args.length + 16,
        seed=0,
    )
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": dev,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if dev == "cuda" else None,
        "allow_tf32": False,
        "model": cfg.to_dict(),
        "batch": args.batch,
        "length": args.length,
        "topk": args.topk,
    }
    results, skipped, errors = {}, [], {}
    t0 = time.perf_counter()
    path = os.path.join(out_dir, "training_audit_gpu.json")
    for c in args.configs.split(","):
        numerics = c.replace("+", ",")
        if time.perf_counter() - t0 > args.budget_s:
            skipped.append(numerics)
            continue
        t = time.perf_counter()
        try:
            res = audit(
                device=dev,
                batch=args.batch,
                group=4,
                prompt_len=8,
                length=args.length,
                topk=args.topk,
                numerics=numerics,
                seed=0,
                cfg=cfg,
            )
            results[numerics] = res
            d = res["divergence"]
            print(
                f"{numerics:<32} TV mean {d['tv']['mean']:.3g} max {d['tv']['max']:.3g}  KL mean "
                f"{d['kl']['mean']:.3g} max {d['kl']['max']:.3g}  argmax flips {d['argmax_flip_share']:.3%}  "
                f"({time.perf_counter() - t:.0f}s)",
                flush=True,
            )
        except Exception as e:  # noqa: BLE001 - record and go on: one bad configuration must not lose the others
            errors[numerics] = "".join(traceback.format_exception(e))[-4000:]
            print(f"{numerics}: ERROR {e!r}", flush=True)
        with open(path, "w") as f:  # rewrite after each configuration so a timeout still leaves data
            json.dump(
                json_safe(
                    {
                        "schema": "training-audit-gpu/1",
                        "env": env,
                        "results": results,
                        "skipped": skipped,
                        "errors": errors,
                        "wall_s": time.perf_counter() - t0,
                    }
                ),
                f,
                indent=1,
            )
    print(f"wrote {path} ({time.perf_counter() - t0:.0f}s)")
    return 0 if results and not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
