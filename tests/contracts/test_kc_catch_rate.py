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
# the slowest whole-contract violator, random_order_row_sum (a Python loop over 16-column blocks of rows up to 2**20
# wide, 20 launches a case), took 637 s for its 50 seeds alone: the suite's 300 s per test stopped it
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("cls,ref", _all_violators(), ids=[f"{c}-{r.rsplit(':', 1)[1]}" for c, r in _all_violators()])
def test_every_violator_fails_every_hidden_seed_on_the_whole_contract(cls, ref, shipped):
    seeds = _hidden_seeds()
    misses = _misses(shipped[cls], ref, seeds)
    assert len(misses) <= SEEDS // 100, f"{cls} {ref}: missed on seeds {misses}"


# the correct controls, each with the class it is graded under: every conforming kernel a shipped contract lists,
# the user-style kernels (tests/contracts/kc_user_kernels.py) and the hold-out controls (kc_holdout_kernels.py)
USER_CONTROLS = [
    ("C-PRC-01", "kc_user_kernels.py:blocked_matmul"),
    ("C-PRC-02", "kc_user_kernels.py:welford_layer_norm"),
    ("C-PRC-03", "kc_user_kernels.py:plain_mul"),
    ("C-PRC-04", "kc_user_kernels.py:blocked_matmul"),
    ("C-ORD-01", "kc_user_kernels.py:kahan_row_mean"),
    ("C-ORD-02", "kc_user_kernels.py:tree_row_sum"),
    ("C-ORD-03", "kc_user_kernels.py:rowwise_linear"),
    ("C-CMP-01", "kc_user_kernels.py:two_step_rms_norm"),
    ("C-CMP-02", "kc_user_kernels.py:blocked_matmul"),
    ("C-CMP-03", "kc_user_kernels.py:online_softmax"),
    ("C-EXC-01", "kc_user_kernels.py:tree_row_max"),
    ("C-EXC-02", "kc_user_kernels.py:checked_gather"),
    ("C-PRC-02", "kc_holdout_kernels.py:tree_chan_layer_norm"),
    ("C-CMP-03", "kc_holdout_kernels.py:exp2_online_softmax"),
    ("C-PRC-01", "kc_holdout_kernels.py:tiled_matmul"),
    ("C-CMP-02", "kc_holdout_kernels.py:tiled_matmul"),
]


def _all_controls():
    from kc_helpers import HERE

    from workers.contracts import suite

    out = [(cls, str(HERE / ref)) for cls, ref in USER_CONTROLS]
    for c in suite():
        for entry in c.calibration.get("conforming") or []:
            out.append((c.cls, entry if isinstance(entry, str) else entry["impl"]))
    return out


def _control_id(cls, ref):
    return f"{cls}-{ref.rsplit('/', 1)[-1].replace('.py:', ':')}"


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("KC_CATCH_RATE_WIDE") != "1",
    reason="every correct control on the whole contract under 50 hidden seeds takes about an hour on two cores: "
    "KC_CATCH_RATE_WIDE=1 runs it",
)
@pytest.mark.parametrize("cls,ref", _all_controls(), ids=[_control_id(c, r) for c, r in _all_controls()])
def test_every_correct_control_passes_every_hidden_seed_on_the_whole_contract(cls, ref, shipped):
    """Issue #24, done-when: every correct control PASSes on 50 seeds. A seed on which a relation is violated
    (or a case raised unexpectedly) is a false alarm: none is allowed."""
    seeds = _hidden_seeds()
    fn = load_impl(ref)
    alarms = [s for s in seeds if seed_caught(shipped[cls], fn, s)]
    assert not alarms, f"{cls} {ref}: violated its contract on hidden seeds {alarms}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "cls,ref",
    [("C-CMP-03", "kc_holdout_kernels.py:exp2_online_softmax"), ("C-PRC-02", "kc_user_kernels.py:welford_layer_norm")],
)
def test_bounded_controls_pass_fresh_hidden_seeds_on_what_the_seed_chooses(cls, ref, shipped):
    """The suite's share of the check above, for the two controls nearest their bounds (blocked accumulations
    whose error grows with the row; docs/contracts.md, Bounds legitimate kernels meet): ten fresh seeds, on the
    points the seed chooses."""
    from kc_helpers import HERE

    seeds = _hidden_seeds(10)
    fn = load_impl(str(HERE / ref))
    alarms = [s for s in seeds if seed_caught(seed_chosen(shipped[cls]), fn, s)]
    assert not alarms, f"{cls} {ref}: violated its contract on hidden seeds {alarms}"
