"""certify_part reads its lines with the collector paused (workers/fcr/gc_pause.py): large records in a process that
holds torch would otherwise start full collections of the whole heap every few records. The sequences it hands to
the sink are produced inside the pause, and the collector is back on after."""

import gc

import orjson

from workers.certify.file import certify_file
from workers.fcr.synth import SynthConfig, iter_run


def test_certification_reads_its_lines_paused(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in iter_run(SynthConfig(trajectories=6, seed=4))))
    states: list[bool] = []
    result = certify_file(path, chunk_tokens=64, sequence_sink=lambda rows: states.append(gc.isenabled()))
    assert result["summary"]["sequences"] > 1
    assert len(states) > 1 and not any(states)  # several flushes, each inside the pause
    assert gc.isenabled()
