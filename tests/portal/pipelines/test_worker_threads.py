"""The general worker's prefork pool is its parallelism: with several pool processes each runs its numeric libraries
single-threaded, as scripts/worker starts them (several processes each spreading torch over every core compete for
the cores: docs/deploy.md, "One run, many workers")."""

from pathlib import Path

from ..shipped_workers import shipped_workers
from .test_certify_chunks_workers import pool_children


def _environ(pid: int) -> dict:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_a_pool_of_two_runs_each_process_single_threaded(settings, tmp_path, monkeypatch):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "WORKER_CONCURRENCY"):
        monkeypatch.delenv(name, raising=False)
    with shipped_workers(settings, tmp_path, roles=("general",)) as procs:
        children = pool_children(procs[0].pid)
        assert len(children) == 2, children  # the default pool of scripts/worker general
        for pid in children:
            env = _environ(pid)
            assert (env.get("OMP_NUM_THREADS"), env.get("MKL_NUM_THREADS"), env.get("OPENBLAS_NUM_THREADS")) == (
                "1",
                "1",
                "1",
            ), pid


def test_an_operator_setting_is_kept(settings, tmp_path, monkeypatch):
    monkeypatch.delenv("WORKER_CONCURRENCY", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    with shipped_workers(settings, tmp_path, roles=("general",)) as procs:
        assert {_environ(pid).get("OMP_NUM_THREADS") for pid in pool_children(procs[0].pid)} == {"3"}
