"""Exact sums of float64 values, so that a sum does not depend on the order its terms arrive in.

A run certificate is merged from partial certificates computed on pieces of a file by different workers
(workers/certify/partial.py). A float running sum changes in its last bits with the order of its terms, so two
workers' pieces merged in either order, or a file cut at another place, would give a different certificate. Here a
sum is kept *exactly*: every float64 is an integer multiple of 2⁻¹⁰⁷⁴, so a sum is an integer times that unit. The
integer is held as 68 signed 64-bit "windows" of 32 bits each (value = Σ_w acc[w] · 2^(32·w − 1126)); adding a value
adds its 53-bit significand, split into 32-bit pieces, to the three windows it covers. Integer addition is exact,
associative and commutative, so ``merge`` in any order and ``add`` in any grouping give the same integers; reading
a sum (:meth:`ExactSums.values`) rounds that integer once, correctly (Python's int / int division), to float64.

Non-finite terms are counted apart (+inf, −inf, NaN) and give IEEE results: +inf and −inf together, or any NaN,
read as NaN. Each window takes pieces below 2³³; a window is carried into the next before it could pass 2⁶², so a
sum of any length stays exact. ``ExactSums(n)`` holds ``n`` independent sums ("slots"); numpy does the splitting,
so adding a chunk's values costs a few vector passes, not a Python operation per value.
"""

from __future__ import annotations

import numpy as np

BASE = -1126  # exponent of window 0's unit; the smallest float64 (2**-1074) has its significand's LSB at 2**-1126+52
WINDOWS = 68  # 32 * 68 bits cover 2**-1126 .. 2**1050: every finite float64 and sums far past the largest
M32 = (1 << 32) - 1
BINCOUNT_EXACT = 1 << 18  # values per bincount: a bin then gets < 3 * 2**18 pieces of < 2**33, a total < 2**53: exact
CARRY_AT = 1 << 61


