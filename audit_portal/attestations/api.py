"""REST endpoints: the published key set and checkpoints (public), consistency proofs (public), and — scoped to the
caller's projects — each certificate's verification state and its downloadable bundle."""

from __future__ import annotations

import json

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, permissions
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_portal.attestations import selectors
from audit_portal.attestations.keys import key_set
from audit_portal.attestations.models import SubjectKind
from workers.verify import merkle

KIND_PARAM = OpenApiParameter("kind", str, OpenApiParameter.PATH, enum=list(SubjectKind.values))


def _int_param(request, name, default=None):
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise exceptions.ValidationError({name: "must be a non-negative integer"})
    return int(raw)


class PublicView(APIView):
    """Readable without credentials (a credential that is presented must still be valid)."""

    permission_classes = [permissions.AllowAny]


class KeySet(PublicView):
    """Every key that has signed certificates or checkpoints (active and retired), by key id."""

    @extend_schema(responses={200: dict})
    def get(self, request):
        return Response(key_set())


class LatestCheckpoint(PublicView):
    """The latest signed checkpoint of the transparency log (a DSSE envelope), or the one of ``tree_size``."""

    @extend_schema(parameters=[OpenApiParameter("tree_size", int)], responses={200: dict})
    def get(self, request):
        ck = selectors.latest_checkpoint(_int_param(request, "tree_size"))
        if ck is None:
            raise exceptions.NotFound("The log has no checkpoint of that size.")
        return Response(json.loads(ck.envelope))


class ConsistencyProof(PublicView):
    """RFC 6962 §2.1.2 consistency proof between the checkpoints of sizes ``first`` and ``second``."""

    @extend_schema(
        parameters=[OpenApiParameter("first", int, required=True), OpenApiParameter("second", int, required=True)],
        responses={200: dict},
    )
    def get(self, request):
        first, second = _int_param(request, "first"), _int_param(request, "second")
        if first is None or second is None or not 0 < first <= second:
            raise exceptions.ValidationError({"first": "need 0 < first <= second"})
        a, b = selectors.latest_checkpoint(first), selectors.latest_checkpoint(second)
        if a is None or b is None:
            raise exceptions.NotFound("The log has no checkpoint of that size.")
        hashes = selectors.leaf_hashes(second)
        return Response(
            {
                "first": first,
                "second": second,
                "first_root": a.root_hash,
                "second_root": b.root_hash,
                "hashes": [h.hex() for h in merkle.consistency_proof(first, hashes)],
            }
        )


def _entry(request, kind, pk):
    if kind not in SubjectKind.values:
        raise exceptions.NotFound("No such kind of certificate.")
    entry = selectors.entries_for(request.principal, kind, pk).first()
    if entry is None:
        raise exceptions.NotFound("This certificate is not signed (or not visible to you).")
    return entry


class AttestationDetail(APIView):
    """The latest signed statement of a certificate and each verification check's state. ``files=0`` skips
    re-hashing the audited files in the artifact store."""

    @extend_schema(parameters=[KIND_PARAM, OpenApiParameter("files", bool)], responses={200: dict})
    def get(self, request, kind, pk):
        entry = _entry(request, kind, pk)
        report = selectors.verify_entry(entry, rehash_files=request.query_params.get("files", "1") != "0")
        return Response(
            {
                "subject_kind": entry.subject_kind,
                "subject_id": entry.subject_id,
                "log_index": entry.index,
                "leaf_hash": entry.leaf_hash,
                "key_id": entry.key_id,
                "predicate_type": entry.predicate_type,
                "integrated_time": entry.created_at,
                "statement": report.statement,
                **report.as_dict(),
            }
        )


class AttestationBundle(APIView):
    """The certificate bundle for ``python -m workers.verify``: envelope, inclusion proof, checkpoint, keys (and a
    consistency proof with ``consistency_from``)."""

    @extend_schema(
        parameters=[
            KIND_PARAM,
            OpenApiParameter("tree_size", int),
            OpenApiParameter(
                "consistency_from",
                int,
                description=("include the consistency proof from this tree size (a checkpoint you pinned)"),
            ),
        ],
        responses={200: dict},
    )
    def get(self, request, kind, pk):
        entry = _entry(request, kind, pk)
        try:
            data = selectors.bundle(entry, _int_param(request, "tree_size"), _int_param(request, "consistency_from"))
        except ValueError as exc:
            raise exceptions.NotFound(str(exc)) from None
        response = Response(data)
        response["Content-Disposition"] = f'attachment; filename="{bundle_filename(kind, pk)}"'
        return response


def bundle_filename(kind: str, pk: int) -> str:
    return f"{kind.replace('_', '-')}-{pk}.bundle.json"
