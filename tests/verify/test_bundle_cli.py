"""DSSE/PAE, statements, bundles and the offline verifier ``python -m workers.verify`` (run as a subprocess, the
way a user runs it): a good bundle verifies against the key set the user pinned; one changed byte in the envelope,
the proof, the checkpoint or an audited file fails with the failing check named; a bundle that verifies only with
its own enclosed keys is UNPINNED (exit 3); and the package never imports Django."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as hs

from workers.verify import (
    build_bundle,
    checkpoint,
    dsse,
    envelope_leaf,
    file_sha256,
    jcs,
    keys as K,
    merkle,
    sign_statement,
    statement as st,
    verify_bundle,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_pinned_trust(tmp_path, monkeypatch):
    """Every test starts with nothing pinned: its own config dir, no AUDIT_VERIFY_* (the CLI subprocess inherits)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("AUDIT_VERIFY_KEYS", raising=False)
    monkeypatch.delenv("AUDIT_VERIFY_CHECKPOINT", raising=False)


def test_pae_matches_the_dsse_specification_example():
    # DSSE protocol.md: PAE("http://example.com/HelloWorld", "hello world")
    assert (
        dsse.pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_canonical_json_is_rfc8785():
    want = '{"a":[1e+21,0.1,"é"],"b":1,"c":null}'.encode()
    assert jcs.canonical({"b": 1.0, "a": [1e21, 0.1, "é"], "c": None}) == want
    assert jcs.canonical({"x": float("inf"), "y": float("nan")}) == b'{"x":"Infinity","y":"NaN"}'


class Log:
    """A tiny in-memory log built with the package's own functions (what the portal does, minus the database)."""

    def __init__(self, n_before=3, n_after=2):
        self.key = K.generate()
        self.kid = K.key_id(self.key.public_key())
        self.keys = {"keys": [K.key_entry(self.key.public_key())]}
        self.envelopes = [self._sign(f"other-{i}", "00" * 32) for i in range(n_before)]

    def _sign(self, name, digest):
        return sign_statement(
            st.statement([st.subject(name, digest)], st.RUN_CERTIFICATE_PREDICATE, {"name": name}), self.key, self.kid
        )

    def add(self, name, digest):
        self.envelopes.append(self._sign(name, digest))
        return len(self.envelopes) - 1

    def checkpoint(self, size=None):
        hashes = [merkle.leaf_hash(envelope_leaf(e)) for e in self.envelopes][:size]
        return checkpoint.sign("test-log", len(hashes), merkle.root(hashes), "2026-01-01T00:00:00Z", self.key, self.kid)

    def bundle(self, index, consistency_from=None):
        hashes = [merkle.leaf_hash(envelope_leaf(e)) for e in self.envelopes]
        out = build_bundle(
            self.envelopes[index],
            log_index=index,
            integrated_time="2026-01-01T00:00:00Z",
            leaf_hashes=hashes,
            checkpoint=self.checkpoint(),
            keys=self.keys,
        )
        if consistency_from:
            out["consistency_proof"] = {
                "first": consistency_from,
                "second": len(hashes),
                "hashes": [h.hex() for h in merkle.consistency_proof(consistency_from, hashes)],
            }
        return out

    def keys_file(self, path):
        path.write_text(json.dumps(self.keys))
        return path


@pytest.fixture
def audited(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"call_id": "a"}\n{"call_id": "b"}\n')
    log = Log()
    index = log.add("run.jsonl", file_sha256(path))
    log.add("later.jsonl", "11" * 32)
    bundle_path = tmp_path / "cert.json"
    bundle_path.write_text(json.dumps(log.bundle(index)))
    return log, index, path, bundle_path


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "workers.verify", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_good_bundle_verifies_with_its_file(audited, tmp_path):
    log, _, path, bundle = audited
    out = cli(bundle, "--file", path, "--keys", log.keys_file(tmp_path / "keys.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "VERIFIED" and "FAIL" not in out.stdout
    assert "PASS  subjects" in out.stdout and "PASS  inclusion" in out.stdout and "PASS  trust" in out.stdout


def test_without_a_pinned_key_set_a_good_bundle_is_only_unpinned(audited):
    _, _, path, bundle = audited
    out = cli(bundle, "--file", path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "UNPINNED" and "WARN  trust" in out.stdout
    assert "not verified against a key set you trust" in out.stderr and "--pin-keys" in out.stderr


def _forged_bundle(tmp_path, audited_file):
    """What an attacker makes: a fresh key, a one-entry log, the key put in the bundle."""
    forger = Log(n_before=0)
    index = forger.add(audited_file.name, file_sha256(audited_file))
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(forger.bundle(index)))
    return path


def test_a_self_keyed_forged_bundle_is_refused_pinned_or_not(audited, tmp_path, monkeypatch):
    log, _, path, _ = audited
    forged = _forged_bundle(tmp_path, path)
    out = cli(forged, "--file", path)  # nothing pinned: the forgery's own keys are all there is
    assert out.returncode == 3 and "VERIFIED" not in out.stdout.replace("NOT VERIFIED", "")
    out = cli(forged, "--file", path, "--keys", log.keys_file(tmp_path / "keys.json"))
    assert out.returncode == 3 and out.stdout.splitlines()[-1] == "UNPINNED"
    assert "does not hold" in out.stdout
    # pinned once in the config dir: same refusal without --keys, and the genuine bundle verifies without it
    assert cli("--pin-keys", tmp_path / "keys.json").returncode == 0
    assert cli(forged, "--file", path).returncode == 3
    genuine = tmp_path / "genuine.json"
    genuine.write_text(json.dumps(log.bundle(3)))
    out = cli(genuine, "--file", path)
    assert out.returncode == 0 and "(pinned)" in out.stdout, out.stdout + out.stderr
    # and through the environment variable
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "elsewhere"))
    assert cli(genuine, "--file", path).returncode == 3
    monkeypatch.setenv("AUDIT_VERIFY_KEYS", str(tmp_path / "keys.json"))
    out = cli(genuine, "--file", path)
    assert out.returncode == 0 and "AUDIT_VERIFY_KEYS" in out.stdout


def test_key_rotation_keeps_old_certificates_verifiable_and_pinning_merges(tmp_path):
    log = Log(n_before=1)
    old_cert = tmp_path / "old.json"
    old_cert.write_text(json.dumps(log.bundle(0)))
    assert cli("--pin-keys", log.keys_file(tmp_path / "k1.json")).returncode == 0
    # the portal rotates: a new active key, the old one retired but still published
    old_entry = {**log.keys["keys"][0], "status": "retired", "retired_at": "2026-02-01T00:00:00Z"}
    log.key = K.generate()
    log.kid = K.key_id(log.key.public_key())
    log.keys = {"keys": [old_entry, K.key_entry(log.key.public_key())]}
    new_cert = tmp_path / "new.json"
    new_cert.write_text(json.dumps(log.bundle(log.add("new.jsonl", "33" * 32))))
    out = cli(new_cert)
    assert out.returncode == 3 and "rotated" in out.stdout  # the new key is not pinned yet
    # the old certificate's bundle (old checkpoint, old key) still verifies against the pin
    assert cli(old_cert).returncode == 0
    out = cli("--pin-keys", log.keys_file(tmp_path / "k2.json"))
    assert out.returncode == 0 and "1 new key(s)" in out.stdout and "(2 in all)" in out.stdout
    assert cli(new_cert).returncode == 0 and cli(old_cert).returncode == 0
    pinned = json.loads((tmp_path / "config" / "audit-portal" / "trusted-keys.json").read_text())
    assert [k["status"] for k in pinned["keys"]] == ["retired", "active"]
    # a later pin that lacks the old key does not drop it
    only_new = tmp_path / "k3.json"
    only_new.write_text(json.dumps({"keys": [log.keys["keys"][1]]}))
    assert "0 new key(s)" in cli("--pin-keys", only_new).stdout.replace("pinned 0", "0")
    assert cli(old_cert).returncode == 0


def test_pinned_checkpoint_proves_the_log_only_grew(tmp_path):
    log = Log(n_before=4)
    keys = log.keys_file(tmp_path / "keys.json")
    since = tmp_path / "since.json"
    since.write_text(json.dumps(log.checkpoint()))  # saved when the log had 4 entries
    index = log.add("later.jsonl", "44" * 32)
    log.add("later2.jsonl", "55" * 32)
    b = tmp_path / "b.json"
    b.write_text(json.dumps(log.bundle(index, consistency_from=4)))
    out = cli(b, "--keys", keys, "--since", since)
    assert out.returncode == 0 and "PASS  consistency" in out.stdout, out.stdout + out.stderr
    # without a proof in the bundle: said how to get one
    b.write_text(json.dumps(log.bundle(index)))
    out = cli(b, "--keys", keys, "--since", since)
    assert out.returncode == 1 and "consistency_from=4" in out.stderr
    # the key holder rewrites entry 1 and re-signs every checkpoint: every signature verifies, consistency fails
    log.envelopes[1] = log._sign("rewritten", "66" * 32)
    b.write_text(json.dumps(log.bundle(index, consistency_from=4)))
    out = cli(b, "--keys", keys)
    assert out.returncode == 0  # nothing pinned to compare with: the rewrite is invisible
    out = cli(b, "--keys", keys, "--since", since)
    assert out.returncode == 1 and "FAIL  consistency" in out.stdout and "were rewritten" in out.stdout
    assert "PASS  signature" in out.stdout and "PASS  inclusion" in out.stdout


def test_save_checkpoint_pins_it_for_the_next_run(tmp_path):
    log = Log(n_before=2)
    keys = log.keys_file(tmp_path / "keys.json")
    b = tmp_path / "b.json"
    b.write_text(json.dumps(log.bundle(1)))
    out = cli(b, "--keys", keys, "--save-checkpoint")
    assert out.returncode == 0 and "pinned the checkpoint" in out.stderr
    log.add("x.jsonl", "77" * 32)
    b.write_text(json.dumps(log.bundle(2, consistency_from=2)))
    out = cli(b, "--keys", keys)  # the saved checkpoint is used without --since
    assert out.returncode == 0 and "PASS  consistency" in out.stdout and "tree size 2" in out.stdout
    log.envelopes[0] = log._sign("rewritten", "88" * 32)
    b.write_text(json.dumps(log.bundle(2, consistency_from=2)))
    assert cli(b, "--keys", keys).returncode == 1


def test_changed_audited_file_fails_the_subjects_check(audited, tmp_path):
    log, _, path, bundle = audited
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01
    path.write_bytes(bytes(data))
    out = cli(bundle, "--file", path, "--keys", log.keys_file(tmp_path / "keys.json"))
    assert out.returncode == 1
    assert "verification failed: subjects:" in out.stderr and "is not a subject" in out.stderr
    assert "FAIL  subjects" in out.stdout and "PASS  signature" in out.stdout


def _payload_tampered(bundle: dict) -> dict:
    b = copy.deepcopy(bundle)
    payload = bytearray(base64.b64decode(b["envelope"]["payload"]))
    payload[payload.index(b"run.jsonl")] ^= 0x20  # 'r' -> 'R': one byte of the signed statement
    b["envelope"]["payload"] = base64.b64encode(bytes(payload)).decode()
    return b


def test_one_changed_byte_of_the_certificate_fails_signature_and_inclusion(audited, tmp_path):
    _, _, _, bundle_path = audited
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_payload_tampered(json.loads(bundle_path.read_text()))))
    out = cli(bad)
    assert out.returncode == 1
    assert "FAIL  signature" in out.stdout and "FAIL  inclusion" in out.stdout
    assert "verification failed: signature:" in out.stderr


