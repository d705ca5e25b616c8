"""REST endpoints for training-step audits: submit (submit role or a submit-scoped key), list, detail, and the
per-token arrays file. Every read is scoped to the caller's projects (a foreign audit is a 404)."""

from __future__ import annotations

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import exceptions, generics, serializers, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.accounts.throttling import WorkBudgetMixin
from audit_portal.core.parsers import BoundedJSONParser
from audit_portal.core.storage import artifact_path
from audit_portal.training import selectors, services
from audit_portal.training.models import TrainingAudit
from workers.training.config import DEVICES, LOSS_NAMES, OPTIMIZERS


class TrainingAuditSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    state = serializers.CharField(read_only=True)
    job = serializers.SerializerMethodField()
    links = serializers.SerializerMethodField()

    class Meta:
        model = TrainingAudit
        fields = [
            "id",
            "project",
            "state",
            "config",
            "rollout_numerics",
            "trainer_numerics",
            "device_requested",
            "device_used",
            "device_note",
            "submitted_by",
            "created_at",
            "completed_at",
            "job",
            "summary",
            "divergence",
            "certificates",
            "steps",
            "mask_agreement",
            "profile",
            "tokens_bytes",
            "links",
        ]
        read_only_fields = fields

    def get_job(self, audit) -> dict | None:
        job = audit.job
        if job is None:
            return None
        return {
            "id": job.pk,
            "state": job.state,
            "queue": job.queue,
            "progress": job.progress,
            "message": job.message,
            "error": job.error,
        }

    def get_links(self, audit) -> dict:
        return {
            "page": f"/p/{audit.project.slug}/training/{audit.pk}/",
            "job": f"/api/v1/jobs/{audit.job_id}/" if audit.job_id else None,
            "tokens": f"/api/v1/training-audits/{audit.pk}/tokens/" if audit.tokens_storage else None,
        }


class TrainingAuditListSerializer(TrainingAuditSerializer):
    class Meta(TrainingAuditSerializer.Meta):
        fields = [
            "id",
            "project",
            "state",
            "rollout_numerics",
            "trainer_numerics",
            "device_requested",
            "device_used",
            "submitted_by",
            "created_at",
            "completed_at",
            "job",
            "links",
        ]
        read_only_fields = fields


def _int(default, help_text=""):
    return serializers.IntegerField(required=False, default=default, help_text=help_text)


SUBMIT_REQUEST = inline_serializer(
    "TrainingAuditRequest",
    {
        "numerics": serializers.CharField(
            required=False,
            default="bf16_autocast",
            help_text="rollout numerics: fp32 | bf16_autocast | bf16_weights, optionally "
            "with ',sdpa' and/or ',extra_batch'",
        ),
        # a plain string in the schema: an enum here would collide with the kernels' "device" enum (cpu | cuda)
        "device": serializers.CharField(
            required=False,
            default="auto",
            help_text=f"{' | '.join(DEVICES)}; auto: CUDA when the worker has it, else the CPU fallback",
        ),
        "vocab": _int(32),
        "d_model": _int(64),
        "n_layers": _int(2),
        "n_heads": _int(4),
        "max_len": _int(64),
        "seed": _int(0, "model weights and seeded prompts"),
        "batch": _int(16, "sequences (a multiple of group)"),
        "group": _int(4, "samples per prompt"),
        "prompt_len": _int(4),
        "length": _int(16, "response tokens"),
        "topk": _int(8, "K of the top-K-only view"),
        "prompts": serializers.ListField(
            child=serializers.ListField(child=serializers.IntegerField()),
            required=False,
            help_text="explicit prompts (equally long token-id lists); default: seeded",
        ),
        "losses": serializers.ListField(
            child=serializers.ChoiceField(choices=list(LOSS_NAMES)),
            required=False,
            help_text="losses to step (default: all)",
        ),
        "optimizer": serializers.ChoiceField(choices=list(OPTIMIZERS), required=False, default="sgd"),
        "lr": serializers.FloatField(required=False, default=1.0),
        "budget": serializers.FloatField(required=False, default=0.5),
    },
)


def submit_from_request(request, project, principal) -> TrainingAudit:
    """Shared by the API and the page's form. A form posts strings (and blank fields for defaults); JSON posts
    numbers and lists. Either way the engine's validator decides and a bad field is a 400 naming it."""
    data = request.data if hasattr(request, "data") else request.POST
    if hasattr(data, "getlist"):
        fields = {k: (data.getlist(k) if k == "losses" else data.get(k)) for k in data if k != "csrfmiddlewaretoken"}
        if fields.get("losses") and len(fields["losses"]) == 1:
            fields["losses"] = fields["losses"][0]  # "ppo,cdppo" from a text field
    else:
        fields = data  # the validator rejects anything but an object
    return services.submit(project=project, data=fields, submitted_by=principal.label)


class ProjectTrainingAuditListCreate(WorkBudgetMixin, generics.ListAPIView):
    """A project's training-step audits, newest first; POST submits one (a job on the ``gpu`` queue, CPU
    fallback). A bad field is a 400 ``invalid_training_config`` whose ``detail.field`` names it."""

    serializer_class = TrainingAuditListSerializer
    parser_classes = [BoundedJSONParser, FormParser, MultiPartParser]

    def get_queryset(self):
        return selectors.audits_for(self.request.principal, self.request.project)

    @extend_schema(
        request={"application/json": SUBMIT_REQUEST, "multipart/form-data": SUBMIT_REQUEST},
        responses={201: TrainingAuditSerializer},
    )
    def post(self, request, slug):
        principal, project = request.principal, request.project
        if not principal.can_submit(project):
            raise exceptions.PermissionDenied(
                "Submitting a training audit needs the submit role (owner or member) or an API key with the submit "
                "scope."
            )
        audit = submit_from_request(request, project, principal)
        return Response(TrainingAuditSerializer(audit).data, status=status.HTTP_201_CREATED)


class TrainingAuditDetail(generics.RetrieveAPIView):
    """One training-step audit: configuration, device used, job, and (once complete) the stored results."""

    serializer_class = TrainingAuditSerializer

    def get_object(self):
        return selectors.get_audit(self.request.principal, self.kwargs["pk"])


class TrainingAuditTokens(APIView):
    """The per-token arrays (gzipped JSON ``training-audit-tokens/1``: exact TV, KL, top-K interval ends, sampled
    token ids, each ``[batch][length]``)."""

    @extend_schema(responses={(200, "application/gzip"): OpenApiTypes.BINARY})
    def get(self, request, pk):
        audit = selectors.get_audit(request.principal, pk)
        path = artifact_path(audit.tokens_storage) if audit.tokens_storage else None
        if path is None or not path.exists():
            raise exceptions.NotFound("This training audit has no per-token file (not complete, or removed).")
        return FileResponse(
            open(path, "rb"),
            as_attachment=True,
            content_type="application/gzip",
            filename=f"training-audit-{audit.pk}-tokens.json.gz",
        )
