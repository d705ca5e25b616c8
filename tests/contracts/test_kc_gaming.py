"""Kernels that game the grade instead of escaping the sandbox (issue #24; tests/contracts/kc_gaming.py): each
violates its contract as users would see it, and each must FAIL — never PASS — because the judge runs apart from
the candidate (only raw output bytes leave its process, read without any torch operator), the result channel
must carry exactly the cases a child was given, and repeat launches run in fresh processes on fresh allocations."""

import shutil
from pathlib import Path

import pytest

from workers.contracts import run_contract

GAMING = Path(__file__).with_name("kc_gaming.py")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    # submitted under a name that says nothing about tests or harnesses (the sniffer also reads its own path)
    path = tmp_path_factory.mktemp("user") / "kernels.py"
    shutil.copyfile(GAMING, path)
    return str(path)


@pytest.mark.parametrize(
    "function,kind", [("mode_mul", "torch function/dispatch mode"), ("subclass_mul", "subclasses are not graded")]
)
def test_a_pristine_copy_handed_to_the_harness_is_refused(kernels, function, kind):
    v = run_contract("C-PRC-03", f"{kernels}:{function}", seeds=[7])
    assert v.verdict == "FAIL", v.reason
    assert kind in v.reason and "bad_output" in {f["kind"] for f in v.findings}


def test_results_written_into_the_channel_by_the_kernel_fail_the_run(kernels):
    v = run_contract("C-ORD-02", f"{kernels}:channel_row_sum", seeds=[7])
    assert v.verdict == "FAIL", v.reason
    assert "channel_tampered" in {f["kind"] for f in v.findings}


@pytest.mark.parametrize(
    "function", ["memo_row_sum", "file_memo_row_sum", "sniff_row_sum", "shape_row_sum", "address_row_sum"]
)
def test_memoising_sniffing_or_one_allocation_cannot_buy_determinism(kernels, function):
    """The memoiser agrees with itself in one process only, and the file memoiser finds nothing an earlier child
    wrote in $HOME or /tmp; the sniffer finds no word of a sandbox, harness or check in its command line,
    environment or paths, and the shape sniffer a process like an ordinary one (plain interpreter flags, a passwd
    entry, a home it can write); the address-dependent kernel meets its inputs at another storage offset in a fresh
    child. Each shows more than one bit pattern."""
    v = run_contract("C-ORD-02", f"{kernels}:{function}", seeds=[7])
    assert v.verdict == "FAIL", v.reason
    assert v.signature["pattern"] == "run_to_run_variation"
    assert v.harness["children"] >= 2


LOUD = """
import sys
import torch

def mul(x, w):
    print("\\x1b[2J\\x1b[31mfake: PASS\\rok [worker] C-PRC-03 PASSED", file=sys.stderr)
    raise RuntimeError("see /srv/audit/var/secret/place/notes.txt \\x1b]0;title\\x07 for details")
"""


def test_candidate_text_is_escaped_capped_and_without_host_paths(tmp_path, capsys):
    path = tmp_path / "loud.py"
    path.write_text(LOUD)
    v = run_contract("C-PRC-03", f"{path}:mul", seeds=[7])
    assert v.verdict == "CRASH"
    assert "\x1b" not in v.reason and "\\x1b" in v.reason
    assert "/srv/audit" not in v.reason and "…/notes.txt" in v.reason
    logged = capsys.readouterr().err
    kernel_lines = [line for line in logged.splitlines() if "fake: PASS" in line]
    assert kernel_lines and all(
        line.startswith("[kernel] ") and "\x1b" not in line and "\r" not in line for line in kernel_lines
    )
    missing = run_contract("C-PRC-03", f"{tmp_path}/nowhere/k.py:mul", seeds=[7])
    assert str(tmp_path) not in missing.reason


def test_every_launch_sees_the_same_process(kernels):
    """Positive control: bits keyed by what the process looks like (command line, environment, paths, /tmp) stay
    the same over the 20 launches of C-ORD-02 in three children, so no launch looks like a check."""
    v = run_contract("C-ORD-02", f"{kernels}:look_row_sum", seeds=[7])
    assert v.verdict == "PASS", v.reason
    assert v.harness["children"] == 3


