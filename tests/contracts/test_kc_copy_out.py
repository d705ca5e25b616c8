"""The child's copy of results out of the candidate's process (workers/contracts/sandbox_child.py: copy_out,
input_record / input_after, _refusal), exercised here directly, without a sandbox."""

import pytest
import torch
from torch.overrides import TorchFunctionMode

from workers.contracts.sandbox_child import _refusal, copy_out, decode_tensor, input_after, input_record


def _roundtrip(t, budget=1 << 30):
    return decode_tensor(copy_out(t, [budget]))


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(5, 7),
        lambda: torch.randn(7, 5).t(),  # transposed
        lambda: torch.randn(6, 16)[:, 3:10],  # padded rows, storage offset
        lambda: torch.randn(1, 9).expand(4, 9),  # stride 0
        lambda: torch.randn(3, 4).to(torch.bfloat16),
        lambda: torch.randn(3, 4, dtype=torch.complex64),
        lambda: torch.tensor([True, False, True]),
        lambda: torch.empty(0, 3),
    ],
)
def test_copy_out_ships_the_elements_row_major(make):
    t = make()
    out = _roundtrip(t)
    assert out.dtype == t.dtype and tuple(out.shape) == tuple(t.shape) and out.is_contiguous()
    assert torch.equal(
        out.view(torch.uint8) if out.dtype == torch.bool else out,
        t.contiguous().view(torch.uint8) if t.dtype == torch.bool else t.contiguous(),
    )


def test_never_the_storage_behind_a_view_and_never_past_the_budget():
    big = torch.randn(1 << 20)
    enc = copy_out(big[10:14], [1 << 30])
    assert len(enc[5]) == 16  # four float32 elements, not the 4 MiB behind them
    with pytest.raises(ValueError):
        copy_out(torch.randn(1000), [100])
    budget = [1 << 30]
    copy_out(torch.randn(1000), budget)
    assert budget[0] == (1 << 30) - 4000


def test_subclasses_and_active_modes_are_refused():
    class Sub(torch.Tensor):
        pass

    assert "subclasses" in _refusal(torch.randn(3).as_subclass(Sub))
    assert "expected a torch.Tensor" in _refusal([1.0])
    assert _refusal(torch.randn(3)) is None

    class Passthrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    t = torch.randn(3)
    with Passthrough():
        assert "mode" in _refusal(t)


def test_input_after_reads_the_recorded_memory_and_sees_a_moved_storage():
    x = torch.randn(4, 4)
    rec = input_record(x)
    x.mul_(2)
    after = decode_tensor(input_after(rec, [1 << 30]))
    assert torch.equal(after, x)
    y = torch.randn(4, 4)
    rec = input_record(y)
    y.untyped_storage().resize_(1024)  # moved or grown by the candidate
    assert input_after(rec, [1 << 30])[5] is None
