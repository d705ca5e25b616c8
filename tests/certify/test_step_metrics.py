"""Per-step mismatch metrics of the certificate engine (workers/certify/step_metrics.py) against direct numpy
computations of the definitions trainers use (verl rollout_corr: kl, k3_kl, chi2_token, ppl_ratio; TIS/MIS)."""

import numpy as np
import orjson
import pytest

from workers.certify.file import certify_file
from workers.certify.step_metrics import PER_DECADE
from workers.fcr.synth import SynthConfig, iter_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    recs = list(iter_run(SynthConfig(trajectories=40, seed=11, response_len=(8, 80), spike_rate=0.02, steps=4)))
    pol = [r for r in recs if r["role"] == "policy"]
    pol[3]["trainer"]["logprobs"][0] = None  # a DATA_ERROR sequence: excluded from the metrics
    path = tmp_path_factory.mktemp("m") / "run.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return path, [r for i, r in enumerate(pol) if i != 3]


def expected(recs):
    a = [np.asarray(r["rollout"]["logprobs"], float) for r in recs]
    b = [np.asarray(r["trainer"]["logprobs"], float) for r in recs]
    d = np.concatenate([y - x for x, y in zip(a, b)])
    rho = np.exp(np.clip(d, -20, 20))
    mis_seq = [
        ((np.exp(np.clip(y - x, -20, 20)) < 0.5) | (np.exp(np.clip(y - x, -20, 20)) > 2)).any() for x, y in zip(a, b)
    ]
    return {
        "abs_diff_mean": np.abs(d).mean(),
        "abs_diff_max": np.abs(d).max(),
        "k1": (-d).mean(),
        "k2": (0.5 * d * d).mean(),
        "k3": (rho - 1 - np.clip(d, -20, 20)).mean(),
        "chi2": (rho**2).mean() - 1,
        "training_ppl": np.mean([np.exp(-y.mean()) for y in b]),
        "rollout_ppl": np.mean([np.exp(-x.mean()) for x in a]),
        "ppl_ratio": np.mean([np.exp(x.mean() - y.mean()) for x, y in zip(a, b)]),
        "is_weight_mean": rho.mean(),
        "is_weight_max": rho.max(),
        "is_weight_min": rho.min(),
        "is_weight_std": rho.std(),
        "tis_clip_rate": (rho > 2).mean(),
        "mis_mask_rate": ((rho < 0.5) | (rho > 2)).mean(),
        "mis_seq_mask_rate": np.mean(mis_seq),
        "tokens": len(d),
        "_abs": np.abs(d),
    }


def check(got, want):
    for k, v in want.items():
        if k.startswith("_"):
            continue
        assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    tol = 10 ** (1 / PER_DECADE)  # one log bin
    for q, key in ((0.5, "abs_diff_p50"), (0.99, "abs_diff_p99")):
        exact = np.quantile(want["_abs"], q, method="inverted_cdf")  # the smallest value with CDF >= q
        assert exact / tol <= got[key] <= exact * tol, (key, got[key], exact)


def test_run_and_step_metrics_equal_the_definitions(run):
    path, recs = run
    cert = certify_file(path, chunk_tokens=700)  # several chunks: steps accumulate across them
    check(cert["summary"]["metrics"], expected(recs))
    assert cert["summary"]["metrics"]["mis_mask_rate"] > 0  # the spikes are visible
    by_step = {s["step"]: s["metrics"] for s in cert["steps"]}
    for step in {r["step"] for r in recs}:
        check(by_step[step], expected([r for r in recs if r["step"] == step]))
    assert cert["summary"]["metrics_options"]["tis_cap"] == 2.0


def test_metrics_do_not_depend_on_chunking(run):
    path, _ = run
    a, b = certify_file(path, chunk_tokens=300), certify_file(path, chunk_tokens=1 << 16)
    assert a["summary"]["metrics"] == b["summary"]["metrics"]  # bit for bit: sums are per sequence, in file order
    assert [s["metrics"] for s in a["steps"]] == [s["metrics"] for s in b["steps"]]
