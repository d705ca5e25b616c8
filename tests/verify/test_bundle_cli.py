"""DSSE/PAE, statements, bundles and the offline verifier ``python -m workers.verify`` (run as a subprocess, the
way a user runs it): a good bundle verifies; one changed byte in the envelope, the proof, the checkpoint or an
audited file fails with the failing check named; and the package never imports Django."""
from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as hs

from workers.verify import (build_bundle, checkpoint, dsse, envelope_leaf, file_sha256, jcs, keys as K, merkle,
                            sign_statement, statement as st, verify_bundle)

ROOT = Path(__file__).resolve().parents[2]


def test_pae_matches_the_dsse_specification_example():
    # DSSE protocol.md: PAE("http://example.com/HelloWorld", "hello world")
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


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
        return sign_statement(st.statement([st.subject(name, digest)], st.RUN_CERTIFICATE_PREDICATE, {"name": name}),
                              self.key, self.kid)

    def add(self, name, digest):
        self.envelopes.append(self._sign(name, digest))
        return len(self.envelopes) - 1

    def bundle(self, index):
        hashes = [merkle.leaf_hash(envelope_leaf(e)) for e in self.envelopes]
        ck = checkpoint.sign("test-log", len(hashes), merkle.root(hashes), "2026-01-01T00:00:00Z", self.key, self.kid)
        return build_bundle(self.envelopes[index], log_index=index, integrated_time="2026-01-01T00:00:00Z",
                            leaf_hashes=hashes, checkpoint=ck, keys=self.keys)


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
    return subprocess.run([sys.executable, "-m", "workers.verify", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_good_bundle_verifies_with_its_file(audited):
    _, _, path, bundle = audited
    out = cli(bundle, "--file", path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "VERIFIED" in out.stdout and "FAIL" not in out.stdout
    assert "PASS  subjects" in out.stdout and "PASS  inclusion" in out.stdout


def test_changed_audited_file_fails_the_subjects_check(audited):
    _, _, path, bundle = audited
    data = bytearray(path.read_bytes())
    data[3] ^= 0x01
    path.write_bytes(bytes(data))
    out = cli(bundle, "--file", path)
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
    assert cli(fresh, "--log-checkpoint", ck).returncode == 0


def test_a_key_set_the_user_trusts_overrides_the_bundle(audited, tmp_path):
    _, _, _, bundle_path = audited
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(Log().keys))  # a different key: the bundle's signature is not by it
    out = cli(bundle_path, "--keys", keys, "--json")
    report = json.loads(out.stdout)
    assert out.returncode == 1 and {"signature", "checkpoint"} <= set(report["failed"])


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
    assert verify_bundle(bundle).ok
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
    report = verify_bundle(b)
    assert not report.ok and expect in {c.name for c in report.failed}


def test_verifier_imports_no_django():
    code = ("import sys, workers.verify, workers.verify.__main__; "
            "bad = [m for m in sys.modules if m == 'django' or m.startswith('django.')]; "
            "assert not bad, bad; print('clean')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr


def test_unreadable_input_exits_2(tmp_path):
    out = cli(tmp_path / "missing.json")
    assert out.returncode == 2 and "cannot read" in out.stderr
