"""Issue #24, done-when: every bug FAILs on every run — a catch rate of at least 99 % over hidden seeds, shown by
running the project's own violating implementations under 50 hidden seeds.

Seeds are fresh randomness per run (what the harness uses when no ``$KC_HIDDEN_SEED_KEY`` is set), so the test
cannot be tuned to them; a miss names its seed for replay. With 50 seeds, 99 % means none may be missed.

The fast tier runs two representative violators whose bug only the hidden seed's own choices reach (a size drawn
near the top of the declared scope, a dominant entry placed in the last tile), on what the seed chooses
(``kc_catch.seed_chosen``). The wide version — every violating implementation every shipped contract lists in its
calibration, on the whole contract — takes about an hour on two cores, far over the suite's budget, so it runs
only when asked for: ``KC_CATCH_RATE_WIDE=1 .venv/bin/python -m pytest tests/contracts/test_kc_catch_rate.py -n 2``
(its figures are in docs/contracts.md)."""

from __future__ import annotations

import os

import pytest

from kc_catch import seed_caught, seed_chosen

from workers.contracts.staging import load_impl

SEEDS = 50
ST = "workers.contracts.impls.size_triggered:"


def _hidden_seeds(n=SEEDS):
    return [int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF for _ in range(n)]


def _misses(contract, ref, seeds):
    fn = load_impl(ref)
    return [s for s in seeds if not seed_caught(contract, fn, s)]


@pytest.mark.parametrize(
    "cls,name",
    [("C-PRC-01", "m_remainder_bf16_matmul"), ("C-EXC-01", "tail_tile_dropped_row_max")],
)
def test_seed_chosen_points_catch_the_bug_on_every_hidden_seed(cls, name, shipped):
    seeds = _hidden_seeds()
    misses = _misses(seed_chosen(shipped[cls]), ST + name, seeds)
    assert not misses, f"{cls} {name}: missed on seeds {misses} ({len(seeds) - len(misses)}/{len(seeds)} caught)"


def test_a_conforming_kernel_is_not_caught(shipped):
    """The catch-rate measurement itself can say 'not caught': the reference passes the same seed-chosen points."""
    seeds = _hidden_seeds(3)
    fn = load_impl("workers.contracts.impls.reference:row_max")
    assert not any(seed_caught(seed_chosen(shipped["C-EXC-01"]), fn, s) for s in seeds)


def _all_violators():
    from workers.contracts import suite

    out = []
    for c in suite():
        for entry in c.calibration.get("violating") or []:
            ref = entry if isinstance(entry, str) else entry["impl"]
            if isinstance(entry, dict) and entry.get("platform_dependent"):
                continue
            out.append((c.cls, ref))
    return out


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("KC_CATCH_RATE_WIDE") != "1",
    reason="the wide catch rate (every violator, 50 hidden seeds, whole contracts) takes about an hour: "
    "KC_CATCH_RATE_WIDE=1 runs it",
)
@pytest.mark.parametrize("cls,ref", _all_violators(), ids=[f"{c}-{r.rsplit(':', 1)[1]}" for c, r in _all_violators()])
def test_every_violator_fails_every_hidden_seed_on_the_whole_contract(cls, ref, shipped):
    seeds = _hidden_seeds()
    misses = _misses(shipped[cls], ref, seeds)
    assert len(misses) <= SEEDS // 100, f"{cls} {ref}: missed on seeds {misses}"
