"""What crosses the sandbox's boundary, as the parent sees it (docs/contracts.md, "Isolation"): cases encoded for
the child (tensors shared across cases sent once, a random fill pattern per launch for destinations and freed
memory), messages from the child read by an unpickler that refuses every global, and the tensor hash the parent
computes from the raw bytes the child returns. The byte codec itself lives in ``sandbox_child.py``, so both sides
build the same bytes."""

from __future__ import annotations

import hashlib
import io
import pickle
import secrets

from .sandbox_child import DTYPES, encode_tensor

# "activations": values of the size real tensors have, so memory a kernel probes before its call looks like what a
# caller's allocator leaves there on some launches of every case, not only like a grader's pattern
FILL_PATTERNS = ("bits", "normal", "nan", "const", "activations")


def tensor_hash(t) -> str:
    t = t.detach().cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    if t.numel():
        h.update(
            t.view(-1).view(__import__("torch").uint8).numpy().tobytes()
            if t.dtype != DTYPES["bool"]
            else t.numpy().tobytes()
        )
    return h.hexdigest()


class PrimitiveUnpickler(pickle.Unpickler):
    """Messages from the sandbox may only contain primitives: refuse every global lookup."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name} in a sandbox message")


def loads_untrusted(data: bytes):
    return PrimitiveUnpickler(io.BytesIO(data)).load()


def encode_case(case, table: list | None = None, index: dict | None = None) -> dict:
    """One case for the child. A tensor shared by several cases is encoded once into ``table`` (the child decodes
    a fresh copy per case, so a mutation cannot leak into the next case). Every launch gets its own fill pattern
    for the destination and for the memory freed before it (``fills``), chosen here at random."""
    import torch

    from .protocols.base import Out

    args = []
    for a in case.args:
        if isinstance(a, torch.Tensor) and table is not None:
            if id(a) not in index:
                index[id(a)] = len(table)
                table.append(encode_tensor(a))
            args.append(("__ref__", index[id(a)]))
        elif isinstance(a, torch.Tensor):
            args.append(encode_tensor(a))
        elif isinstance(a, Out):
            args.append(("__out__", tuple(a.shape), str(a.dtype).replace("torch.", ""), a.alias_of))
        else:
            args.append(a)
    # a case that replays gets at least three launches: two back to back in one child (a first call against a warm
    # one) and one in a fresh child on inputs at another address (sandbox.launch_round)
    repeat = max(case.repeat, 3) if case.repeat >= 2 else case.repeat
    launches = repeat * (9 if case.all_configs else 1)  # the child cycles through them for extra configs
    start = secrets.randbelow(len(FILL_PATTERNS))
    fills = [
        {
            "pattern": FILL_PATTERNS[(start + i) % len(FILL_PATTERNS)],
            "seed": secrets.randbits(62),
            "scale": float(10 ** (3 + secrets.randbelow(6))),
            "act_scale": 2.0 ** (secrets.randbelow(7) - 3),
        }
        for i in range(launches)
    ]
    nbytes = 4 * int(torch.Size(case.expect_shape).numel()) if case.expect_shape is not None else 0
    return {
        "key": case.key,
        "args": args,
        "kwargs": dict(case.kwargs),
        "repeat": repeat,
        "interleave": case.interleave,
        "all_configs": case.all_configs,
        "order": case.order,
        "fills": fills,
        "expect_nbytes": nbytes,
        "expect_shape": tuple(case.expect_shape) if case.expect_shape is not None else None,
    }