def test_wrong_proof_or_checkpoint_fails_inclusion_or_checkpoint(audited, tmp_path):
    log, index, _, bundle_path = audited
    bundle = json.loads(bundle_path.read_text())
    b = copy.deepcopy(bundle)
    h = bytearray.fromhex(b["inclusion_proof"]["hashes"][0])
    h[0] ^= 0x80
    b["inclusion_proof"]["hashes"][0] = h.hex()
    p = tmp_path / "b1.json"
    p.write_text(json.dumps(b))
    out = cli(p)
    assert out.returncode == 1 and "FAIL  inclusion" in out.stdout and "PASS  signature" in out.stdout

    # a checkpoint signed by someone else
    other = Log()
    ck = tmp_path / "ck.json"
    ck.write_text(json.dumps(other.bundle(0)["checkpoint"]))
    out = cli(bundle_path, "--log-checkpoint", ck)
    assert out.returncode == 1 and "FAIL  checkpoint" in out.stdout

    # a genuine later checkpoint of the same log: the bundle's proof is for another size, said so
    log.add("even-later.jsonl", "22" * 32)
    ck.write_text(json.dumps(log.bundle(index)["checkpoint"]))
    out = cli(bundle_path, "--log-checkpoint", ck)
    assert out.returncode == 1 and "FAIL  inclusion" in out.stdout and "tree size" in out.stdout
    fresh = tmp_path / "fresh.json"
    fresh.write_text(json.dumps(log.bundle(index)))
    assert cli(fresh, "--log-checkpoint", ck, "--keys", log.keys_file(tmp_path / "keys.json")).returncode == 0


