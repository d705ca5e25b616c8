"""The three incidents of docs/contract-language.md#incidents-each-class-explains as named, runnable scenarios, each
mapped to its class with its measured signature: silent precision coercion (Huawei Ascend) -> C-PRC-01, reward-hacked
kernel (Sakana AI CUDA Engineer) -> C-CMP-01, out-of-bounds silent acceptance (AMD) -> C-EXC-02.

Each scenario runs the naive check a benchmark would have run (it passes) and the contract (it fails), and
reports the discriminating measurements. ``reproduced`` is True only if all of that was observed.
"""

from __future__ import annotations

import time

import torch

from .calibration import naive_check
from .runner import get_contract, run_contract
from .sandbox import load_impl

V = "workers.contracts.impls.violating:"
R = "workers.contracts.impls.reference:"

INCIDENTS = {
    "ascend_silent_precision_coercion": {
        "title": "Huawei Ascend: fp32 silently computed at lower precision (HF32 default, ATC force_fp16)",
        "class": "C-PRC-01",
        "secondary": ["C-PRC-04"],
        "informal": "fp32 silently computed at lower precision",
        "emulations": [V + "hf32_matmul", V + "fp16_accumulate_matmul"],
        "expected": "A@I != A; rho flat in K ~ 2**(24-p)*sqrt(2) (HF32 ~9e3) for coercion, growing with K for fp16 "
        "accumulation; both far above 8*sqrt(K)",
    },
    "sakana_reward_hacked_kernel": {
        "title": "Sakana AI CUDA Engineer: kernels that reused the reference's memory or computed part of the output",
        "class": "C-CMP-01",
        "secondary": ["C-CMP-03"],
        "informal": "memory exploit in the eval code let it skip the correctness check",
        "emulations": [V + "no_write_rms_norm", V + "partial_rms_norm"],
        "expected": "passes only when the reference runs first; the harness's fill pattern survives in every "
        "position (1.00) and the destination is flagged unwritten; errors confined to unwritten rows for "
        "the partial kernel",
    },
    "amd_oob_silent_acceptance": {
        "title": "AMD: out-of-bounds buffer loads return zero instead of faulting",
        "class": "C-EXC-02",
        "secondary": [],
        "informal": "out-of-bounds access returns zero instead of erroring",
        "emulations": [V + "zero_fill_gather"],
        "expected": "raised on 0/k OOB probes (index_select: k/k); exact zeros at OOB positions; exception deficit",
    },
}


def _ascend(seeds):
    c = get_contract("C-PRC-01")
    out, ok = {}, True
    for impl, want in ((V + "hf32_matmul", "rho_flat_in_K"), (V + "fp16_accumulate_matmul", "rho_grows_with_K")):
        v = run_contract(c, impl, seeds=seeds)
        naive = naive_check(c, impl)
        sig = v.signature
        out[impl.split(":")[1]] = {
            "naive_pass": naive,
            "verdict": v.verdict,
            "pattern": sig.get("pattern"),
            "diagnosis": sig.get("diagnosis"),
            "rho_max_by_K": sig.get("rho_max_by_K"),
            "probes_exact": sig.get("probes_exact"),
            "bound_at_K64": c.bound.evaluate({"K": 64}),
        }
        ok &= naive and v.verdict == "FAIL" and sig.get("pattern") == want and not sig.get("probes_exact")
    ref = run_contract(c, R + "matmul", seeds=seeds)
    out["conforming_reference"] = {"verdict": ref.verdict, "rho_max_by_K": ref.signature.get("rho_max_by_K")}
    return ok and ref.verdict == "PASS", out


