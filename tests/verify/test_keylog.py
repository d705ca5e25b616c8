"""The key history derived from the log (workers/verify/keylog.py): the first key is introduced by itself, a rotation
is signed by the outgoing key, a retirement by the retired key; anything else — a second introduction, a rotation
signed by the new key, a certificate signed by a key not active at its index, a table row the log did not
introduce — is a problem naming the entry and the key."""

from __future__ import annotations

from workers.verify import keylog, keys as K, sign_statement, statement as st

T = "2026-01-01T00:00:00Z"


def cert(key, name="c"):
    return sign_statement(
        st.statement([st.subject(name, "00" * 32)], st.RUN_CERTIFICATE_PREDICATE, {}), key, K.key_id(key.public_key())
    )


def test_introduce_rotate_retire_and_every_signer_checked():
    a, b = K.generate(), K.generate()
    ida, idb = K.key_id(a.public_key()), K.key_id(b.public_key())
    log = [
        keylog.sign_event("introduce", a.public_key(), a, previous_key_id=None, time=T),
        cert(a),
        keylog.sign_event("rotate", b.public_key(), a, previous_key_id=ida, time=T),
        cert(b),
        keylog.sign_event("retire", b.public_key(), b, previous_key_id=None, time=T),
    ]
    h = keylog.derive(enumerate(log))
    assert h.problems == []
    assert [(i, e) for i, e, _ in h.events] == [(0, "introduce"), (2, "rotate"), (4, "retire")]
    assert h.active is None and {k: v["status"] for k, v in h.keys.items()} == {ida: "retired", idb: "retired"}
    assert h.signer_at == {0: ida, 1: ida, 2: ida, 3: idb, 4: idb}
    assert set(K.parse_key_set(h.key_set())) == {ida, idb}  # the published format
    # nothing signs after the retirement
    h = keylog.derive(enumerate([*log, cert(b)]))
    assert h.problems and "entry 5" in h.problems[0] and "no key is active" in h.problems[0]


def test_a_key_cannot_enter_except_by_the_rules():
    a, evil = K.generate(), K.generate()
    ida, idevil = K.key_id(a.public_key()), K.key_id(evil.public_key())
    intro = keylog.sign_event("introduce", a.public_key(), a, previous_key_id=None, time=T)
    cases = {
        "second introduction": keylog.sign_event("introduce", evil.public_key(), evil, previous_key_id=None, time=T),
        "rotation signed by the new key": keylog.sign_event(
            "rotate", evil.public_key(), evil, previous_key_id=ida, time=T
        ),
        "certificate by an unknown key": cert(evil),
        "retirement of another key": keylog.sign_event("retire", evil.public_key(), a, previous_key_id=None, time=T),
    }
    for what, forged in cases.items():
        h = keylog.derive(enumerate([intro, forged, cert(a)]))
        assert len(h.problems) == 1, (what, h.problems)
        assert h.problems[0].startswith("entry 1:") and idevil in h.problems[0], (what, h.problems)
        assert h.active == ida and idevil not in h.keys, what  # the forged entry changed nothing
    # an introduction not signed by the key it introduces (someone else wrote it)
    h = keylog.derive(enumerate([keylog.sign_event("introduce", a.public_key(), evil, previous_key_id=None, time=T)]))
    assert h.problems and ida in h.problems[0] and not h.keys
    # a certificate before any key
    assert "no key is active" in keylog.derive(enumerate([cert(a)])).problems[0]


def test_the_key_table_is_compared_with_the_log():
    a, evil = K.generate(), K.generate()
    h = keylog.derive(enumerate([keylog.sign_event("introduce", a.public_key(), a, previous_key_id=None, time=T)]))
    good = K.key_entry(a.public_key())
    assert keylog.compare_table(h, [good]) == []
    stray = K.key_entry(evil.public_key())
    problems = keylog.compare_table(h, [good, stray])
    assert problems == [f"signing key {stray['key_id']} is in the key table but was never introduced through the log"]
    assert "retired, the log says active" in keylog.compare_table(h, [{**good, "status": "retired"}])[0]
    assert "public key differs" in keylog.compare_table(h, [{**good, "public_key": stray["public_key"]}])[0]


def _bundle_with_key_events(log, index, keys):
    from workers.verify import build_bundle, envelope_leaf, merkle

    hashes = [merkle.leaf_hash(envelope_leaf(e)) for e in log]
    signer = log[0]["signatures"][0]["keyid"]
    return (
        hashes,
        build_bundle(log[index], log_index=index, integrated_time=T, leaf_hashes=hashes, checkpoint=None, keys=keys)
        | {
            "key_events": [
                {"log_index": i, "envelope": e, "hashes": [h.hex() for h in merkle.inclusion_proof(i, hashes)]}
                for i, e in enumerate(log)
                if keylog.is_key_event(e)
            ]
        },
        signer,
    )


def test_the_offline_verifier_names_a_signer_the_log_did_not_introduce():
    from workers.verify import checkpoint, merkle, verify_bundle

    a, evil = K.generate(), K.generate()
    ida = K.key_id(a.public_key())
    log = [keylog.sign_event("introduce", a.public_key(), a, previous_key_id=None, time=T), cert(a), cert(evil)]
    # the key set the user pinned holds the attacker's key too (as if it had been published from a writable table)
    keys = {"keys": [K.key_entry(a.public_key()), K.key_entry(evil.public_key())]}
    for index, ok in ((1, True), (2, False)):
        hashes, b, _ = _bundle_with_key_events(log, index, keys)
        b["checkpoint"] = checkpoint.sign("o", len(hashes), merkle.root(hashes), T, a, ida)
        report = verify_bundle(b, keys=keys)
        if ok:
            assert report.verdict == "VERIFIED" and "every signer introduced in the log" in report.check("keys").message
        else:
            assert report.verdict == "NOT VERIFIED" and report.check("keys").state == "failed"
            assert K.key_id(evil.public_key()) in report.check("keys").message
            assert "never introduced" in report.check("keys").message
    # a key event whose inclusion proof does not hold against the checkpoint is refused
    hashes, b, _ = _bundle_with_key_events(log, 1, keys)
    b["checkpoint"] = checkpoint.sign("o", len(hashes), merkle.root(hashes), T, a, ida)
    b["key_events"][0]["hashes"][0] = "00" * 32
    assert "inclusion proof fails" in verify_bundle(b, keys=keys).check("keys").message