def test_every_repeat_launch_gets_a_fresh_allocation(kernels):
    """Launch 1 runs in the same process as launch 0 (a warm call) but on inputs at another address and storage
    offset, like launch 2 in a fresh child: a kernel keyed by address meets a new one on every repeat. Before, launches
    0 and 1 shared one allocation and agreed."""
    import torch

    from workers.contracts.protocols.base import Case
    from workers.contracts.sandbox import decode_tensor, run_in_sandbox

    x, w = torch.randn(37), torch.randn(37)
    out = run_in_sandbox(f"{kernels}:address_memo_mul", [Case("k", [x, w], expect_shape=(37,), repeat=2)])
    assert out["kind"] == "result", out.get("error")
    outputs = [decode_tensor(o) for o in out["results"][0]["series"][0]["outputs"]]
    marks = [round(float((o - x * w).mean())) for o in outputs]
    # launches 0 and 1 in the first child: two addresses there; launch 2 in a fresh child, its first address
    assert marks == [0, 1, 0], marks


def _row_sum(x):
    return x.sum(dim=-1)


def test_fresh_allocations_never_crowd_out_what_a_child_must_ship():
    """Regression (issue #24): every later launch on a fresh allocation shipped that allocation's bytes after the
    calls out of the same allowance as the outputs, so long runs of large cases used it up, the case's own inputs
    and outputs came back without bytes, and conforming references FAILed (C-ORD-02 row_sum, C-EXC-02 gather_rows,
    C-ORD-03 linear: input_mutated, "exceeds what one run may ship"). Fresh allocations now have an allowance of
    their own: the outputs and the case's own inputs ship exactly as before, and launches past the fresh allowance
    run on the case's own inputs."""
    import torch

    from workers.contracts.protocols.base import Case
    from workers.contracts.sandbox import launch_round
    from workers.contracts.sandbox_child import run_case
    from workers.contracts.wire import encode_case

    x = torch.randn(4, 2**18)  # 4 MiB of input
    table, index = [], {}
    encoded = [encode_case(Case("k", [x], expect_shape=(4,), repeat=20), table, index)]
    case = launch_round(encoded, 1)[0]  # a fresh child's share: nine launches
    budget, fresh_budget = [5 * 2**20], [9 * 2**20]  # the case's own inputs and outputs; two fresh allocations
    res = run_case(_row_sum, case, "cpu", None, table, budget, fresh_budget)
    assert res["exception"] is None and res["bad_output"] is None
    assert len(res["series"][0]["outputs"]) == case["repeat"] == 9
    assert len(res["more_inputs"]) == 2, "fresh allocations past the allowance"
    records = [res["inputs_after"]] + [entry[2] for entry in res["more_inputs"]]
    assert all(rec and rec[0][5] is not None for rec in records), "an input record shipped without its bytes"
    own = res["inputs_after"][0]
    assert budget[0] == 5 * 2**20 - len(own[5]) - 9 * 4 * 4  # the fresh inputs took nothing of it
    assert 0 <= fresh_budget[0] < 4 * 2**20


def test_a_buffer_handed_out_twice_is_reuse_an_inputs_own_memory_is_not():
    """output_reused counts a launch whose output overlaps what an earlier launch of the same child returned (a
    static workspace); an output inside an input's storage is that input's memory (an alias the aliasing policy
    judges), which launches on the same inputs share without anything being overwritten."""
    from workers.contracts.harness import reused_outputs

    inputs = [(1000, 400)]  # one input storage: bytes [1000, 1400)
    workspace = (5000, 5040)
    assert reused_outputs([(inputs, [workspace, (6000, 6040), workspace])]) == 1
    assert reused_outputs([(inputs, [(1000, 1040), (1000, 1040), (1200, 1240)])]) == 0
    assert reused_outputs([(inputs, [(1390, 1430), (1390, 1430)])]) == 1  # reaches past the input: not its memory
    assert reused_outputs([(inputs, [workspace]), (inputs, [workspace])]) == 0  # other children, other processes
    assert reused_outputs([(inputs, [(7000, 7000), (7000, 7000)])]) == 0  # empty outputs occupy nothing
    assert reused_outputs(["garbage"]) == 1  # a malformed record is no evidence of fresh memory
