from django.urls import path

from audit_portal.attestations import api, tlog

urlpatterns = [
    path("keys/", api.KeySet.as_view(), name="signing-keys"),
    path("log/checkpoint/", api.LatestCheckpoint.as_view(), name="log-checkpoint"),
    path("log/checkpoint.note", tlog.CheckpointNote.as_view(), name="log-checkpoint-note"),
    path("log/add-checkpoint", tlog.AddCheckpoint.as_view(), name="log-add-checkpoint"),
    path("log/key-events/", tlog.KeyEvents.as_view(), name="log-key-events"),
    path("log/consistency/", api.ConsistencyProof.as_view(), name="log-consistency"),
    path("attestations/<str:kind>/<int:pk>/", api.AttestationDetail.as_view(), name="attestation-detail"),
    path("attestations/<str:kind>/<int:pk>/bundle/", api.AttestationBundle.as_view(), name="attestation-bundle"),
]
