"""C2SP checkpoints and an independent witness, through the portal's endpoints: the latest checkpoint is a C2SP
signed note that opens with the published note key (Go sumdb/note semantics, workers/verify/note.py); witnesses —
their own key and storage, no database — check the key events' inclusion and the log's consistency, cosign
(cosignature/v1) and post to add-checkpoint; a bundle then verifies offline with k of n pinned witnesses; a
checkpoint signed by a key the log did not introduce, or a fork, is refused."""

from __future__ import annotations

import json

import pytest

from audit_portal.attestations import keys, selectors
from audit_portal.attestations.models import Cosignature
from workers.verify import keys as K
from workers.verify import note
from workers.verify.witness import Refused, Witness

from ..conftest import records
from .test_attestations import download, signing_key_dir, verify_cli  # noqa: F401 - autouse fixture
from ..certificates.test_certificates import certified

pytestmark = pytest.mark.django_db


class ClientTransport:
    def __init__(self, client, forge=None):
        self.client, self.forge = client, forge

    def get(self, path):
        r = self.client.get(path)
        if self.forge and path.startswith("/api/v1/log/checkpoint.note"):
            return r.status_code, self.forge(r.content.decode()).encode()
        return r.status_code, r.content

    def post(self, path, body):
        r = self.client.post(path, data=body, content_type="text/plain")
        return r.status_code, r.content


@pytest.fixture
def witnesses(tmp_path, client, settings):
    ws = [Witness(tmp_path / f"w{i}", f"witness-{i}.example", ClientTransport(client)) for i in range(3)]
    settings.AUDIT_LOG_WITNESS_KEYS = [w.verifier_key for w in ws[:2]]  # the log knows two of them
    return ws


def test_the_checkpoint_is_a_c2sp_note_and_witnesses_cosign_it(api, project, client, tmp_path, witnesses):
    first, _ = certified(api, project, records(trajectories=3))
    response = client.get("/api/v1/log/checkpoint.note")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    signed = response.content.decode()
    published = client.get("/api/v1/keys/").json()["keys"]
    log_key = note.parse_verifier(published[0]["note_key"])
    body = note.open_checkpoint(signed, log_key)  # a standard signed-note verifier with the published key
    assert body["tree_size"] == selectors.latest_checkpoint().tree_size and body["origin"] == keys.log_name()
    assert body["root_hash"].hex() == selectors.latest_checkpoint().root_hash

    w1, w2, w3 = witnesses
    assert w1.round() == f"cosigned tree size {body['tree_size']}"
    assert w2.round().startswith("cosigned")
    assert "refused the cosignature: HTTP 403" in w3.round()  # a witness the log was not configured with
    assert Cosignature.objects.count() == 2
    cosigned = client.get("/api/v1/log/checkpoint.note").content.decode()
    assert sorted(
        note.verify_cosignatures(cosigned, [note.parse_verifier(w.verifier_key) for w in witnesses])
    ) == sorted([w1.verifier_key, w2.verifier_key])
    state = json.loads((tmp_path / "w0" / "state.json").read_text())
    assert state["tree_size"] == body["tree_size"] and set(state["keys"]) == {published[0]["key_id"]}

    # the log grows: the witnesses check the consistency proof from what they cosigned and cosign again
    certified(api, project, records(trajectories=3, seed=8))
    assert w1.round().startswith("cosigned") and w2.round().startswith("cosigned")
    bundle = download(api, "run_certificate", first.pk, tmp_path)
    assert "checkpoint_note" in json.loads(bundle.read_text())
    pins = ["--witness", w1.verifier_key, "--witness", w2.verifier_key, "--witness", w3.verifier_key]
    out = verify_cli(bundle, *pins, "--min-witnesses", "2")
    assert out.returncode == 0 and "PASS  witnesses" in out.stdout, out.stdout + out.stderr
    out = verify_cli(bundle, *pins, "--min-witnesses", "3")
    assert out.returncode == 1 and "2 of the 3 pinned witnesses cosigned" in out.stderr, out.stdout + out.stderr
    # a bundle without a note (as downloaded before this change) still verifies; only a witness demand fails it
    old = json.loads(bundle.read_text())
    old.pop("checkpoint_note")
    bundle.write_text(json.dumps(old))
    assert verify_cli(bundle).returncode == 0
    assert verify_cli(bundle, *pins, "--min-witnesses", "1").returncode == 1


