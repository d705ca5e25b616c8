"""``audit-portal upload FILE`` / ``audit-portal status UPLOAD_ID`` / ``audit-portal sync SPOOL``: for CI.

``sync SPOOL`` uploads what a run's spool folder still holds (a run that ended offline, or whose key was refused)
and finishes the run, like ``wandb sync``. Connection: ``--url`` / ``AUDIT_PORTAL_URL``, ``--api-key`` /
``AUDIT_PORTAL_KEY`` (or ``AUDIT_PORTAL_API_KEY``), ``--project`` / ``AUDIT_PORTAL_PROJECT``. Exit codes (stable,
for scripts):

    0  uploaded (and, with --wait, certified within the budget if one was given)
    1  the portal refused the file or the certificate job failed (the message names the line and reason)
    2  certified, but B* is above --budget (or nothing could be certified)
    3  the portal could not be reached in time (nothing is lost: run the command again; a file sent in parts
       resumes with the parts the portal is missing)
    4  status: still processing
    5  --require-replay: the routing audit did not show that rollout routing replay held (FAIL, UNVERIFIABLE, or no
       R3 routes in the log; the message names the failing calls and layers)
    64 usage error
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tqdm import tqdm

from audit_portal_client.client import BudgetExceeded, Client, PortalError, PortalUnavailable, ReplayFailed
from audit_portal_client.upload import PARTS_ABOVE
from audit_portal_client.outcomes import verdict_line

EXIT_OK, EXIT_REFUSED, EXIT_BUDGET, EXIT_UNREACHABLE, EXIT_PENDING, EXIT_REPLAY, EXIT_USAGE = 0, 1, 2, 3, 4, 5, 64


def _client(args) -> Client:
    url = args.url or os.environ.get("AUDIT_PORTAL_URL")
    key = args.api_key or os.environ.get("AUDIT_PORTAL_KEY") or os.environ.get("AUDIT_PORTAL_API_KEY")
    if not url or not key:
        raise SystemExit(_usage("--url and --api-key (or AUDIT_PORTAL_URL and AUDIT_PORTAL_KEY) are required"))
    return Client(url, key, timeout=args.http_timeout)


def _usage(msg: str) -> int:
    print(f"audit-portal: {msg}", file=sys.stderr)
    return EXIT_USAGE


def _call(fn):
    """``(fn(), None)``, or ``(None, exit code)`` with the reason on stderr."""
    try:
        return fn(), None
    except PortalUnavailable as exc:
        print(f"audit-portal: portal unreachable: {exc}", file=sys.stderr)
        return None, EXIT_UNREACHABLE
    except PortalError as exc:
        print(f"audit-portal: refused: {exc}", file=sys.stderr)
        return None, EXIT_REFUSED


def _summary(result) -> str:
    c = result.certificate
    said = verdict_line(result.verdict)  # first, as the run page and the certify command put it
    return (
        (said + "\n" if said else "")
        + f"certificate {result.certificate_id}: {c.get('sequences')} sequences, {c.get('tokens')} tokens, "
        f"eps_hat={c.get('eps_hat')}, B*={c.get('best_bound')} ({c.get('best_bound_id')}), "
        f"data errors {c.get('data_errors')}\n{result.url}"
    )


def cmd_upload(args) -> int:
    client = _client(args)
    project = args.project or os.environ.get("AUDIT_PORTAL_PROJECT")
    if not project:
        return _usage("--project (or AUDIT_PORTAL_PROJECT) is required")
    if not os.path.isfile(args.file):
        return _usage(f"{args.file}: no such file")
    config = _config(args.config)
    if config is _BAD:
        return _usage("--config: a JSON object, e.g. '{\"lr\": 1e-6}'")
    size = os.path.getsize(args.file)
    quiet = args.quiet or not sys.stderr.isatty() and not args.progress
    parts_above = None if args.single_request else args.parts_above
    in_parts = parts_above is not None and size > parts_above
    with (
        tqdm(
            total=size, unit="B", unit_scale=True, desc="sha256", disable=quiet or not in_parts, file=sys.stderr
        ) as hbar,
        tqdm(total=size, unit="B", unit_scale=True, desc="upload", disable=quiet, file=sys.stderr) as bar,
    ):

        def hashed(done, total):
            hbar.update(done - hbar.n)

        def sent(done, total):  # in parts: the bytes the portal has stored (a resumed upload starts above 0)
            bar.total = total
            bar.update(done - bar.n)

        up, code = _call(
            lambda: client._poll(
                lambda: client.upload(
                    project,
                    args.file,
                    progress=sent,
                    parts_above=parts_above,
                    hash_progress=hashed,
                    config=config,
                    tags=args.tag,
                ),
                deadline=_deadline(args.timeout),
            )
        )
        if code is not None:
            return code
    print(f"upload {up['id']} ({up['stage']}{', same bytes as before' if up.get('stage') == 'duplicate' else ''})")
    if not args.wait and args.budget is None and not args.require_replay:
        return EXIT_OK
    with tqdm(
        total=1.0,
        desc="certify",
        disable=quiet,
        file=sys.stderr,
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix}",
    ) as bar:

        def on_job(job):
            bar.set_postfix_str(f"{job.get('kind')} {job.get('state')}")
            if job.get("progress") is not None:
                bar.n = float(job["progress"])
                bar.refresh()

        result, code = _call(lambda: client.wait_for_certificate(up["id"], timeout=args.timeout, on_job=on_job))
        if code is not None:
            return code
    print(_summary(result))
    if args.budget is not None and (result.best_bound is None or result.best_bound > args.budget):
        print(f"audit-portal: {BudgetExceeded(result, args.budget)}", file=sys.stderr)
        return EXIT_BUDGET
    if args.require_replay:  # the same gate as Run.finish(require_replay=True)
        report, code = _call(lambda: client.wait_for_routing(result.upload_id, timeout=args.timeout))
        if code is not None:
            return code
        replay = report.get("replay") or {}
        print(f"routing replay {replay.get('state')}: {replay.get('reason')}")
        if replay.get("state") != "PASS":
            print(f"audit-portal: {ReplayFailed(result.upload_id, replay)}", file=sys.stderr)
            return EXIT_REPLAY
    return EXIT_OK


_BAD = object()


def _config(text: str | None):
    """``--config``: a JSON object (None when not given; ``_BAD`` when it is not one)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return _BAD
    return value if isinstance(value, dict) else _BAD


