"""C2SP signed notes, checkpoints and cosignatures (workers/verify/note.py) against the published vectors of Go's
golang.org/x/mod/sumdb/note (note_test.go: the PeterNeumann key pair and its signed note). Ed25519 is deterministic,
so signing the vector's text with its key must give its note byte for byte: a Go verifier then accepts ours."""

from __future__ import annotations

import base64

import pytest

from workers.verify import note

VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
SIGNED = (
    TEXT
    + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


def test_the_go_vector_keys_parse_and_derive_each_other():
    v = note.parse_verifier(VKEY)
    name, private, alg = note.parse_signer(SKEY)
    assert (v.name, v.key_hash.hex(), v.alg) == ("PeterNeumann", "c74f20a3", 0x01) and (name, alg) == (v.name, 1)
    assert note.verifier_key(name, private.public_key()) == VKEY
    assert note.signer_key(name, private) == SKEY
    # manglings of the verifier key are refused (as Go's TestNewVerifier)
    for bad in (
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TX",
        "PeterNeumann+c74f20a3+BRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        VKEY[:-1],
        VKEY + "+x",
    ):
        with pytest.raises((note.NoteError, ValueError)):
            note.parse_verifier(bad)


def test_signing_the_go_vector_gives_its_note_byte_for_byte_and_it_opens():
    name, private, _ = note.parse_signer(SKEY)
    assert note.sign(TEXT, name, private) == SIGNED
    text, good = note.open_note(SIGNED, [note.parse_verifier(VKEY)])
    assert text == TEXT and [g.text for g in good] == [VKEY]


def test_open_follows_go_semantics():
    v = note.parse_verifier(VKEY)
    with pytest.raises(note.NoteError, match="does not verify"):  # text changed under a known key
        note.open_note(SIGNED.replace("cryptography", "cryptographY"), [v])
    other = note.parse_verifier(note.verifier_key("Other", note.parse_signer(SKEY)[1].public_key()))
    with pytest.raises(note.NoteError, match="unverified"):  # only unknown keys signed
        note.open_note(SIGNED, [other])
    # an unknown signer beside a known one is ignored
    extra = SIGNED + "\u2014 Unknown AAAAAAAAAAAAAAAAAAAAAAAA\n"
    assert note.open_note(extra, [v])[0] == TEXT
    for malformed in (
        TEXT,
        TEXT + "\n",
        SIGNED[:-1],
        TEXT + "\nnot a signature\n",
        TEXT + "\n\u2014 PeterNeumann !!!\n",
        TEXT + "\n" + "\u2014 X AAAAAAAA\n" * 101,
    ):
        with pytest.raises(note.NoteError, match="malformed"):
            note.open_note(malformed, [v])


def test_a_checkpoint_note_round_trips_and_checks_its_origin():
    key = note.parse_signer(SKEY)[1]
    body = note.checkpoint_text("example.com/log", 12, b"\x07" * 32)
    assert body == "example.com/log\n12\n" + base64.b64encode(b"\x07" * 32).decode() + "\n"
    signed = note.sign(body, "example.com/log", key)
    parsed = note.open_checkpoint(signed, note.verifier("example.com/log", key.public_key()))
    assert (parsed["tree_size"], parsed["root_hash"], parsed["origin"]) == (12, b"\x07" * 32, "example.com/log")
    wrong_name = note.sign(body.replace("example.com/log", "other.org/log"), "example.com/log", key)
    with pytest.raises(note.NoteError, match="origin"):
        note.open_checkpoint(wrong_name, note.verifier("example.com/log", key.public_key()))
    for bad in ("o\n-1\nAAAA\n", "o\n01\n" + base64.b64encode(b"1" * 32).decode() + "\n", "o\n1\nAAAA\n", "o\n1\n"):
        with pytest.raises(note.NoteError):
            note.parse_checkpoint(bad)


def test_cosignatures_are_cosignature_v1_and_k_of_n_counts_only_pinned_witnesses():
    log_key, w1, w2, w3 = (note.parse_signer(SKEY)[1], *(note.Ed25519PrivateKey.generate() for _ in range(3)))
    signed = note.sign(note.checkpoint_text("example.com/log", 3, b"\1" * 32), "example.com/log", log_key)
    lines = [note.cosign(note.split(signed)[0], f"w{i}.example", k, 1700000000 + i) for i, k in enumerate((w1, w2, w3))]
    cosigned = note.add_signatures(signed, lines + lines[:1])
    assert cosigned.count("\u2014 w0.example ") == 1  # not repeated
    pinned = [note.verifier(f"w{i}.example", k.public_key(), note.ALG_COSIGNATURE_V1) for i, k in enumerate((w1, w2))]
    got = note.verify_cosignatures(cosigned, pinned)
    assert sorted(got.values()) == [1700000000, 1700000001]
    # the log signature still opens under Go semantics (cosignature keys are unknown to a note verifier)
    assert note.open_checkpoint(cosigned, note.verifier("example.com/log", log_key.public_key()))["tree_size"] == 3
    # the cosigned message binds the timestamp: a changed time fails
    raw = base64.b64decode(lines[0].split(" ")[-1])
    forged = note.signature_line("w0.example", raw[:4], (1800000000).to_bytes(8, "big") + raw[12:])
    with pytest.raises(note.NoteError, match="does not verify"):
        note.verify_cosignatures(signed + forged, pinned)
    # a cosignature key id is over type 0x04, so a note key of the same name and key is not one
    assert pinned[0].key_hash != note.verifier("w0.example", w1.public_key()).key_hash
