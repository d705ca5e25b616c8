"""``python -m workers.verify CERT.json [--file PATH ...] [--log-checkpoint CHECKPOINT.json] [--keys KEYS.json]``

Checks a certificate bundle offline (no portal, no Django): the signature, the in-toto statement, the subject
digests against local files, the checkpoint's signature and the inclusion proof against it. Prints one line per
check (or JSON with ``--json``) and exits 0 when no check failed, 1 when one did (the message names it), 2 when an
input cannot be read.
"""
from __future__ import annotations

import argparse
import json
import sys

from workers.verify.bundle import FAILED, verify_bundle

MARK = {"ok": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def _load(path: str, what: str):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {what} {path}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m workers.verify", description=__doc__.split("\n\n")[1])
    p.add_argument("bundle", metavar="CERT.json", help="certificate bundle downloaded from the portal")
    p.add_argument("--file", action="append", default=[], metavar="PATH",
                   help="an audited file; its SHA-256 must be a subject digest (repeatable)")
    p.add_argument("--log-checkpoint", metavar="CHECKPOINT.json", help="a checkpoint to verify inclusion against")
    p.add_argument("--keys", metavar="KEYS.json", help="a key set to trust instead of the bundle's own")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    bundle = _load(args.bundle, "certificate")
    ckpt = _load(args.log_checkpoint, "checkpoint") if args.log_checkpoint else None
    keys = _load(args.keys, "key set") if args.keys else None
    for path in args.file:
        try:
            open(path, "rb").close()
        except OSError as exc:
            print(f"error: cannot read file {path}: {exc}", file=sys.stderr)
            return 2
    report = verify_bundle(bundle, files=args.file, checkpoint=ckpt, keys=keys)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        for c in report.checks:
            print(f"{MARK[c.state]}  {c.name:<10} {c.message}")
        print("VERIFIED" if report.ok else "NOT VERIFIED: failed check(s): " + ", ".join(c.name for c in report.failed))
    if report.ok:
        return 0
    for c in report.checks:
        if c.state == FAILED:
            print(f"verification failed: {c.name}: {c.message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