def cmd_status(args) -> int:
    client = _client(args)
    up, code = _call(lambda: client.get(f"/uploads/{args.upload_id}/"))
    if code is not None:
        return code
    print(
        f"upload {up['id']}: {up['original_name']} ({up.get('format')}), stage {up['stage']}, "
        f"{up.get('error_count', 0)} error(s)"
    )
    for job in up.get("jobs", []):
        prog = "" if job.get("progress") is None else f" {100 * job['progress']:.0f}%"
        print(f"  job {job['id']} {job['kind']}: {job['state']}{prog}")
    if up["stage"] == "invalid":
        for e in up.get("validation", {}).get("errors", [])[:5]:
            print(f"  line {e.get('line')}: {e.get('field') or 'record'}: {e.get('reason')}")
        return EXIT_REFUSED
    jobs = up.get("jobs", [])
    if any(j["state"] in ("failed", "cancelled") for j in jobs if j["kind"] == "certify_upload"):
        return EXIT_REFUSED
    done = up["stage"] in ("valid", "duplicate") and any(
        j["kind"] == "certify_upload" and j["state"] == "succeeded" for j in jobs
    )
    if not done:
        return EXIT_PENDING
    if args.budget is not None:
        result, code = _call(lambda: client.wait_for_certificate(up["id"], timeout=args.timeout))
        if code is not None:
            return code
        print(_summary(result))
        if result.best_bound is None or result.best_bound > args.budget:
            return EXIT_BUDGET
    return EXIT_OK


def cmd_sync(args) -> int:
    from audit_portal_client.run import sync

    if not os.path.isfile(os.path.join(args.spool, "state.json")):
        return _usage(f"{args.spool}: not a run's spool folder (no state.json)")
    url = args.url or os.environ.get("AUDIT_PORTAL_URL")
    if not url:  # the spool remembers the portal it was logging to
        import json

        with open(os.path.join(args.spool, "state.json")) as fh:
            args.url = json.load(fh).get("url")
    client = _client(args)
    result, code = _call(lambda: sync(client, args.spool, project=args.project, timeout=args.timeout))
    if code is not None:
        return code
    c = result.certificate
    print(
        f"run {result.run_id}: {c.get('steps')} step(s), {c.get('sequences')} sequence(s), eps_hat "
        f"{c.get('eps_hat')}, B*={result.best_bound}; missing steps: {c.get('missing_steps') or 'none'}\n{result.url}"
    )
    return EXIT_OK


def _size(text: str) -> int:
    """``1048576``, ``64M``, ``1.5G``, ``512K``, ``64MiB``: bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if mult > 1 else t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a size in bytes (or with K, M, G)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size cannot be negative")
    return int(value * mult)


def _deadline(timeout: float) -> float:
    import time

    return time.monotonic() + timeout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="audit-portal",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    ap.add_argument("--url")
    ap.add_argument("--api-key")
    ap.add_argument("--http-timeout", type=float, default=60.0)
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("upload", help="upload a run log (.jsonl, .jsonl.gz, .parquet)")
    u.add_argument("file")
    u.add_argument("--project")
    u.add_argument("--wait", action="store_true", help="wait for the certificate")
    u.add_argument("--budget", type=float, help="exit 2 when the certified B* is above this (implies --wait)")
    u.add_argument(
        "--require-replay",
        action="store_true",
        help="exit 5 unless the routing audit shows R3 replay held (implies --wait)",
    )
    u.add_argument("--timeout", type=float, default=900.0, help="seconds to keep trying / waiting")
    u.add_argument(
        "--parts-above",
        type=_size,
        default=PARTS_ABOVE,
        metavar="SIZE",
        help="send files larger than SIZE (bytes, or with K/M/G: 64M) as a resumable upload in parts; "
        "running the same command again after an interruption sends only the missing parts "
        "(default 64M)",
    )
    u.add_argument("--single-request", action="store_true", help="always send the file in one request")
    u.add_argument(
        "--config",
        metavar="JSON",
        help="the run's config as a JSON object, merged into the run's when the upload is valid",
    )
    u.add_argument("--tag", action="append", metavar="TAG", help="a tag for the run (repeat for more)")
    u.add_argument("--quiet", action="store_true")
    u.add_argument("--progress", action="store_true", help="progress bars even when stderr is not a terminal")
    s = sub.add_parser("status", help="an upload's stage, jobs and certificate")
    s.add_argument("upload_id", type=int)
    s.add_argument("--budget", type=float)
    s.add_argument("--timeout", type=float, default=60.0)
    y = sub.add_parser("sync", help="upload what a run's spool folder holds and finish the run")
    y.add_argument("spool")
    y.add_argument("--project", help="default: the project the spool was logging to")
    y.add_argument("--timeout", type=float, default=900.0)
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        return {"upload": cmd_upload, "status": cmd_status, "sync": cmd_sync}[args.cmd](args)
    except SystemExit as exc:
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
