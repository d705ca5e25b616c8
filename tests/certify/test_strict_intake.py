"""Strict intake of the certificate engine: wrong JSON types are refused with the field named (never read as numbers),
negative ids other than the −1 padding are refused, a trainer list that misses rollout ids is warned about, and data
that no distribution within the declared precision can produce is a DATA_ERROR — with no tolerance that certifies it
from one reading."""

import json
import math

import orjson
import pytest

from workers.certify.file import certify_file
from workers.certify.intervals import ERR_MASS, ERR_SAMPLED_MISMATCH, DataError, tv_interval, tv_interval_batch

L = math.log
GOOD = {
    "step": 1,
    "call_id": "good",
    "trajectory_id": "t",
    "role": "policy",
    "response": {"token_ids": [1, 2]},
    "rollout": {"logprobs": [-0.01, -0.02], "top_k": [[[1, -0.01], [7, -5.0]], [[2, -0.02], [7, -4.0]]]},
    "trainer": {"logprobs": [-0.011, -0.02], "top_k": [[[1, -0.011], [7, -5.1]], [[2, -0.02], [7, -4.1]]]},
}


def rec(call_id, path, value):
    r = json.loads(json.dumps(GOOD))
    cur = r
    parts = path.split(".")
    for p in parts[:-1]:
        cur = cur[p]
    cur[parts[-1]] = value
    r["call_id"] = call_id
    return r


def certify(tmp_path, records, **kw):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return certify_file(path, precision="exact", **kw)


BAD = [
    ("bool-lp", "trainer.logprobs", [False, -0.02], "trainer.logprobs[0]", "bool"),
    ("str-lp", "rollout.logprobs", ["-0.5", -0.02], "rollout.logprobs[0]", "str"),
    ("bool-topk-lp", "rollout.top_k", [[[1, -0.01], [7, True]], [[2, -0.02]]], "rollout.top_k[0][1]", "number"),
    ("str-topk-id", "trainer.top_k", [[["1", -0.011]], [[2, -0.02]]], "trainer.top_k[0][0]", "int"),
    ("neg-id", "trainer.top_k", [[[1, -0.011], [-5, -3.0]], [[2, -0.02]]], "trainer.top_k[0][1]", "-5"),
    ("bool-id", "rollout.top_k", [[[True, -0.01]], [[2, -0.02]]], "rollout.top_k[0][0]", "int"),
    # response ids go through the format's own id check: a JSON true or 1.0 is not token 1
    ("bool-token", "response.token_ids", [True, 2], "response.token_ids[0]", "bool"),
    ("float-token", "response.token_ids", [1, 2.0], "response.token_ids[1]", "float"),
    ("neg-token", "response.token_ids", [1, -2], "response.token_ids[1]", "-2"),
]


@pytest.mark.parametrize("cid,path,value,field,word", BAD, ids=[b[0] for b in BAD])
def test_wrong_json_types_are_refused_with_the_field_named(tmp_path, cid, path, value, field, word):
    cert = certify(tmp_path, [GOOD, rec(cid, path, value)])
    errs = {e["call_id"]: e["reason"] for e in cert["errors"]}
    assert cid in errs, cert["errors"]
    assert field in errs[cid] and word in errs[cid], errs[cid]
    assert cert["summary"]["sequences_certified"] == 1  # the good record is still certified


def test_padding_id_minus_one_is_still_accepted(tmp_path):
    padded = rec("pad", "trainer.top_k", [[[1, -0.011], [7, -5.1], [-1, 0.0]], [[2, -0.02], [7, -4.1], [-1, 0.0]]])
    cert = certify(tmp_path, [padded])
    assert cert["errors"] == [] and cert["summary"]["sequences_certified"] == 1


def test_trainer_list_missing_rollout_ids_is_warned(tmp_path):
    short = rec("short", "trainer.top_k", [[[1, -0.011]], [[2, -0.02], [7, -4.1]]])
    cert = certify(tmp_path, [GOOD, short])
    warn = [c for c in cert["caveats"] if "misses ids of rollout.top_k" in c]
    assert len(warn) == 1 and "1 sequence(s)" in warn[0] and "call short" in warn[0] and "1 position(s)" in warn[0]
    assert cert["summary"]["sequences_certified"] == 2  # looser, not refused
    assert not any("misses ids" in c for c in certify(tmp_path, [GOOD])["caveats"])


# ---- tolerances: the declared precision is the whole allowance ---------------------------------------------------


def test_listed_mass_above_one_is_a_data_error_however_small_the_excess():
    # p lists 0.6 + 0.4 + 5e-5: Σ = 1 + 5e-5 — no distribution has it. (The old 1e-4 slack certified this.)
    for excess in (5e-5, 1e-7, 1e-9):
        with pytest.raises(DataError) as exc:
            tv_interval([0, 1, 2], [L(0.6), L(0.4), L(excess)], [], [], 0, L(0.6), L(0.6))
        assert exc.value.flags & ERR_MASS
    # exactly 1 in decimal (rounding of the sum only) stays certifiable
    lo, hi = tv_interval([0, 1, 2], [L(0.5), L(0.3), L(0.2)], [], [], 0, L(0.5), L(0.5))
    assert 0.0 <= lo <= hi <= 1.0


def test_two_readings_of_one_token_that_disagree_are_a_data_error():
    # the sampled token's own log-prob and its list entry differ by 5e-6 (the old 1e-5 slack certified this)
    with pytest.raises(DataError) as exc:
        tv_interval([0, 1], [L(0.5), L(0.25)], [], [], 0, L(0.5) + 5e-6, L(0.5))
    assert exc.value.flags & ERR_SAMPLED_MISMATCH
    assert tv_interval([0, 1], [L(0.5), L(0.25)], [], [], 0, L(0.5), L(0.5))[1] <= 0.5


def test_declared_precision_still_absorbs_an_excess_it_explains():
    import torch

    # the same 5e-6 disagreement is within fp32 storage η (2^-16 normalisation slack + u·|ℓ|): certified, widened
    ids = torch.tensor([[[0, 1]]])
    lps = torch.tensor([[[L(0.5), L(0.25)]]], dtype=torch.float64)
    a = torch.tensor([[L(0.5) + 5e-6]], dtype=torch.float64)
    b = torch.tensor([[L(0.5)]], dtype=torch.float64)
    y = torch.tensor([[0]])
    lo, hi, err = tv_interval_batch(ids, lps, ids, lps.clone(), y, a, b, precision="fp32", return_status=True)
    assert int(err[0, 0]) == 0 and float(hi[0, 0]) < 1.0
    lo, hi, err = tv_interval_batch(ids, lps, ids, lps.clone(), y, a, b, precision="exact", return_status=True)
    assert int(err[0, 0]) & ERR_SAMPLED_MISMATCH and float(hi[0, 0]) == 1.0