def _sakana(seeds):
    c = get_contract("C-CMP-01")
    out, ok = {}, True
    v = run_contract(c, V + "no_write_rms_norm", seeds=seeds)
    naive = naive_check(c, V + "no_write_rms_norm")
    sig = v.signature
    kinds = {f["kind"] for f in v.findings}
    out["no_write_rms_norm"] = {
        "naive_harness_pass (reference first, reused buffer)": naive,
        "verdict": v.verdict,
        "sentinel_survival": sig.get("sentinel_survival"),
        "order_mismatch": sig.get("order_mismatch"),
        "destination_unwritten": "destination_unwritten" in kinds,
        "pattern": sig.get("pattern"),
    }
    ok &= (
        naive
        and v.verdict == "FAIL"
        and sig.get("sentinel_survival") == 1.0
        and sig.get("order_mismatch", 0) > 0
        and "destination_unwritten" in kinds
    )
    v2 = run_contract(c, V + "partial_rms_norm", seeds=seeds)
    out["partial_rms_norm"] = {
        "verdict": v2.verdict,
        "pattern": v2.signature.get("pattern"),
        "sentinel_survival": v2.signature.get("sentinel_survival"),
        "unwritten_rows_sample": v2.signature.get("unwritten_rows_sample"),
    }
    ok &= v2.verdict == "FAIL" and v2.signature.get("pattern") == "partial_write"
    # the stale torch.empty effect without an explicit buffer hand-over: allocator-dependent, reported only
    ref, stale = load_impl(R + "rms_norm"), load_impl(V + "stale_empty_rms_norm")
    x = 3.0 * torch.randn(64, 1024, generator=torch.Generator().manual_seed(0))
    expected = ref(x, torch.empty_like(x)).clone()
    tmp = ref(x, torch.empty_like(x))
    del tmp
    got = stale(x, torch.empty_like(x))
    out["allocator_reuse_observed_on_this_cpu"] = bool(torch.allclose(got, expected, equal_nan=False))
    return ok, out


def _amd(seeds):
    c = get_contract("C-EXC-02")
    v = run_contract(c, V + "zero_fill_gather", seeds=seeds)
    ref = run_contract(c, R + "gather_rows", seeds=seeds)
    naive = naive_check(c, V + "zero_fill_gather")
    sig, rsig = v.signature, ref.signature
    out = {
        "zero_fill_gather": {
            "naive_pass (in-bound only)": naive,
            "verdict": v.verdict,
            "pattern": sig.get("pattern"),
            "raised": f"{sig.get('raised')}/{sig.get('oob_probes')}",
            "observed": sig.get("observed"),
        },
        "index_select_reference": {"verdict": ref.verdict, "raised": f"{rsig.get('raised')}/{rsig.get('oob_probes')}"},
        "exception_deficit": (rsig.get("raised") or 0) - (sig.get("raised") or 0),
        "index_width_example": sig.get("index_width_example"),
    }
    ok = (
        naive
        and v.verdict == "FAIL"
        and sig.get("pattern") == "no_raise_zero_fill"
        and sig.get("raised") == 0
        and ref.verdict == "PASS"
        and rsig.get("raised") == rsig.get("oob_probes")
    )
    return ok, out


_RUNNERS = {
    "ascend_silent_precision_coercion": _ascend,
    "sakana_reward_hacked_kernel": _sakana,
    "amd_oob_silent_acceptance": _amd,
}


def run_incident(name: str, *, seeds=None) -> dict:
    """Run one named scenario; ``seeds`` default to the contract's public seeds (reproducible)."""
    if name not in INCIDENTS:
        raise KeyError(f"unknown incident {name!r}; known: {', '.join(INCIDENTS)}")
    meta = INCIDENTS[name]
    c = get_contract(meta["class"])
    t0 = time.monotonic()
    ok, measured = _RUNNERS[name](seeds or list(c.protocol_params["seeds"]["public"]))
    return {
        "name": name,
        "title": meta["title"],
        "class": meta["class"],
        "contract_id": c.id,
        "secondary_classes": meta["secondary"],
        "informal_diagnosis": meta["informal"],
        "expected_signature": meta["expected"],
        "measured": measured,
        "reproduced": bool(ok),
        "duration_s": round(time.monotonic() - t0, 3),
    }


def run_incidents(*, seeds=None) -> dict:
    items = [run_incident(n, seeds=seeds) for n in INCIDENTS]
    return {"incidents": items, "all_reproduced": all(i["reproduced"] for i in items)}


def format_incidents(report: dict) -> str:
    import json

    lines = []
    for i in report["incidents"]:
        lines.append(f"{i['name']:36s} -> {i['class']}  reproduced: {'yes' if i['reproduced'] else 'NO'}")
        lines.append(f"    {i['title']}")
        lines.append(f"    expected: {i['expected_signature']}")
        for k, v in i["measured"].items():
            lines.append(f"    {k}: {json.dumps(v, default=str)}")
    return "\n".join(lines)
