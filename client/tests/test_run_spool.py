"""The run's spool without a portal (issue 29): segments hold whole steps whatever the gradient accumulation; call
ids are (run, step, sample index), so a run killed and resumed spools exactly the records of an uninterrupted one;
a full disk never raises into the training loop and its steps are counted as missing; segments are written
atomically and a corrupt one is quarantined, never uploaded."""

import errno
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit_portal_client import Client, PortalUnavailable
from audit_portal_client import run as run_module


def batch(step, micro=0, B=2, T=6):
    rng = np.random.default_rng(1000 * step + micro)
    lp = -rng.random((B, T)) * 3
    return dict(
        rollout_logprobs=lp,
        trainer_logprobs=lp + rng.normal(0, 1e-3, (B, T)),
        response_mask=(np.arange(T)[None, :] < rng.integers(1, T + 1, (B, 1))).astype(np.int8),
        response_ids=rng.integers(0, 50, (B, T)),
    )


def offline_run(tmp_path, name="r", uploads=None, **kw):
    """A run whose portal is away (offline: nothing is sent); ``uploads`` collects what the uploader would send."""
    c = Client("http://127.0.0.1:9", "unused")

    def request(method, path, **_):
        raise PortalUnavailable("down")

    c._request = request
    if uploads is not None:

        def upload(project, path, steps=None, progress=None):
            uploads.append((path.name, steps, pq.read_table(path)))
            return {"id": len(uploads)}

        c.upload = upload
    return c.run("demo", name, spool_dir=tmp_path, live=False, **kw)


def spooled(root) -> pa.Table:
    segs = sorted(root.glob("seg-*.parquet"))
    return pa.concat_tables([pq.read_table(s) for s in segs]) if segs else None


def records(table):
    """call id -> (step, rollout log-probs, trainer log-probs): what a certificate is computed from."""
    d = table.to_pydict()
    return {
        c: (s, tuple(a), tuple(b))
        for c, s, a, b in zip(d["call_id"], d["step"], d["rollout_logprobs"], d["trainer_logprobs"])
    }


