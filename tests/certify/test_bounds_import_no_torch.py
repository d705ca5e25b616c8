"""The web process imports workers.certify.bounds to draw curves: that import must not pull torch."""

import subprocess
import sys


def test_bounds_import_does_not_import_torch():
    code = (
        "import sys, workers.certify.bounds as b; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "from workers.certify import trm_bounds, budget_threshold; "
        "assert 'torch' not in sys.modules, 'torch imported via package'; "
        "print(b.trm_bounds(16, eps=0.01)['best'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=".")
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) > 0


def test_lazy_attributes_load_torch_parts():
    import workers.certify as wc

    assert callable(wc.tv_interval) and callable(wc.tv_interval_batch) and callable(wc.sampled_estimates)
