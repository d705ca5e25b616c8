"""What a damaged gzip stream holds, worked out without the reader under test."""

from __future__ import annotations

import zlib


def inflatable_prefix(blob: bytes) -> bytes:
    """What zlib inflates of ``blob`` before the byte it refuses: fed one byte at a time, nothing is held back."""
    d, out = zlib.decompressobj(16 + zlib.MAX_WBITS), bytearray()
    for k in range(len(blob)):
        try:
            out += d.decompress(blob[k : k + 1])
        except zlib.error:
            break
    return bytes(out)
