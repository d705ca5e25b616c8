"""Measurement protocols, one module per contract class (docs/contract-language.md#the-twelve-classes).

``PROTOCOL_META`` is a torch-free registry (the loader checks contract expressions against it without
importing torch): for each protocol, the class it measures, the ``names`` it binds for ``tolerance.bound``
and ``postcondition.relation``, the sweeps it understands the value generators it implements (``values``,
the names ``measurement_protocol.sweep`` may give a point) and the violation ``patterns`` it can report
(the keys allowed in ``violation_signature.discriminators``). ``get(name)`` imports the module itself.
"""

from __future__ import annotations

import importlib

PROTOCOL_META = {
    "matmul_precision": {
        "class": "C-PRC-01",
        "module": "prc01",
        "names": ("rho", "probe_mismatch", "K", "M", "N", "u"),
        "sweeps": ("K", "M", "N"),
        "values": ("gauss", "outlier_channel"),
        "patterns": ("probe_inexact", "rho_flat_in_K", "rho_grows_with_K"),
    },
    "layernorm_cancellation": {
        "class": "C-PRC-02",
        "module": "prc02",
        "names": ("err", "kappa", "c", "D", "u"),
        "sweeps": ("c", "D", "rows"),
        "values": ("offset_gauss",),
        "patterns": ("err_quadratic_in_kappa", "err_above_linear_kappa_bound"),
    },
    "denormal_policy": {
        "class": "C-PRC-03",
        "module": "prc03",
        "names": ("mismatch", "flush_ratio", "n_subnormal"),
        "sweeps": ("n",),
        "values": ("subnormal_ladder", "scattered_subnormals", "scattered_subnormals_to_the_end"),
        "patterns": ("outputs_flushed", "inputs_flushed", "inexact"),
    },
    "scaling_invariance": {
        "class": "C-PRC-04",
        "module": "prc04",
        "names": ("mismatch", "rho", "k", "K", "u"),
        "sweeps": ("k", "M", "K", "N"),
        "values": ("linear_init",),
        "patterns": ("overflow_at_scale", "underflow_at_scale", "not_equivariant", "error_above_bound"),
    },
    "reduction_order": {
        "class": "C-ORD-01",
        "module": "ord01",
        "names": ("e", "N", "u"),
        "sweeps": ("N", "rows"),
        "values": ("gauss", "offset_gauss"),
        "patterns": ("error_above_fpna_envelope",),
    },
    "atomic_determinism": {
        "class": "C-ORD-02",
        "module": "ord02",
        "names": ("distinct_extra", "R", "e", "N"),
        "sweeps": ("N", "rows"),
        "values": ("gauss",),
        "patterns": ("run_to_run_variation", "error_above_fpna_envelope"),
    },
    "partition_invariance": {
        "class": "C-ORD-03",
        "module": "ord03",
        "names": ("mismatch_rows", "b", "K", "N"),
        "sweeps": ("b", "K", "N"),
        "values": ("gauss",),
        "patterns": ("batch_size_step", "batch_position_dependent"),
    },
    "fused_equivalence": {
        "class": "C-CMP-01",
        "module": "cmp01",
        "names": ("rel_err", "sentinel_survival", "order_mismatch", "D", "u"),
        "sweeps": ("D", "rows"),
        "values": ("gauss3", "near_zero_rows", "outlier_channel"),
        "patterns": ("approx_math_error_floor", "output_not_written", "partial_write", "order_dependent"),
    },
    "autotune_invariance": {
        "class": "C-CMP-02",
        "module": "cmp02",
        "names": ("rho", "K", "M", "u"),
        "sweeps": ("K", "M", "N"),
        "values": ("gauss", "outlier_channel"),
        "patterns": ("config_dependent_error", "shape_dependent_choice"),
    },
    "shape_polymorphism": {
        "class": "C-CMP-03",
        "module": "cmp03",
        "names": ("err", "N", "u"),
        "sweeps": ("N", "rows"),
        "values": ("gauss2", "large_logits", "dominant_last_tile"),
        "patterns": ("tail_failure", "layout_failure", "shape_failure"),
    },
    "nan_propagation": {
        "class": "C-EXC-01",
        "module": "exc01",
        "names": ("mismatch", "R", "N"),
        "sweeps": ("R", "N"),
        "values": ("nan_inf_any_position", "dominant_last_tile", "signed_zeros", "subnormals"),
        "patterns": ("nan_dropped", "spurious_nan", "inf_mismatch", "value_mismatch"),
    },
    "oob_semantics": {
        "class": "C-EXC-02",
        "module": "exc02",
        "names": ("raise_deficit", "inbound_mismatch", "oob_mismatch"),
        "sweeps": ("n", "d", "m", "probes"),
        "values": ("oob_any_position",),
        "patterns": ("no_raise_zero_fill", "no_raise_clamped", "no_raise_wrapped", "no_raise_other"),
    },
    # declared-property contracts (specs/declared, docs/contracts.md#declared-property-contracts)
    **{
        f"batch_invariance_{op}": {
            "class": "C-ORD-03",
            "module": "ord03_ops",
            "names": ("mismatch_rows", "b") + dims,
            "sweeps": ("b",) + dims,
            "values": ("gauss", "dominant"),
            "patterns": ("batch_size_step", "batch_position_dependent"),
        }
        for op, dims in (
            ("rms_norm", ("D",)),
            ("layer_norm", ("D",)),
            ("softmax", ("D",)),
            ("matmul", ("K", "N")),
            ("attention", ("T", "S", "d")),
        )
    },
    "gelu_exactness": {
        "class": "C-CMP-01",
        "module": "cmp01_gelu",
        "names": ("e", "inplace_mismatch", "n", "u"),
        "sweeps": ("n",),
        "values": ("gauss", "grid", "wide"),
        "patterns": ("tanh_approximation", "error_above_bound", "inplace_differs"),
    },
    "prefix_sum_error": {
        "class": "C-ORD-01",
        "module": "ord01_cumsum",
        "names": ("e", "N", "u"),
        "sweeps": ("N", "rows"),
        "values": ("gauss", "offset_gauss", "signed_zeros"),
        "patterns": ("narrow_accumulator", "lost_carry"),
    },
    "topk_tie_break": {
        "class": "C-ORD-02",
        "module": "ord02_topk",
        "names": ("mismatch", "value_mismatch", "R", "N", "k"),
        "sweeps": ("N", "k", "rows"),
        "values": ("few_levels", "gauss", "tied_blocks"),
        "patterns": ("tie_order_violated", "wrong_selection"),
    },
    "causal_mask": {
        "class": "C-CMP-03",
        "module": "cmp03_causal",
        "names": ("err", "leak", "S", "T", "u"),
        "sweeps": ("B", "T", "S", "d"),
        "values": ("gauss", "peaked"),
        "patterns": ("future_attended", "tail_mask_error", "error_above_bound"),
    },
}


