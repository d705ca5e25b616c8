"""RFC 6962 Merkle tree hashing, inclusion and consistency proofs (no Django, no I/O).

Definitions (RFC 6962 §2.1, unchanged in RFC 9162 §2.1):

* leaf hash  ``MTH({d0}) = SHA-256(0x00 || d0)``
* empty tree ``MTH({}) = SHA-256("")``
* node hash  ``SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))`` where ``k`` is the largest power of two smaller
  than ``n`` (``k < n <= 2k``). This split is what gives trees whose size is not a power of two their shape:
  the left subtree is always a perfect tree, the right one holds the remainder.

Proofs:

* inclusion (audit) path ``PATH(m, D[n])`` — RFC 6962 §2.1.1; verified with the iterative algorithm of
  RFC 9162 §2.1.3.2.
* consistency proof ``PROOF(m, D[n]) = SUBPROOF(m, D[n], true)`` — RFC 6962 §2.1.2; verified with
  RFC 9162 §2.1.4.2.

Every function takes *leaf hashes* (32-byte digests already domain-separated with 0x00), so a log stores one
hash per entry and never needs the entries themselves to build a proof. Building a proof or a root is O(n)
hashes over the leaf hashes; verifying one is O(log n).
"""

from __future__ import annotations

import hashlib

HASH_SIZE = 32
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)`` (RFC 6962 §2.1)."""
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)`` (RFC 6962 §2.1)."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (``n >= 2``): the RFC 6962 ``k``."""
    if n < 2:
        raise ValueError("a split needs at least two leaves")
    return 1 << ((n - 1).bit_length() - 1)


def _root(hashes, lo: int, hi: int) -> bytes:
    n = hi - lo
    if n == 1:
        return hashes[lo]
    k = split_point(n)
    return node_hash(_root(hashes, lo, lo + k), _root(hashes, lo + k, hi))


def root(leaf_hashes) -> bytes:
    """``MTH(D[n])`` over leaf hashes (RFC 6962 §2.1); the empty tree's root is ``SHA-256("")``."""
    if not leaf_hashes:
        return EMPTY_ROOT
    return _root(leaf_hashes, 0, len(leaf_hashes))


def prefix_roots(leaf_hashes) -> list[bytes]:
    """``[MTH(D[1]), MTH(D[2]), …, MTH(D[n])]`` in O(n) node hashes amortised plus O(log n) per size.

    After ``i`` leaves the tree is a sequence of perfect subtrees whose sizes are the binary digits of ``i``
    (largest first); by the RFC 6962 §2.1 split, ``MTH(D[i])`` folds them right to left: ``node(P_1, node(P_2, … P_last))``."""
    stack: list[tuple[int, bytes]] = []  # (height, root of a perfect subtree)
    out = []
    for h in leaf_hashes:
        height, cur = 0, h
        while stack and stack[-1][0] == height:
            cur = node_hash(stack.pop()[1], cur)
            height += 1
        stack.append((height, cur))
        r = stack[-1][1]
        for _, left in reversed(stack[:-1]):
            r = node_hash(left, r)
        out.append(r)
    return out


def _path(m: int, hashes, lo: int, hi: int) -> list[bytes]:
    n = hi - lo
    if n == 1:
        return []
    k = split_point(n)
    if m < k:
        return _path(m, hashes, lo, lo + k) + [_root(hashes, lo + k, hi)]
    return _path(m - k, hashes, lo + k, hi) + [_root(hashes, lo, lo + k)]


def inclusion_proof(index: int, leaf_hashes) -> list[bytes]:
    """``PATH(index, D[n])`` (RFC 6962 §2.1.1): the audit path of leaf ``index`` in the tree of ``leaf_hashes``."""
    n = len(leaf_hashes)
    if not 0 <= index < n:
        raise ValueError(f"leaf index {index} is outside a tree of size {n}")
    return _path(index, leaf_hashes, 0, n)


def _subproof(m: int, hashes, lo: int, hi: int, complete: bool) -> list[bytes]:
    n = hi - lo
    if m == n:
        return [] if complete else [_root(hashes, lo, hi)]
    k = split_point(n)
    if m <= k:
        return _subproof(m, hashes, lo, lo + k, complete) + [_root(hashes, lo + k, hi)]
    return _subproof(m - k, hashes, lo + k, hi, False) + [_root(hashes, lo, lo + k)]


def consistency_proof(first: int, leaf_hashes) -> list[bytes]:
    """``PROOF(first, D[n]) = SUBPROOF(first, D[n], true)`` (RFC 6962 §2.1.2) for ``0 < first <= n``."""
    n = len(leaf_hashes)
    if not 0 < first <= n:
        raise ValueError(f"no consistency proof from size {first} to size {n}")
    return _subproof(first, leaf_hashes, 0, n, True)


def verify_inclusion(leaf: bytes, index: int, tree_size: int, proof: list[bytes], expected_root: bytes) -> bool:
    """RFC 9162 §2.1.3.2: does ``proof`` show leaf hash ``leaf`` at ``index`` in the tree with ``expected_root``?"""
    if not 0 <= index < tree_size or any(len(p) != HASH_SIZE for p in proof):
        return False
    fn, sn, r = index, tree_size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == expected_root


def verify_consistency(first: int, second: int, proof: list[bytes], first_root: bytes, second_root: bytes) -> bool:
    """RFC 9162 §2.1.4.2: is the tree of size ``second`` an append-only extension of the one of size ``first``?

    ``first == second`` holds with an empty proof and equal roots; ``first == 0`` (the empty tree) is consistent
    with every tree and needs an empty proof."""
    if any(len(p) != HASH_SIZE for p in proof) or first < 0 or second < first:
        return False
    if first == second:
        return not proof and first_root == second_root
    if first == 0:
        return not proof
    if not proof:
        return False
    if first & (first - 1) == 0:  # an exact power of two: its root is the first node of the path
        proof = [first_root, *proof]
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_root and sr == second_root and sn == 0