@pytest.mark.parametrize("accumulation", [1, 2, 3, 4])
@pytest.mark.parametrize("segment_steps", [1, 2, 3, 4, 5])
def test_segments_hold_whole_steps_whatever_the_accumulation(tmp_path, accumulation, segment_steps):
    run = offline_run(tmp_path, segment_steps=segment_steps)
    calls = 0
    for step in range(7):
        for micro in range(accumulation):  # each micro-batch logs the same step
            calls += run.log_step(step, **batch(step, micro))
    run._close_segment()
    seen: dict[int, str] = {}
    ids = []
    for seg in sorted(tmp_path.glob("seg-*.parquet")):
        t = pq.read_table(seg)
        assert pq.ParquetFile(seg).metadata.num_row_groups == 1  # written in one go
        steps = set(t.column("step").to_pylist())
        assert len(steps) <= segment_steps
        for s in steps:
            assert s not in seen, f"step {s} in {seen.get(s)} and {seg.name}"  # a step never spans segments
            seen[s] = seg.name
        ids += t.column("call_id").to_pylist()
    assert sorted(seen) == list(range(7)) and len(ids) == calls == len(set(ids))  # every sample once, own id
    assert len(list(tmp_path.glob("seg-*.parquet"))) == -(-7 // segment_steps)
    assert all(i.startswith("r-s") and "-b" in i for i in ids)


def test_a_run_killed_and_resumed_spools_what_an_uninterrupted_run_spools(tmp_path):
    whole = offline_run(tmp_path / "whole", segment_steps=2)
    for step in range(8):
        for micro in range(2):
            whole.log_step(step, **batch(step, micro))
    whole._close_segment()

    first = offline_run(tmp_path / "resumed", segment_steps=2)
    for step in range(6):
        for micro in range(2):
            first.log_step(step, **batch(step, micro))
    first.log_step(6, **batch(6, 0))  # killed mid-step 6: its first micro-batch (the open segment) dies with it
    del first
    second = offline_run(tmp_path / "resumed", segment_steps=2, resume=True)
    for step in range(3, 8):  # the trainer resumes from its checkpoint at step 3: 3 is logged again
        for micro in range(2):
            second.log_step(step, **batch(step, micro))
    second._close_segment()
    assert second.steps_skipped == 3  # steps 3-5 were held by the spool (step 6 was not: logged again, whole)
    assert records(spooled(tmp_path / "resumed")) == records(spooled(tmp_path / "whole"))


def test_a_full_disk_is_a_gap_not_an_exception(tmp_path, monkeypatch, caplog):
    run = offline_run(tmp_path, segment_steps=1)
    real = pq.write_table
    full = {2, 3}

    def write_table(table, where, **kw):
        if set(table.column("step").to_pylist()) & full:
            where.write(b"PAR1 half a segment")  # a partial write, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(table, where, **kw)

    monkeypatch.setattr(run_module.pq, "write_table", write_table)
    for step in range(6):
        run.log_step(step, **batch(step))  # never raises
    run._close_segment()
    assert sorted(run.gaps) == [2, 3] and run.status()["missing_steps"] == [2, 3]
    assert json.loads((tmp_path / "state.json").read_text())["missing_steps"] == [2, 3]
    steps = sorted(set(spooled(tmp_path).column("step").to_pylist()))
    assert steps == [0, 1, 4, 5]  # nothing truncated reached the spool, later steps went on
    assert not list(tmp_path.glob(".seg-*")) and not list(tmp_path.glob("*.part"))
    assert len([r for r in caplog.records if "disk full" in r.getMessage()]) == 1  # said once, counted always
    full.clear()
    again = offline_run(tmp_path, segment_steps=1, resume=True)  # a resumed process logs the lost steps
    for step in range(6):
        again.log_step(step, **batch(step))
    again._close_segment()
    assert again.gaps == set() and sorted(set(spooled(tmp_path).column("step").to_pylist())) == list(range(6))


def test_bad_input_is_a_gap_unless_strict(tmp_path):
    run = offline_run(tmp_path)
    bad = dict(batch(0), trainer_logprobs=np.zeros((3, 3)))
    assert run.log_step(0, **bad) == 0 and run.gaps == {0}
    strict = offline_run(tmp_path / "s", strict=True)
    with pytest.raises(ValueError, match="trainer_logprobs"):
        strict.log_step(0, **bad)


def test_a_corrupt_segment_is_quarantined_never_uploaded(tmp_path):
    uploads = []
    run = offline_run(tmp_path, uploads=uploads, segment_steps=1)
    run._ensure_started = lambda: True
    run._run_id = 1
    for step in range(2):
        run.log_step(step, **batch(step))
    run._close_segment()
    (tmp_path / "seg-000001.parquet").write_bytes(b"PAR1 truncated by an old client")
    assert run._drain(deadline=None) is True
    assert [u[0] for u in uploads] == ["seg-000002.parquet"] and uploads[0][1] == (1, 1)
    assert (tmp_path / "quarantine" / "seg-000001.parquet").exists()
    assert "seg-000001.parquet" in run.status()["quarantined"]
    assert not list(tmp_path.glob("seg-*.parquet"))  # the uploaded one is cleaned, the record kept
    journal = [json.loads(line) for line in (tmp_path / "uploads.jsonl").read_text().splitlines()]
    assert journal == [{"segment": "seg-000002.parquet", "id": 1, "steps": [1]}]
    again = offline_run(tmp_path, resume=True)  # a new process reads the journal: step 1 is held
    assert again.log_step(1, **batch(1)) == 0 and again.steps_skipped == 1
    assert again.spool.next_index() == 3  # no segment name is reused


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 256 KiB tmpfs (root only; skipped elsewhere)."""
    import subprocess

    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_real_full_tmpfs_is_gaps_then_recovers(small_tmpfs, caplog):
    filler = small_tmpfs / "filler"
    filler.write_bytes(b"\0" * (256 * 1024 - 40 * 1024))  # leaves room for a few segments, then the disk is full
    run = offline_run(small_tmpfs / "spool", segment_steps=1)
    for step in range(40):
        run.log_step(step, **batch(step, B=8, T=64))  # never raises
    run.flush()
    written = sorted(set(spooled(small_tmpfs / "spool").column("step").to_pylist()))
    assert written and run.gaps and set(written) | run.gaps == set(range(40)) and not set(written) & run.gaps
    assert not list((small_tmpfs / "spool").glob(".seg-*"))  # no truncated temporary left behind
    for seg in (small_tmpfs / "spool").glob("seg-*.parquet"):
        pq.read_table(seg)  # every segment in place is whole
    filler.unlink()  # space again (an upload freed it, an operator cleaned up)
    for step in range(40, 45):
        run.log_step(step, **batch(step, B=8, T=64))
    run.flush()
    assert set(range(40, 45)) <= set(spooled(small_tmpfs / "spool").column("step").to_pylist())
    assert len([r for r in caplog.records if "disk full" in r.getMessage()]) == 1
