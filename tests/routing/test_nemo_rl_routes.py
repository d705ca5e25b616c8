"""NeMo RL's data path end to end: a GRPO ``train_data`` batch shaped as NeMo RL builds it (client/tests/
nemo_rl_batch.py, written from its code) → ``integrations.nemo_rl.log_train_data`` → fcr-parquet/1 → format check and
routing audit. R3 without the trainer's routes is UNVERIFIABLE (NeMo RL does not hand them back), with them it is
PASS, and one flipped selection fails closed naming the call and the layer."""

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "client"), str(ROOT / "client" / "tests")]

from audit_portal_client import Client  # noqa: E402 - after the client folders are put on sys.path
from audit_portal_client.integrations.nemo_rl import log_train_data  # noqa: E402 - after the client folders are put on sys.path
from nemo_rl_batch import E, L, train_batch  # noqa: E402 - after the client folders are put on sys.path

from workers.fcr.validate import validate_file  # noqa: E402 - after the client folders are put on sys.path
from workers.routing.file import audit_file  # noqa: E402 - after the client folders are put on sys.path


def logged(tmp_path, data, **kw) -> Path:
    run = Client("http://127.0.0.1:9", "unused").run("p", "nemo-rl", spool_dir=tmp_path / "spool", live=False)
    log_train_data(run, data, 3, routing_replay="R3", num_experts=E, **kw)
    run._close_segment()
    path = tmp_path / "run.parquet"
    pq.write_table(pq.read_table(sorted((tmp_path / "spool").glob("seg-*.parquet"))[0]), path)
    return path


def test_r3_without_the_trainers_routes_is_unverifiable(tmp_path):
    path = logged(tmp_path, train_batch())
    assert validate_file(path)["valid"]
    res = audit_file(path)
    assert res["calls_with_routes"] == 3 and res["replay"]["state"] == "UNVERIFIABLE"
    assert res["pairs_verified"] == 0 and res["tokens_flipped"] == 0


def test_r3_with_replayed_routes_passes_and_a_flip_fails_naming_call_and_layer(tmp_path):
    data = train_batch()
    data["trainer_routes"] = data["routed_experts"].copy()
    res = audit_file(logged(tmp_path / "a", data, trainer_routes_key="trainer_routes"))
    assert res["replay"]["state"] == "PASS"
    assert res["pairs_verified"] == (5 + 3 + 3) * L  # every answer token of the two kept samples, at every layer

    sel = data["trainer_routes"][1, 8, 2]  # routes the forward of token 8: the second turn's first answer token 9
    sel[0] = next(x for x in range(E) if x not in sel)
    res = audit_file(logged(tmp_path / "b", data, trainer_routes_key="trainer_routes"))
    assert res["replay"]["state"] == "FAIL" and res["replay"]["failed_layers"] == [2]
    failed = res["replay"]["failed"]
    assert len(failed) == 1 and failed[0]["layers_flipped"] == [2] and failed[0]["call_id"].endswith("-b1-c1")
    assert res["pairs_flipped"] == 1 and np.isclose(res["pairs_flipped"] / res["pairs_verified"], 1 / (11 * L))
