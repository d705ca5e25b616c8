"""The collector is paused while a pass streams a log's records (workers/fcr/gc_pause.py): off inside, restored after
(also after an error, and left off when it was off), the young generations collected every ``every`` lines, and the
validation and certification passes read their lines inside the pause."""

from __future__ import annotations

import gc

import orjson
import pytest

from workers.fcr.gc_pause import GcPaused
from workers.fcr.synth import SynthConfig, iter_run
from workers.fcr.validate import validate_file


@pytest.fixture
def collections():
    """The generations of the collections that run while the test does."""
    seen: list[int] = []

    def callback(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    try:
        yield seen
    finally:
        gc.callbacks.remove(callback)


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in iter_run(SynthConfig(trajectories=6, seed=3))))
    return path


def test_paused_inside_and_restored_after():
    assert gc.isenabled()
    with GcPaused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_after_an_error():
    with pytest.raises(RuntimeError), GcPaused():
        raise RuntimeError("a pass that fails")
    assert gc.isenabled()


def test_left_off_when_it_was_off():
    gc.disable()
    try:
        with GcPaused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_young_generations_collected_every_n_ticks(collections):
    with GcPaused(every=3) as pause:
        for _ in range(7):
            pause.tick()
            [[i] for i in range(1000)]  # allocations that would start collections were the collector on
    assert collections == [1, 1]  # after the 3rd and the 6th line, and only the young generations


def test_validation_reads_its_lines_paused(log):
    states: list[bool] = []
    summary = validate_file(log, progress=lambda f, m: states.append(gc.isenabled()), progress_every_bytes=1)
    assert summary["valid"] and summary["records"] > 1
    assert states[:-1] and not any(states[:-1])  # every report while reading; the last one comes after the pass
    assert gc.isenabled()