def test_a_key_set_the_user_trusts_overrides_the_bundle(audited, tmp_path):
    _, _, _, bundle_path = audited
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(Log().keys))  # a different key: the bundle's signature is not by it
    out = cli(bundle_path, "--keys", keys, "--json")
    report = json.loads(out.stdout)
    # under the trusted set the signature and checkpoint fail; they verify only under the bundle's own keys
    assert out.returncode == 3 and report["verdict"] == "UNPINNED" and not report["ok"]
    assert [c["state"] for c in report["checks"] if c["name"] == "trust"] == ["unpinned"]
    assert verify_bundle(json.loads(bundle_path.read_text()), keys=Log().keys).verdict == "UNPINNED"
    tampered = _payload_tampered(json.loads(bundle_path.read_text()))  # and a broken one under either is NOT VERIFIED
    report = verify_bundle(tampered, keys=Log().keys)
    assert report.verdict == "NOT VERIFIED" and {"signature", "checkpoint"} <= {c.name for c in report.failed}


def test_forged_key_entry_is_refused(audited):
    log, index, _, _ = audited
    bundle = log.bundle(index)
    bundle["keys"]["keys"][0]["key_id"] = "ab" * 32
    report = verify_bundle(bundle)
    assert report.check("keys").state == "failed" and "not the SHA-256" in report.check("keys").message