class ExactSums:
    """``n`` exact float64 sums (see the module docstring). ``add(slots, values)``, ``merge(other)``, ``values()``,
    ``to_json()`` / ``from_json()``; the number of slots grows as needed (``grow``)."""

    __slots__ = ("acc", "special")

    def __init__(self, n: int = 0):
        self.acc = np.zeros((n, WINDOWS), np.int64)
        self.special = np.zeros((n, 3), np.int64)  # counts of +inf, −inf, NaN terms

    def __len__(self) -> int:
        return self.acc.shape[0]

    def grow(self, n: int) -> None:
        if n > len(self):
            extra = n - len(self)
            self.acc = np.concatenate([self.acc, np.zeros((extra, WINDOWS), np.int64)])
            self.special = np.concatenate([self.special, np.zeros((extra, 3), np.int64)])

    def add(self, slots, values) -> None:
        """Add ``values[i]`` to slot ``slots[i]`` (arrays of one length; an int ``slots`` means every value)."""
        v = np.asarray(values, dtype=np.float64).ravel()
        s = np.broadcast_to(np.asarray(slots, dtype=np.int64), v.shape).ravel()
        if not v.size:
            return
        self.grow(int(s.max()) + 1)
        finite = np.isfinite(v)
        if not finite.all():
            for col, mask in enumerate((v == np.inf, v == -np.inf, np.isnan(v))):
                np.add.at(self.special[:, col], s[mask], 1)
            v, s = v[finite], s[finite]
        keep = v != 0.0
        v, s = v[keep], s[keep]
        for i in range(0, v.size, BINCOUNT_EXACT):
            self._add_finite(s[i : i + BINCOUNT_EXACT], v[i : i + BINCOUNT_EXACT])

    def _add_finite(self, s: np.ndarray, v: np.ndarray) -> None:
        mant, exp = np.frexp(np.abs(v))
        m = (mant * 9007199254740992.0).astype(np.int64)  # the 53-bit significand: exact (mant * 2**53)
        off = exp.astype(np.int64) + 1073  # bit position of the significand's LSB above 2**BASE
        w, r = off >> 5, off & 31
        lo = (m & M32) << r  # < 2**63
        hi = (m >> 32) << r  # < 2**52
        sign = np.where(v < 0, -1.0, 1.0)
        at = s * WINDOWS + w
        idx = np.concatenate([at, at + 1, at + 2])
        pieces = np.concatenate([lo & M32, (lo >> 32) + (hi & M32), hi >> 32]).astype(np.float64)
        totals = np.bincount(idx, weights=np.tile(sign, 3) * pieces)  # exact integers below 2**52 (BINCOUNT_EXACT)
        self.acc.reshape(-1)[: totals.size] += totals.astype(np.int64)
        if np.abs(self.acc).max(initial=0) >= CARRY_AT:
            self._carry()

    def _carry(self) -> None:
        c = self.acc[:, :-1] >> 32  # floor: the low 32 bits stay, non-negative
        self.acc[:, :-1] -= c << 32
        self.acc[:, 1:] += c

    def merge(self, other: "ExactSums") -> "ExactSums":
        """Add ``other``'s sums slot by slot into this one (in place; returns self)."""
        self.grow(len(other))
        self._carry()
        o = other.acc.copy()
        c = o[:, :-1] >> 32
        o[:, :-1] -= c << 32
        o[:, 1:] += c
        self.acc[: len(other)] += o
        self.special[: len(other)] += other.special
        return self

    def integers(self) -> list[int]:
        """Each slot's exact sum as an integer multiple of 2**BASE (finite terms only)."""
        out = [0] * len(self)
        rows, cols = np.nonzero(self.acc)
        for i, w in zip(rows.tolist(), cols.tolist()):
            out[i] += int(self.acc[i, w]) << (32 * w)
        return out

    def values(self) -> np.ndarray:
        """The sums, each correctly rounded to float64 once (IEEE results for non-finite terms)."""
        unit = 1 << -BASE
        out = np.empty(len(self))
        for i, n in enumerate(self.integers()):
            pinf, ninf, nan = self.special[i].tolist()
            if nan or (pinf and ninf):
                out[i] = np.nan
            elif pinf or ninf:
                out[i] = np.inf if pinf else -np.inf
            else:
                try:
                    out[i] = n / unit
                except OverflowError:
                    out[i] = np.inf if n > 0 else -np.inf
        return out

    def value(self, slot: int) -> float:
        return float(self.values()[slot]) if slot < len(self) else 0.0

    def to_json(self) -> dict:
        """Canonical and compact: each sum as ``"<hex odd integer>p<exponent>"`` (``"0"`` for zero)."""
        terms = []
        for n in self.integers():
            if n == 0:
                terms.append("0")
                continue
            k = (n & -n).bit_length() - 1
            terms.append(f"{n >> k:x}p{k + BASE}")
        out = {"sums": terms}
        if self.special.any():
            out["special"] = self.special.tolist()
        return out

    @classmethod
    def from_json(cls, data: dict) -> "ExactSums":
        terms = data["sums"]
        self = cls(len(terms))
        for i, t in enumerate(terms):
            if t == "0":
                continue
            mant, _, exp = t.partition("p")
            n, shift = int(mant, 16), int(exp) - BASE
            sign, n = (-1, -n) if n < 0 else (1, n)
            # from the window of the lowest set bit: the ~30 windows below it are zero, and a numpy element store
            # per window was most of a merge's reading time
            start = min(shift >> 5, WINDOWS - 1)
            n <<= shift - 32 * start
            row = []
            for w in range(start, WINDOWS):
                if w == WINDOWS - 1:  # the top window keeps what is left (carried sums can exceed 32 bits there)
                    row.append(sign * n)
                    break
                row.append(sign * (n & M32))
                n >>= 32
                if not n:
                    break
            self.acc[i, start : start + len(row)] = row
        if "special" in data:
            self.special[:] = np.asarray(data["special"], np.int64).reshape(-1, 3)
        return self


def encode_float(x: float):
    """A float for JSON that keeps ±inf and NaN (orjson writes them as null): those become strings."""
    x = float(x)
    return x if np.isfinite(x) else repr(x)  # 'inf', '-inf', 'nan'


def decode_float(x) -> float:
    return float(x)
