"""Issue #24: sweeps that reach the declared scope (contract files v0.4.0), value generators of the declared value
domain, declared layouts — pure checks of the points, generators and layouts (no sandbox)."""

from __future__ import annotations

import math

import pytest
import torch

from workers.contracts.loader import SPECS_DIR, ContractError, load_text
from workers.contracts.protocols.base import _within_budget, domain_values, generator, lay_out, sweep_points

EXC01 = (SPECS_DIR / "C-EXC-01.row_max.v0.4.0.yaml").read_text()
CMP03 = (SPECS_DIR / "C-CMP-03.softmax.v0.4.0.yaml").read_text()


def _reach(contract):
    return ((contract.protocol_params.get("sweep") or {}).get("draw") or {}).get("reach")


def test_every_declared_dimension_is_drawn_near_its_top_within_the_budget(shipped):
    """Over 30 seeds, each reaching dimension is drawn in [declared max / 8, declared max] wherever the budget
    lets it get there with the others small, off every tile (not a multiple of 8), larger than every other
    dimension of its point, and far above where the v0.2.0 draws stopped whenever the scope goes further."""
    reached = 0
    for cls, c in shipped.items():
        reach = _reach(c)
        if not reach:
            assert cls == "C-PRC-03"  # its budget (3n <= 2**24) caps n far below the declared 2**31
            continue
        sweep = c.protocol_params["sweep"]
        declared = c.data["scope"]["shape_class"]["dims"]
        for dim in reach["dims"]:
            pts = [p for s in range(30) for p in sweep_points(c, s, {}) if p.get("reach") == dim]
            assert pts, (cls, dim)
            for p in pts:
                assert p["drawn"] and _within_budget(p, sweep["budget"]), (cls, p)
                assert p[dim] % 8 and p[dim] <= declared[dim][1], (cls, p)
                others = [p[d] for d in reach["dims"] if d != dim]
                assert all(p[dim] > o for o in others), (cls, p)
            top = max(p[dim] for p in pts)
            assert top >= min(declared[dim][1], 2**20) // 2, (cls, dim, top)
            old_hi = sweep["draw"]["dims"][dim]["range"][1]
            if declared[dim][1] >= 8 * old_hi and top > old_hi:
                reached += 1
    # C-PRC-01 M/N, C-ORD-03 b/K/N and the batch/row dimensions of every row kernel now go past the old draws
    assert reached >= 12


def test_the_issue_s_two_examples_now_reach_the_scope(shipped):
    ms = [p["M"] for s in range(20) for p in sweep_points(shipped["C-PRC-01"], s, {}) if p.get("reach") == "M"]
    ks = [p["K"] for s in range(20) for p in sweep_points(shipped["C-ORD-03"], s, {}) if p.get("reach") == "K"]
    assert len(ms) == 20 and min(ms) >= 8192 and max(ms) > 32768 and all(m % 4096 for m in ms)
    assert len(ks) == 20 and min(ks) >= 8192 and max(ks) > 32768


def test_reach_points_depend_on_the_seed_and_replay():
    c = load_text(EXC01)
    a, b = sweep_points(c, 7, {}), sweep_points(c, 8, {})
    assert a == sweep_points(c, 7, {}) and a != b


def test_older_contract_versions_draw_what_they_drew():
    old = load_text((SPECS_DIR / "C-PRC-01.matmul.v0.2.0.yaml").read_text())
    pts = sweep_points(old, 7, {"M": 32, "K": 64, "N": 32, "value": "gauss"})
    assert not any(p.get("reach") for p in pts) and len([p for p in pts if p.get("drawn")]) == 3


@pytest.mark.parametrize(
    "text,old,new,field,message",
    [
        (
            EXC01,
            "reach: {count: 2, dims: [R, N]}",
            "reach: {count: 2, dims: [R, Q]}",
            "measurement_protocol.sweep.draw.reach.dims[1]",
            "reach dimension 'Q'",
        ),
        (
            EXC01,
            "  value_domain: any",
            "  value_domain: finite_normal",
            "measurement_protocol.sweep.draw.values[2]",
            "outside the declared value domain",
        ),
        (
            CMP03,
            "layouts: [contiguous, transposed, padded_rows, offset]}",
            "layouts: [contiguous, transposed]}",
            "measurement_protocol.sweep.draw.layouts[2]",
            "must be declared in scope.shape_class.layouts",
        ),
    ],
)
def test_loader_refuses_draws_outside_the_declaration(text, old, new, field, message):
    assert old in text
    with pytest.raises(ContractError) as ei:
        load_text(text.replace(old, new), "x.yaml")
    assert ei.value.field == field and message in ei.value.message


