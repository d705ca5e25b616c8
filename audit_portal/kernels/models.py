"""Kernel contracts and conformance (docs/contract-language.md, docs/contracts.md).

* ``Contract``: one row per (contract id, version), parsed spec + the exact source text. Never edited in
  place: a changed text is a new version, a new row (``load_contracts`` refuses anything else).
* ``ContractCalibration``: the engine's three-state calibration of one contract version (history kept).
* ``Implementation``: what is under test inside a project — a registered import path or an uploaded
  single-file module (stored in the artifact store by SHA-256), plus the function per contract.
* ``Submission``: one conformance job (implementation × platform × contracts); ``Verdict``: one row per
  contract, stored as it lands. Per-measurement traces stay in the artifact store (``trace_storage``).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from audit_portal.accounts.models import Project
from audit_portal.jobs.models import Job

FAMILY_CODES = (("precision", "PRC"), ("ordering", "ORD"), ("compiler", "CMP"), ("exceptional", "EXC"))
PASSING_VERDICTS = ("PASS", "QUALITY_WARNING")


def ordered_vector(vector: dict | None) -> dict | None:
    if not vector:
        return None
    order = [code for _, code in FAMILY_CODES]
    return {k: vector[k] for k in sorted(vector, key=lambda k: order.index(k) if k in order else len(order))}


class Contract(models.Model):
    contract_id = models.CharField(max_length=200)  # e.g. "C-PRC-01/aten.mm/f32.f32->f32"
    version = models.CharField(max_length=40)
    contract_class = models.CharField(max_length=16, db_index=True)  # "C-PRC-01"
    family = models.CharField(max_length=16)
    title = models.CharField(max_length=300, blank=True)
    protocol = models.CharField(max_length=80)
    signature = models.CharField(max_length=300)
    spec = models.JSONField(default=dict)  # Contract.to_dict() without the source text
    source_text = models.TextField()
    sha256 = models.CharField(max_length=64)
    source_name = models.CharField(max_length=300, blank=True)  # file name it was loaded from
    # a declared-property contract (batch invariance, exact GELU, stable top-k, ...): run only when a submission
    # names it by full id, never part of the default suite of twelve (docs/contracts.md#declared-property-contracts)
    declared = models.BooleanField(default=False)
    loaded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["contract_class", "contract_id", "-loaded_at"]
        constraints = [models.UniqueConstraint(fields=["contract_id", "version"], name="contract_version_unique")]

    def __str__(self) -> str:
        return f"{self.contract_id} v{self.version}"

    @property
    def family_code(self) -> str:
        return dict(FAMILY_CODES).get(self.family, self.family[:3].upper())

    @property
    def label(self) -> str:
        """How progress and summaries name it: the class for a suite contract (one per class), the full id for a
        declared-property contract (it shares its class with one)."""
        return self.contract_id if self.declared else self.contract_class

    @property
    def default_function(self) -> str:
        """The function name of the signature (docs/contract-language.md#the-twelve-classes), e.g. 'matmul' for
        'matmul(a[M,K], b[K,N]) -> [M,N]'."""
        return self.signature.split("(", 1)[0].strip()


class CalibrationStatus(models.TextChoices):
    NOT_RUN = "not_run", "Not yet run"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    CALIBRATED = "calibrated", "Calibrated"
    FAILED = "failed", "Failed"


class ContractCalibration(models.Model):
    """One three-state calibration run of one contract version (the grader is itself graded)."""

    contract = models.ForeignKey(Contract, on_delete=models.CASCADE, related_name="calibrations")
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    status = models.CharField(max_length=16, choices=CalibrationStatus.choices, default=CalibrationStatus.QUEUED)
    result = models.JSONField(default=dict, blank=True)  # engine's calibrate() output
    problems = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]


class ImplementationKind(models.TextChoices):
    IMPORT_PATH = "import_path", "Registered import path"
    UPLOADED_MODULE = "uploaded_module", "Uploaded module"


class Implementation(models.Model):
    """A kernel implementation under test. The same reference (import path or code hash, and the same
    function mapping) submitted again is the same implementation, so its history forms one matrix column."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="kernel_implementations")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=ImplementationKind.choices)
    import_path = models.CharField(max_length=300, blank=True)  # "package.module:function" or "package.module"
    functions = models.JSONField(default=dict, blank=True)  # explicit {contract id or class: function name}
    code_sha256 = models.CharField(max_length=64, blank=True)  # uploaded module's digest
    code_size = models.IntegerField(null=True, blank=True)
    storage_name = models.CharField(max_length=300, blank=True)  # under ARTIFACT_ROOT
    original_filename = models.CharField(max_length=255, blank=True)
    fingerprint = models.CharField(max_length=64)  # sha256 of (kind, reference, mapping): the identity
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # a secret in the public badge URL (/badges/kernels/<token>.svg, for READMEs); empty = not published.
    # A new token retires the old URL.
    badge_token = models.CharField(max_length=64, blank=True, default="", db_index=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "fingerprint"], name="implementation_unique_in_project")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def reference(self) -> str:
        if self.kind == ImplementationKind.UPLOADED_MODULE:
            return f"{self.original_filename or 'module.py'} (sha256 {self.code_sha256[:12]})"
        return self.import_path


