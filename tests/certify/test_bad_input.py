"""Bad input fails closed: the single-position API raises DataError with the reason, the batch API flags the
position (TV ∈ [0, 1]), and certify_file turns each bad record into a DATA_ERROR sequence naming line, call_id and
reason while the good records are still certified."""

import gzip
import json
import math

import orjson
import pytest
import torch

from workers.certify.file import certify_file
from workers.certify.intervals import (
    ERR_DUPLICATE,
    ERR_MASS,
    ERR_NONFINITE,
    ERR_POSITIVE,
    ERR_SAMPLED_ABOVE_CAP,
    ERR_SAMPLED_MISMATCH,
    ERR_UNSORTED,
    DataError,
    tv_interval,
    tv_interval_batch,
)

L = math.log


@pytest.mark.parametrize(
    "args,flag",
    [
        (([0, 1], [L(0.25), L(0.5)], [], [], 0, L(0.25), L(0.2)), ERR_UNSORTED),
        (([0, 0], [L(0.5), L(0.25)], [], [], 0, L(0.5), L(0.2)), ERR_DUPLICATE),
        (([], [], [3, 3], [L(0.3), L(0.3)], 0, L(0.5), L(0.2)), ERR_DUPLICATE),
        (([0, 1], [0.2, L(0.25)], [], [], 0, 0.2, L(0.2)), ERR_POSITIVE),
        (([], [], [], [], 0, L(0.5), 0.3), ERR_POSITIVE),
        (([0, 1], [float("nan"), L(0.25)], [], [], 2, L(0.1), L(0.2)), ERR_NONFINITE),
        (([], [], [], [], 0, float("nan"), L(0.2)), ERR_NONFINITE),
        (([0, 1], [L(0.5), L(0.25)], [], [], 0, L(0.4), L(0.4)), ERR_SAMPLED_MISMATCH),
        (([0, 1], [L(0.5), L(0.25)], [], [], 7, L(0.3), L(0.3)), ERR_SAMPLED_ABOVE_CAP),
        (([0, 1, 2], [L(0.6), L(0.5), L(0.4)], [], [], 0, L(0.6), L(0.2)), ERR_MASS),
    ],
)
def test_single_position_raises_with_reason(args, flag):
    with pytest.raises(DataError) as exc:
        tv_interval(*args)
    assert exc.value.flags & flag
    assert exc.value.reasons


def test_misaligned_tensors_raise():
    with pytest.raises(ValueError):
        tv_interval_batch(
            torch.zeros(2, 3, 4, dtype=torch.int64),
            torch.zeros(2, 3, 4),
            torch.zeros(2, 3, 4, dtype=torch.int64),
            torch.zeros(2, 3, 4),
            torch.zeros(2, 2, dtype=torch.int64),
            torch.zeros(2, 2),
            torch.zeros(2, 2),
        )
    with pytest.raises(ValueError):
        tv_interval([0, 1], [L(0.5)], [], [], 0, L(0.5), L(0.5))


def test_batch_fails_closed_per_position():
    ids = torch.tensor([[[0, 1], [0, 1]]])
    lps = torch.tensor([[[L(0.5), L(0.25)], [L(0.25), L(0.5)]]], dtype=torch.float64)  # second position unsorted
    y = torch.tensor([[0, 0]])
    a = torch.tensor([[L(0.5), L(0.25)]], dtype=torch.float64)
    b = a.clone()  # trainer identical: only the list order is wrong
    lo, hi, err = tv_interval_batch(ids, lps, ids, lps.clone(), y, a, b, return_status=True)
    assert int(err[0, 0]) == 0 and int(err[0, 1]) & ERR_UNSORTED
    assert float(lo[0, 1]) == 0.0 and float(hi[0, 1]) == 1.0


GOOD = {
    "step": 1,
    "call_id": "good",
    "trajectory_id": "t",
    "role": "policy",
    "response": {"token_ids": [1, 2]},
    "rollout": {"logprobs": [-0.01, -0.02]},
    "trainer": {"logprobs": [-0.011, -0.02]},
}


def rec(**over):
    r = json.loads(json.dumps(GOOD))
    for k, v in over.items():
        cur = r
        parts = k.split(".")
        for p_ in parts[:-1]:
            cur = cur[p_]
        if v is KeyError:
            del cur[parts[-1]]
        else:
            cur[parts[-1]] = v
    return orjson.dumps(r).decode()


BAD_LINES = [
    ("pos", rec(call_id="pos", **{"rollout.logprobs": [-0.1, 0.5]}), "positive"),
    ("mis", rec(call_id="mis", **{"trainer.logprobs": [-0.1]}), "misaligned"),
    ("nul", rec(call_id="nul", **{"trainer.logprobs": [-0.1, None]}), "null"),
    ("sen", rec(call_id="sen", **{"rollout.logprobs": [-9999.0, -0.1]}), "sentinel"),
    ("notr", rec(call_id="notr", **{"trainer": KeyError}), "trainer"),
    ("uns", rec(call_id="uns", **{"rollout.top_k": [[[5, -2.0], [1, -0.01]], [[2, -0.02]]]}), "sorted"),
    ("dup", rec(call_id="dup", **{"trainer.top_k": [[[1, -0.011], [1, -0.011]], [[2, -0.02]]]}), "duplicate"),
    ("tkm", rec(call_id="tkm", **{"rollout.top_k": [[[1, -0.01]]]}), "misaligned"),
    ("nid", rec(call_id="nid", **{"response.token_ids": [1, "x"]}), "token_ids"),
]


def write(path, lines, gz=False):
    data = ("\n".join(lines) + "\n").encode()
    if gz:
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def test_certify_file_names_every_bad_record(tmp_path):
    lines = [rec()] + [ln for _, ln, _ in BAD_LINES] + ["{not json", "[1, 2]", rec(call_id="good2")]
    sink = []
    cert = certify_file(write(tmp_path / "bad.jsonl", lines), sequence_sink=sink.extend)
    errs = {e["call_id"]: e for e in cert["errors"]}
    for i, (cid, _, word) in enumerate(BAD_LINES):
        assert cid in errs, cid
        assert errs[cid]["line"] == i + 2
        assert word in errs[cid]["reason"].lower(), (cid, errs[cid]["reason"])
    by_line = {e["line"]: e for e in cert["errors"]}
    assert "json" in by_line[len(BAD_LINES) + 2]["reason"].lower()
    assert "object" in by_line[len(BAD_LINES) + 3]["reason"].lower()
    s = cert["summary"]
    assert s["status_counts"]["sequences"]["DATA_ERROR"] == len(BAD_LINES) + 2 == s["data_errors"]
    assert s["sequences_certified"] == 2
    seqs = {d["call_id"]: d for d in sink if d["call_id"]}
    assert seqs["good"]["status"] != "DATA_ERROR" and seqs["good2"]["status"] != "DATA_ERROR"
    assert all(seqs[c]["status"] == "DATA_ERROR" and not seqs[c]["accept"] for c, _, _ in BAD_LINES)
    json.dumps(cert, allow_nan=False)
    assert any("DATA_ERROR" in c for c in cert["caveats"])


def test_truncated_gzip_is_reported_not_raised(tmp_path):
    lines = [rec(call_id=f"c{i}") for i in range(200)]
    full = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "trunc.jsonl.gz"
    path.write_bytes(full[: len(full) // 2])
    cert = certify_file(path)
    assert cert["summary"]["data_errors"] >= 1
    assert any("truncated" in e["reason"] for e in cert["errors"])
