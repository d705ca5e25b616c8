"""Numbers of any size canonicalise, sign and round-trip (RFC 8785 refuses integers beyond ±(2^53 − 1) as such)."""

from __future__ import annotations

import json
import math

import pytest

from workers.verify import dsse, jcs, keys as K


@pytest.mark.parametrize(
    "value",
    [
        math.exp(40),
        2.0**53,
        2**53,
        2**53 + 1,
        -(2**60),
        -(2.0**60),
        1e300,
        12345678901234567890123,
        2**53 - 1,
        -(2**53 - 1),
        0.1,
    ],
)
def test_a_number_round_trips_through_its_canonical_bytes(value):
    data = jcs.canonical({"x": value, "n": [value]})
    assert jcs.canonical(json.loads(data)) == data  # what the verifier re-canonicalises is what was signed
    key = K.generate()
    env = dsse.sign(data, "t", key, K.key_id(key.public_key()))
    assert dsse.verify(env, {K.key_id(key.public_key()): key.public_key()})[1] == data


def test_floats_keep_their_ecmascript_form_and_big_integers_lose_no_digit():
    assert jcs.canonical(math.exp(40)) == b"235385266837020000"
    assert jcs.canonical(235385266837020000) == b"235385266837020000"  # the same double, read back as an int
    assert jcs.canonical(2**53 + 1) == b'"9007199254740993"'  # no double is written so: kept exactly, as text
    assert jcs.canonical(2**53 - 1) == b"9007199254740991" and jcs.canonical(True) == b"true"