class Device(models.TextChoices):
    CPU = "cpu", "CPU"
    CUDA = "cuda", "CUDA"


# Submitted code runs only on the kernels worker role (its own queues; no signing key, docs/security.md)
QUEUE_FOR_DEVICE = {Device.CPU: "kernels", Device.CUDA: "kernels-gpu"}
CALIBRATION_QUEUE = "calibration"  # its own worker (scripts/worker calibration): never ahead of a submission


class Submission(models.Model):
    """One conformance run: an implementation on a platform against a list of contract versions."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="kernel_submissions")
    implementation = models.ForeignKey(Implementation, on_delete=models.CASCADE, related_name="submissions")
    device = models.CharField(max_length=8, choices=Device.choices, default=Device.CPU)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # [{"contract": pk, "contract_id", "version", "class", "function"}], in run order
    plan = models.JSONField(default=list)
    grade = models.JSONField(default=dict, blank=True)  # engine's grade() output, when finished
    environment = models.JSONField(default=dict, blank=True)  # fingerprint of the worker that ran it
    # KC-A / KC-T (docs/contract-language.md#grades): the flags the deployment runs with (the classes they can change
    # are measured again
    # under them) and the level per family it needs, e.g. {"ORD": 3}; both optional
    deployment_flags = models.JSONField(default=dict, blank=True)
    target = models.JSONField(default=dict, blank=True)
    submitted_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["project", "-created_at"]),
            models.Index(fields=["implementation", "device", "-created_at"]),
        ]

    def __str__(self) -> str:
        return f"Submission {self.pk} ({self.implementation} on {self.device})"

    @property
    def platform(self) -> str:
        return self.device

    @property
    def state(self) -> str:
        return self.job.state if self.job_id and self.job else "queued"

    @property
    def kc_c(self) -> dict | None:
        """The KC-C vector in its documented order (PRC, ORD, CMP, EXC; docs/contract-language.md#grades); jsonb does not keep key order."""
        return ordered_vector((self.grade or {}).get("kc_c"))

    @property
    def kc_a(self) -> dict | None:
        """KC-A, the vector under the declared deployment flags (None without flags: it is KC-C then)."""
        return ordered_vector((self.grade or {}).get("kc_a")) if self.deployment_flags else None

    @property
    def isolation(self) -> list[str]:
        """The isolation modes the verdicts were measured under ("bubblewrap"; "none" when an operator allowed
        unisolated runs), from the verdicts' recorded environments."""
        modes = set()
        for detail in self.verdicts.values_list("detail", flat=True):
            modes.add(((detail or {}).get("environment") or {}).get("isolation", {}).get("mode") or "unrecorded")
        return sorted(modes)

    @property
    def target_rows(self) -> list[dict]:
        """KC-T against what was achieved (KC-A; KC-C when no flags were declared), once graded."""
        if not self.target or not self.grade:
            return []
        achieved, meets = self.grade.get("kc_a") or {}, self.grade.get("meets_target") or {}
        return [
            {"family": family, "needed": needed, "achieved": achieved.get(family), "met": bool(meets.get(family))}
            for family, needed in ordered_vector(self.target).items()
        ]


class Verdict(models.Model):
    """One contract's verdict in one submission (verdict codes: docs/contract-language.md#verdicts). ``margin`` = statistic / bound;
    a missed T0 bound (bound 0) has an infinite margin, stored as ``margin_infinite`` since JSON and
    Postgres floats in the API should stay finite."""

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="verdicts")
    contract = models.ForeignKey(Contract, on_delete=models.PROTECT, related_name="verdicts")
    contract_class = models.CharField(max_length=16)
    verdict = models.CharField(max_length=20, db_index=True)
    statistic_name = models.CharField(max_length=60, blank=True)
    statistic = models.FloatField(null=True, blank=True)
    bound = models.FloatField(null=True, blank=True)
    margin = models.FloatField(null=True, blank=True)
    margin_infinite = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    signature = models.JSONField(default=dict, blank=True)
    assurance_level = models.PositiveSmallIntegerField(default=0)
    measurements = models.IntegerField(default=0)
    impl_hash = models.CharField(max_length=64, blank=True)
    detail = models.JSONField(default=dict, blank=True)  # Verdict.to_dict(include_trace=False)
    trace_storage = models.CharField(max_length=300, blank=True)  # JSONL under ARTIFACT_ROOT
    duration_s = models.FloatField(default=0.0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["submission", "id"]
        constraints = [models.UniqueConstraint(fields=["submission", "contract"], name="one_verdict_per_contract")]

    def __str__(self) -> str:
        return f"{self.contract_class}: {self.verdict}"

    @property
    def passed(self) -> bool:
        return self.verdict in PASSING_VERDICTS

    @property
    def margin_text(self) -> str:
        if self.margin_infinite:
            return "∞"
        if self.margin is None:
            return "—"
        return f"{self.margin:.3g}"
