"""``python -m workers.verify CERT.json [--file PATH ...] [--keys KEYS.json] [--since CHECKPOINT.json] …``

Checks a certificate bundle offline (no portal, no Django) against a key set *you* trust: the signature, the
in-toto statement, the subject digests against local files, the checkpoint's signature, the inclusion proof
against it and, with a pinned earlier checkpoint, that the log only grew since. Prints one line per check (or JSON
with ``--json``). Exit status: 0 VERIFIED; 1 a check failed; 2 an input cannot be read; 3 UNPINNED — the bundle
verifies only with the key set it carries itself (pin the portal's key set with --keys, AUDIT_VERIFY_KEYS or
--pin-keys).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys

from workers.verify import trust
from workers.verify.bundle import FAILED, NOT_VERIFIED, UNPINNED_VERDICT, verify_bundle

MARK = {"ok": "PASS", "failed": "FAIL", "skipped": "SKIP", "unpinned": "WARN"}
EXIT = {"VERIFIED": 0, NOT_VERIFIED: 1, UNPINNED_VERDICT: 3}


def _load(path: str, what: str):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {what} {path}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _pin_keys(path: str) -> int:
    try:
        added, total, where = trust.pin_keys(_load(path, "key set"))
    except trust.TrustError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"pinned {len(added)} new key(s) in {where} ({total} in all): {', '.join(added) or 'none new'}")
    return 0


def _size(envelope) -> int:
    """The tree size of a checkpoint envelope that has already been verified."""
    return json.loads(base64.b64decode(envelope["payload"]))["tree_size"]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["witness"]:  # python -m workers.verify witness …: the independent witness (witness.py)
        from workers.verify import witness

        return witness.main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m workers.verify", description=__doc__.split("\n\n")[1])
    p.add_argument("bundle", nargs="?", metavar="CERT.json", help="certificate bundle downloaded from the portal")
    p.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="an audited file; its SHA-256 must be a subject digest (repeatable)",
    )
    p.add_argument(
        "--keys",
        metavar="KEYS.json",
        help=f"the key set to trust (default: ${trust.ENV_KEYS}, else the pinned "
        f"~/.config/audit-portal/{trust.KEYS_FILE})",
    )
    p.add_argument(
        "--pin-keys",
        metavar="KEYS.json",
        help="add this key set (e.g. the portal's /.well-known/audit-portal-keys.json) to the pinned keys "
        "and exit; keys pinned earlier stay",
    )
    p.add_argument(
        "--log-checkpoint",
        metavar="CHECKPOINT.json",
        help="a checkpoint to verify inclusion against instead of the bundle's",
    )
    p.add_argument(
        "--since",
        metavar="CHECKPOINT.json",
        help=f"an earlier checkpoint the log must extend (default: ${trust.ENV_CHECKPOINT}, else the "
        f"pinned ~/.config/audit-portal/{trust.CHECKPOINT_FILE})",
    )
    p.add_argument(
        "--consistency",
        metavar="PROOF.json",
        help="the consistency proof from /api/v1/log/consistency/ (default: the bundle's)",
    )
    p.add_argument(
        "--save-checkpoint",
        action="store_true",
        help="when VERIFIED, pin the bundle's checkpoint as the one later runs check the log extends",
    )
    p.add_argument(
        "--witness",
        action="append",
        default=[],
        metavar="KEY",
        help="a witness's verifier key (name+hash+base64, cosignature/v1) you trust (repeatable)",
    )
    p.add_argument(
        "--min-witnesses",
        type=int,
        default=0,
        metavar="K",
        help="require cosignatures of the bundle's checkpoint by at least K of the --witness keys",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    if args.pin_keys:
        return _pin_keys(args.pin_keys)
    if not args.bundle:
        p.error("a CERT.json bundle (or --pin-keys KEYS.json) is required")
    bundle = _load(args.bundle, "certificate")
    ckpt = _load(args.log_checkpoint, "checkpoint") if args.log_checkpoint else None
    proof = _load(args.consistency, "consistency proof") if args.consistency else None
    try:
        keys = trust.trusted_keys(args.keys)
        since = trust.pinned_checkpoint(args.since)
    except trust.TrustError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in args.file:
        try:
            open(path, "rb").close()
        except OSError as exc:
            print(f"error: cannot read file {path}: {exc}", file=sys.stderr)
            return 2
    report = verify_bundle(
        bundle,
        files=args.file,
        checkpoint=ckpt,
        keys=keys.data if keys else None,
        keys_source=keys.source if keys else "",
        since=since.data if since else None,
        consistency=proof,
        witnesses=args.witness,
        min_witnesses=args.min_witnesses,
    )
    verdict = report.verdict
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        for c in report.checks:
            print(f"{MARK[c.state]}  {c.name:<11} {c.message}")
        print(
            verdict
            if not report.failed
            else "NOT VERIFIED: failed check(s): " + ", ".join(c.name for c in report.failed)
        )
    for c in report.checks:
        if c.state == FAILED:
            print(f"verification failed: {c.name}: {c.message}", file=sys.stderr)
        elif c.state == "unpinned":
            print(f"not verified against a key set you trust: {c.message}", file=sys.stderr)
    if verdict == "VERIFIED" and args.save_checkpoint:
        checkpoint = ckpt if ckpt is not None else bundle.get("checkpoint")
        if since is not None and _size(since.data) > _size(checkpoint):
            print(
                f"kept the pinned checkpoint of tree size {_size(since.data)} (newer than this bundle's)",
                file=sys.stderr,
            )
        else:
            print(f"pinned the checkpoint in {trust.save_checkpoint(checkpoint)}", file=sys.stderr)
    return EXIT[verdict]


if __name__ == "__main__":
    raise SystemExit(main())