OPS_BATCH = ("rms_norm", "layer_norm", "softmax", "matmul", "attention")  # C-ORD-03's declared batch-invariant ops

# The shared value generators (protocols/base.py ``domain_values``) and the declared value domains
# (``precondition.value_domain``) that admit them: a ``finite`` domain gets no inf/NaN, a ``finite_normal`` one no
# zeros or subnormals; a ``magnitude_range`` whose low end is above 0 admits no zeros, above 2**-126 no subnormals.
DOMAIN_VALUES = {
    "signed_zeros": {"domains": ("finite", "any"), "min_magnitude": 0.0},
    "subnormals": {"domains": ("finite", "any"), "min_magnitude": 2.0**-149},
    "outlier_channel": {"domains": ("finite", "finite_normal", "any"), "min_magnitude": None},
    "dominant_last_tile": {"domains": ("finite", "finite_normal", "any"), "min_magnitude": None},
}

# The layouts protocols/base.py ``lay_out`` builds (what ``sweep.draw.layouts`` may name).
LAYOUTS = ("contiguous", "transposed", "padded_rows", "offset")


def get(name: str):
    """The protocol module for ``name`` (imports torch)."""
    return importlib.import_module(f"{__name__}.{PROTOCOL_META[name]['module']}")


# Policy fields a class needs declared before it can be measured (NOT_DECLARED otherwise,
# docs/contract-language.md#verdicts).
REQUIRED_POLICIES = {
    "C-PRC-03": ("denormal",),
    "C-ORD-02": ("determinism",),
    "C-EXC-01": ("nan",),
    "C-EXC-02": ("oob", "negative_index"),
}