def test_the_witness_refuses_an_unintroduced_key_a_fork_and_a_rollback(api, project, client, tmp_path, witnesses):
    certified(api, project, records(trajectories=3))
    w = witnesses[0]
    assert w.round().startswith("cosigned")
    size = json.loads((tmp_path / "w0" / "state.json").read_text())["tree_size"]
    evil = K.generate()

    def signed_by_evil(text):
        body = note.parse_checkpoint(note.split(text)[0])
        return note.sign(
            note.checkpoint_text(body["origin"], body["tree_size"], body["root_hash"]), body["origin"], evil
        )

    w.transport = ClientTransport(client, forge=signed_by_evil)
    with pytest.raises(Refused, match="not signed by a key the log introduced"):
        w.round()
    stolen = keys.load_private_key()

    def fork(text):  # the real key signs a different tree head of the same size
        body = note.parse_checkpoint(note.split(text)[0])
        return note.sign(note.checkpoint_text(body["origin"], body["tree_size"], b"\x09" * 32), body["origin"], stolen)

    w.transport = ClientTransport(client, forge=fork)
    with pytest.raises(Refused):  # the key events' inclusion proofs fail against the forged root
        w.round()
    # the log refuses a forked tree head posted to add-checkpoint too (it never signed it)
    forged = fork(client.get("/api/v1/log/checkpoint.note").content.decode())
    line = note.cosign(note.split(forged)[0], w.name, w.key, 1)
    r = client.post(
        "/api/v1/log/add-checkpoint",
        data=note.add_checkpoint_body(0, [], note.add_signatures(forged, [line])),
        content_type="text/plain",
    )
    assert r.status_code == 409  # Conflict: a different tree head of that size (the API reports errors as JSON)
    state = json.loads((tmp_path / "w0" / "state.json").read_text())
    assert state["tree_size"] == size  # nothing refused was recorded


@pytest.mark.django_db(transaction=True)
def test_the_witness_process_cosigns_over_http(api, project, live_server, settings, tmp_path):
    """``python -m workers.verify witness --once`` as its own process against a real HTTP server."""
    import subprocess
    import sys

    from .test_attestations import ROOT

    certified(api, project, records(trajectories=3))
    state = tmp_path / "witness"
    cmd = [sys.executable, "-m", "workers.verify", "witness", "--state", str(state), "--name", "w.example"]
    key = subprocess.run([*cmd, "--print-key"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert key.returncode == 0 and key.stdout.startswith("w.example+"), key.stderr
    settings.AUDIT_LOG_WITNESS_KEYS = [key.stdout.strip()]
    out = subprocess.run(
        [*cmd, "--url", live_server.url, "--once"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.startswith("cosigned tree size 2"), out.stdout + out.stderr
    assert Cosignature.objects.filter(witness=key.stdout.strip(), tree_size=2).exists()


def test_a_rewrite_below_a_cosigned_size_is_named_by_the_log_check(api, project, client, witnesses, settings):
    """The owner rewrites an entry, re-signs every checkpoint with the stolen key, and the witness directory is gone:
    the cosignatures the log kept no longer verify over what its entries hash to now."""
    from .test_log_witness import _rewrite_entry_and_resign_everything

    settings.AUDIT_LOG_WITNESS_DIR = ""  # only the independent witnesses' cosignatures remain
    certified(api, project, records(trajectories=3))
    certified(api, project, records(trajectories=3, seed=2))
    assert witnesses[0].round().startswith("cosigned tree size 3")
    assert selectors.verify_log().ok
    _rewrite_entry_and_resign_everything(1)
    result = selectors.verify_log()
    assert not result.ok and any(
        "witness witness-0.example cosigned tree size 3" in p and "rewritten" in p for p in result.problems
    ), result.problems
