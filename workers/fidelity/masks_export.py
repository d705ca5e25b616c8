"""Loss-mask export (docs/fidelity-rules.md#definitions): per call, mask[t] = verifiable[t] ∧ policy response token.

Every audited record with a ``call_id`` gets an entry (excluded calls: all zeros), in file order. Two formats:

**JSONL** (``format="jsonl"``), one object per line::

    {"call_id": str, "trajectory_id": str|null, "sample_id": str|null, "line": int,
     "n_tokens": int, "verifiable_tokens": int, "mask": [0|1, …]}

**Binary** (``format="bin"``), little-endian, for training loaders::

    b"FCRMASK1"                                  8-byte magic
    repeated per call:
      u16  len(call_id_utf8)   call_id_utf8
      u32  n_tokens
      ceil(n_tokens / 8) bytes: numpy.packbits(mask, bitorder="little") (bit t of the call = byte t//8, bit t%8)

:func:`read_masks` reads either format back as ``(call_id, numpy bool array)`` pairs.
"""

from __future__ import annotations

import struct

import numpy as np
import orjson

MAGIC = b"FCRMASK1"


class MaskWriter:
    def __init__(self, path, fmt: str = "jsonl"):
        if fmt not in ("jsonl", "bin"):
            raise ValueError("mask format must be 'jsonl' or 'bin'")
        self.path, self.fmt = path, fmt
        self.fh = open(path, "wb")
        self.calls = 0
        self.tokens_on = 0
        if fmt == "bin":
            self.fh.write(MAGIC)

    def write(self, entry: dict, mask: np.ndarray):
        cid = entry.get("call_id")
        if cid is None:
            return
        mask = np.asarray(mask, dtype=bool)
        self.calls += 1
        self.tokens_on += int(mask.sum())
        if self.fmt == "jsonl":
            self.fh.write(
                orjson.dumps(
                    {
                        "call_id": cid,
                        "trajectory_id": entry.get("trajectory_id"),
                        "sample_id": entry.get("sample_id"),
                        "line": entry.get("line"),
                        "n_tokens": int(len(mask)),
                        "verifiable_tokens": int(mask.sum()),
                        "mask": mask.astype(np.int8).tolist(),
                    }
                )
                + b"\n"
            )
        else:
            b = cid.encode("utf-8")
            self.fh.write(struct.pack("<H", len(b)) + b + struct.pack("<I", len(mask)))
            self.fh.write(np.packbits(mask, bitorder="little").tobytes())

    def close(self) -> dict:
        self.fh.close()
        return {"path": str(self.path), "format": self.fmt, "calls": self.calls, "tokens_on": self.tokens_on}


def read_masks(path):
    """Yield ``(call_id, mask)`` from a JSONL or binary mask export."""
    with open(path, "rb") as fh:
        head = fh.read(len(MAGIC))
        if head == MAGIC:
            while True:
                h = fh.read(2)
                if not h:
                    return
                (k,) = struct.unpack("<H", h)
                cid = fh.read(k).decode("utf-8")
                (n,) = struct.unpack("<I", fh.read(4))
                bits = np.frombuffer(fh.read((n + 7) // 8), dtype=np.uint8)
                yield cid, np.unpackbits(bits, bitorder="little")[:n].astype(bool)
        else:
            fh.seek(0)
            for line in fh:
                if line.strip():
                    d = orjson.loads(line)
                    yield d["call_id"], np.asarray(d["mask"], dtype=bool)