@given(hs.data())
@settings(max_examples=30, deadline=None)
def test_any_single_bit_flip_in_the_signed_bytes_fails(data):
    log = Log(n_before=1)
    index = log.add("x.jsonl", "ab" * 32)
    bundle = log.bundle(index)
    assert verify_bundle(bundle, keys=log.keys).ok
    which = data.draw(hs.sampled_from(["payload", "sig", "leaf", "proof"]))
    b = copy.deepcopy(bundle)
    if which in ("payload", "sig"):
        target = b["envelope"] if which == "payload" else b["envelope"]["signatures"][0]
        key = "payload" if which == "payload" else "sig"
        raw = bytearray(base64.b64decode(target[key]))
        bit = data.draw(hs.integers(0, len(raw) * 8 - 1))
        raw[bit // 8] ^= 1 << (bit % 8)
        target[key] = base64.b64encode(bytes(raw)).decode()
        expect = "signature"
    else:
        field = b["log_entry"] if which == "leaf" else b["inclusion_proof"]
        raw = bytearray.fromhex(field["leaf_hash"] if which == "leaf" else field["hashes"][0])
        bit = data.draw(hs.integers(0, 255))
        raw[bit // 8] ^= 1 << (bit % 8)
        if which == "leaf":
            field["leaf_hash"] = raw.hex()
        else:
            field["hashes"][0] = raw.hex()
        expect = "inclusion"
    report = verify_bundle(b, keys=log.keys)
    assert not report.ok and expect in {c.name for c in report.failed}


def test_verifier_imports_no_django():
    code = (
        "import sys, workers.verify, workers.verify.__main__; "
        "bad = [m for m in sys.modules if m == 'django' or m.startswith('django.')]; "
        "assert not bad, bad; print('clean')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr


def test_unreadable_input_exits_2(tmp_path):
    out = cli(tmp_path / "missing.json")
    assert out.returncode == 2 and "cannot read" in out.stderr
