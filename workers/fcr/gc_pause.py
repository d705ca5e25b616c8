"""The cyclic garbage collector paused while a pass streams the records of a run log (stdlib only).

Why: building one large record (a response's top-k lists) allocates thousands of containers that all stay alive
until the record is complete, so they survive the young collections and soon trigger a full collection, which walks
every object the process holds. A worker process holds torch, Django and Celery (hundreds of thousands of objects),
so those full collections multiplied the CPU time of validating and of certifying a log by about 3.5 (42.6 MiB
log, torch imported: validate_file 3.68 s CPU with the collector on, 1.02 s paused; certify_file 4.47 s and 1.40 s;
docs/deploy.md, "Measured: upload to certificate"). The records hold no reference cycles, so reference counting
frees them; what a pass does create in cycles is still freed by a young collection every ``every`` lines, and the
old generation is collected as usual once the collector runs again.

    with GcPaused() as gc_pause:
        for line in lines:
            gc_pause.tick()
            ...
"""

from __future__ import annotations

import gc

GC_EVERY = 4096  # lines between young-generation collections while the collector is paused


class GcPaused:
    """A context in which the collector is off (and back as it was after, also on an error); :meth:`tick` once a
    line collects the young generations every ``every`` lines."""

    def __init__(self, every: int = GC_EVERY):
        self.every = every
        self.count = 0
        self.was_enabled = False

    def __enter__(self) -> "GcPaused":
        self.was_enabled = gc.isenabled()
        gc.disable()
        return self

    def tick(self) -> None:
        self.count += 1
        if self.count % self.every == 0:
            gc.collect(1)

    def __exit__(self, *exc) -> None:
        if self.was_enabled:
            gc.enable()