def test_a_magnitude_floor_admits_no_zeros_or_subnormals():
    """A declared magnitude_range whose low end is above 0 (C-PRC-01: [1e-15, 1e15]) admits no zeros, and one
    above the subnormal range no subnormals; an outlier channel stays admitted."""
    floor = EXC01.replace("  value_domain: any", "  value_domain: any\n  magnitude_range: [1.0e-15, 1.0e+15]")
    with pytest.raises(ContractError) as ei:
        load_text(floor, "x.yaml")
    assert ei.value.field == "measurement_protocol.sweep.draw.values[2]" and "signed_zeros" in ei.value.message
    c = load_text((SPECS_DIR / "C-PRC-01.matmul.v0.4.0.yaml").read_text())
    assert c.data["precondition"]["magnitude_range"][0] > 0
    assert "outlier_channel" in c.protocol_params["sweep"]["draw"]["values"]


def _x(rows=6, n=300, seed=1):
    g = generator("t", seed)
    return torch.randn((rows, n), generator=g), g


def test_signed_zeros_and_subnormals_are_what_they_say():
    x, g = _x()
    z = domain_values(x, "signed_zeros", g)
    assert (z[0] == 0).all() and bool(torch.signbit(z[0]).any()) and bool((~torch.signbit(z[0])).any())
    assert 0.15 < float((z[1:] == 0).double().mean()) < 0.35
    s = domain_values(x, "subnormals", g)
    tiny = torch.finfo(torch.float32).tiny
    sub = (s != 0) & (s.abs() < tiny)
    assert bool(sub[0].all()) and bool((s[0] > 0).all())
    assert 0.05 < float(sub[1:].double().mean()) < 0.2


def test_outlier_channel_scales_one_column():
    x, g = _x()
    o = domain_values(x, "outlier_channel", g)
    ratio = (o / x).nan_to_num(nan=1.0)
    cols = [j for j in range(x.shape[1]) if not torch.allclose(ratio[:, j], torch.ones(x.shape[0]))]
    assert len(cols) == 1 and 1e3 <= float(ratio[0, cols[0]]) <= 1e4 + 1


@pytest.mark.parametrize("n", [300, 256, 100, 4099])
def test_dominant_entry_sits_in_the_last_tile_of_even_rows(n):
    x, g = _x(rows=8, n=n)
    d = domain_values(x, "dominant_last_tile", g)
    pos = d.argmax(-1)
    tail = n % 128 or min(n, 128)
    for r in range(8):
        assert float(d[r, pos[r]]) >= float(x[r].max()) + 199  # dominant: exp overflows without the max
        if r % 2 == 0:
            assert pos[r] >= n - tail, (n, r, int(pos[r]))
    assert (d != x).sum(-1).le(1).all()


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "padded_rows", "offset"])
def test_layouts_keep_the_values_and_change_the_storage(layout):
    x, g = _x(rows=5, n=37)
    y = lay_out(x, layout, g)
    assert torch.equal(y, x)
    if layout == "transposed":
        assert y.stride() == (1, 5)
    elif layout == "padded_rows":
        assert y.stride(1) == 1 and y.stride(0) > 37 and y.untyped_storage().nbytes() > x.numel() * 4
    elif layout == "offset":
        assert y.is_contiguous() and 1 <= y.storage_offset() <= 15 and y.data_ptr() % 64 != 0
    else:
        assert y is x


def test_dominant_generator_keeps_the_oracle_finite():
    """fp64 softmax of a row with a +200 dominant entry: finite and summing to 1 (the oracle stays right)."""
    x, g = _x(rows=4, n=1025)
    d = domain_values(x * 2.0, "dominant_last_tile", g)
    ref = torch.softmax(d.double(), -1)
    assert bool(torch.isfinite(ref).all()) and math.isclose(float(ref.sum(-1).min()), 1.0, rel_tol=1e-12)


def test_coverage_names_the_reached_sizes_layouts_and_values(shipped):
    from workers.contracts.coverage import coverage_statement

    c = shipped["C-CMP-03"]
    pts = [p for p in sweep_points(c, 11, {"N": 1000, "rows": 4, "value": "gauss2", "layout": "contiguous"})]
    cov = coverage_statement(c, [{"point": p} for p in pts], "cpu", [(11, "hidden")])
    want = {}
    for p in pts:
        if p.get("reach"):
            want[p["reach"]] = max(want.get(p["reach"], 0), p[p["reach"]])
    assert cov["reached"] == want and set(want) == {"N", "rows"}
    assert "reaching N " in cov["text"] and {"padded_rows", "offset"} <= set(cov["layouts"])
    assert "dominant_last_tile" in cov["values"]
