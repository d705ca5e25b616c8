"""Where numba can write its cache nowhere (a read-only install run by a user without a home directory — the
Docker image's worker without NUMBA_CACHE_DIR), the interval kernel still imports and computes, compiled in memory;
seen for real as a non-root user before the fallback existed ("RuntimeError: cannot cache function '_eta': no
locator available"). Simulated here by giving numba no cache locators at all."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import numba.core.caching as caching
caching.CacheImpl._locator_classes = []           # no place to cache: numba raises RuntimeError on cache=True
from workers.certify import interval_kernel
assert isinstance(interval_kernel.interval_rows._cache, caching.NullCache), "still caching"
from workers.certify.intervals import tv_interval
lo, hi = tv_interval([1, 2], [-0.1, -2.5], [1, 2], [-0.12, -2.4], 1, -0.1, -0.12)
print(repr((lo, hi)))
"""


def test_kernel_compiles_in_memory_when_no_cache_location_is_writable():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lo, hi = eval(out.stdout.strip())  # our own repr of two floats
    # the same interval as the cached kernel in this process
    from workers.certify.intervals import tv_interval

    assert (lo, hi) == tv_interval([1, 2], [-0.1, -2.5], [1, 2], [-0.12, -2.4], 1, -0.1, -0.12)
    assert 0.0 <= lo <= hi <= 1.0
