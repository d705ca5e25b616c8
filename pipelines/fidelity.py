import tempfile
from pathlib import Path

from celery import shared_task

from audit_portal import task_names
from audit_portal.fidelity import services as fidelity
from audit_portal.fidelity.models import RegisteredTokenizer
from audit_portal.jobs.execution import JobCancelled, JobInputError, run_job
from audit_portal.runs import services as runs
from audit_portal.runs.models import Upload

AUDIT_OPTIONS = {
    "mode",
    "tau_align",
    "max_staleness",
    "allow_inferred_roles",
    "require_certificate",
    "require_loss_mask",
    "delta",
}
CALL_BATCH = 2000  # call summaries per bulk insert (and per call_sink batch)


def _project_registry(project):
    """The project's registered tokenizers as an engine registry that loads a tokenizer only when a record
    declares its hash (a project may register many; loading a large one takes about a second)."""
    from workers.fidelity.tokenizer import TokenizerRegistry

    class ProjectTokenizers(TokenizerRegistry):
        def __init__(self, registrations):
            super().__init__()
            self.available = {r.sha256: r for r in registrations}
            self.load_errors: dict[str, str] = {}

        def get(self, sha):
            tok = super().get(sha)
            if tok is None and isinstance(sha, str) and sha in self.available and sha not in self.load_errors:
                try:
                    tok = self.register(fidelity.load_tokenizer(self.available[sha]))
                except Exception as exc:  # noqa: BLE001 - an unreadable tokenizer fails closed, like a missing one
                    self.load_errors[sha] = f"{type(exc).__name__}: {exc}"
            return tok

        def shas(self):
            return sorted(self.available)

        def loaded(self):
            return super().shas()

    return ProjectTokenizers(RegisteredTokenizer.objects.filter(project=project))


@shared_task(name=task_names.FIDELITY_AUDIT, acks_late=True)
def fidelity_audit(job_id: int) -> str:
    """Audit a valid upload (docs/fidelity-rules.md): the report, per-call summaries (bulk-inserted as the engine streams
    them), the loss-mask export; progress is the engine's (fraction of the upload read, then verdicts stored)."""
    from workers.fidelity import audit_file  # pulls torch (certificates) lazily: workers only

    def work(job, progress):
        upload = Upload.objects.select_related("project", "run").get(pk=job.subject_id)
        options = {k: v for k, v in job.params.items() if k in AUDIT_OPTIONS}
        if options.get("mode", "transition") not in ("transition", "merged"):
            raise JobInputError(f"mode must be 'transition' or 'merged', got {options['mode']!r}")
        path = runs.artifact_path(upload.storage_name)
        if not path.exists():
            raise JobInputError(f"the uploaded file {upload.original_name} is no longer in the artifact store")
        report = fidelity.begin(upload, options)  # replaces the rows of an earlier attempt (one transaction)
        registry = _project_registry(upload.project)
        progress(0.02, "auditing calls", force=True)
        audit_progress = progress.stage(0.02, 0.93)  # engine: 0 → 0.9 bytes read, 0.9 → 1 verdicts stored
        scratch = runs.artifact_path("fidelity/tmp")
        scratch.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=scratch) as tmp:
            masks_jsonl = Path(tmp) / "masks.jsonl"
            # call summaries are bulk-inserted batch by batch as the engine emits them: nothing holds calls[]
            try:
                result = audit_file(
                    path,
                    tokenizer=registry,
                    masks_out=masks_jsonl,
                    masks_format="jsonl",
                    call_sink=lambda entries: fidelity.add_calls(report, entries),
                    sink_batch=CALL_BATCH,
                    progress=audit_progress,
                    **options,
                )
            except fidelity.ReportSuperseded:  # a newer attempt owns the report now: leave the job to it
                raise JobCancelled() from None
            progress(0.96, "storing the loss-mask export", force=True)
            masks = fidelity.store_masks(upload, masks_jsonl)
        used = [
            {
                "id": registry.available[s].pk,
                "name": registry.available[s].name,
                "sha256": s,
                "kind": registry.available[s].kind,
            }
            for s in registry.loaded()
        ]
        unmatched = sorted(set(result["tokenizers"]["unregistered_seen"]) | set(registry.load_errors))
        tokenizers = {"used": used, "unmatched": unmatched, "load_errors": registry.load_errors}
        try:
            report = fidelity.complete(report, result, tokenizers=tokenizers, masks=masks)
        except fidelity.ReportSuperseded:
            raise JobCancelled() from None
        return {
            "report": report.pk,
            "verdict": report.verdict,
            "closed_failure_violations": report.closed_failure_violations,
            "calls": report.calls_total,
            "policy_tokens": report.policy_tokens,
            "verifiable_fraction": report.verifiable_fraction,
            "tokenizers_used": [t["sha256"] for t in used],
        }

    return run_job(job_id, work)
