"""RFC 6962 Merkle tree: roots against the reference vectors and an independent brute-force implementation,
inclusion proofs for every leaf of random-size trees, consistency proofs for every (m, n) of small trees, and
single-bit flips that must all fail."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings, strategies as hs

from workers.verify import merkle

# RFC 6962 reference leaves and roots (the certificate-transparency reference implementation's test data).
CT_LEAVES = [
    bytes.fromhex(h)
    for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")
]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def brute_mth(leaves: list[bytes]) -> bytes:
    """MTH straight from the RFC 6962 §2.1 text, over raw leaves, written independently of the module: find k
    by counting up powers of two, hash with hashlib directly."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + brute_mth(leaves[:k]) + brute_mth(leaves[k:])).digest()


def make_leaves(n: int, salt: int = 0) -> list[bytes]:
    return [f"leaf-{salt}-{i}".encode() for i in range(n)]


def flips(data: bytes):
    for i in range(len(data) * 8):
        b = bytearray(data)
        b[i // 8] ^= 1 << (i % 8)
        yield bytes(b)


def test_roots_match_the_rfc6962_reference_vectors():
    hashes = [merkle.leaf_hash(x) for x in CT_LEAVES]
    for n in range(len(CT_LEAVES) + 1):
        assert merkle.root(hashes[:n]).hex() == CT_ROOTS[n]


@given(hs.lists(hs.binary(max_size=12), max_size=70))
@settings(max_examples=150, deadline=None)
def test_root_matches_brute_force_recursion(leaves):
    assert merkle.root([merkle.leaf_hash(x) for x in leaves]) == brute_mth(leaves)


@given(hs.lists(hs.binary(max_size=6), max_size=70))
@settings(max_examples=60, deadline=None)
def test_prefix_roots_are_the_roots_of_every_prefix(leaves):
    hashes = [merkle.leaf_hash(x) for x in leaves]
    assert merkle.prefix_roots(hashes) == [brute_mth(leaves[:i]) for i in range(1, len(leaves) + 1)]


def test_split_point_is_largest_power_of_two_below_n():
    for n in range(2, 300):
        k = merkle.split_point(n)
        assert k < n <= 2 * k and k & (k - 1) == 0


@given(n=hs.integers(min_value=1, max_value=80), salt=hs.integers(0, 10**6))
@settings(max_examples=60, deadline=None)
def test_inclusion_proof_verifies_for_every_leaf(n, salt):
    leaves = make_leaves(n, salt)
    hashes = [merkle.leaf_hash(x) for x in leaves]
    root = brute_mth(leaves)
    bigger = brute_mth(leaves + [b"one more"])
    for i in range(n):
        proof = merkle.inclusion_proof(i, hashes)
        assert merkle.verify_inclusion(hashes[i], i, n, proof, root)
        # the same proof does not place the leaf anywhere else, nor in the tree with one more leaf
        if n > 1:
            assert not merkle.verify_inclusion(hashes[i], (i + 1) % n, n, proof, root)
            assert not merkle.verify_inclusion(hashes[(i + 1) % n], i, n, proof, root)
        assert not merkle.verify_inclusion(hashes[i], i, n + 1, proof, bigger)


@pytest.mark.parametrize("n", range(1, 34))
def test_consistency_proof_verifies_for_every_m_n_pair(n):
    leaves = make_leaves(n)
    hashes = [merkle.leaf_hash(x) for x in leaves]
    second = brute_mth(leaves)
    for m in range(1, n + 1):
        first = brute_mth(leaves[:m])
        proof = merkle.consistency_proof(m, hashes)
        assert merkle.verify_consistency(m, n, proof, first, second), (m, n)
        if m < n:
            # a first tree that is not a prefix of the second is refused
            other = brute_mth(leaves[: m - 1] + [b"rewritten"])
            assert not merkle.verify_consistency(m, n, proof, other, second), (m, n)
            assert not merkle.verify_consistency(m, n, [], first, second)


@given(n=hs.integers(min_value=2, max_value=40), data=hs.data())
@settings(max_examples=40, deadline=None)
def test_any_single_bit_flip_breaks_an_inclusion_proof(n, data):
    hashes = [merkle.leaf_hash(x) for x in make_leaves(n)]
    i = data.draw(hs.integers(0, n - 1))
    root = merkle.root(hashes)
    proof = merkle.inclusion_proof(i, hashes)
    for bad_leaf in flips(hashes[i]):
        assert not merkle.verify_inclusion(bad_leaf, i, n, proof, root)
    for bad_root in flips(root):
        assert not merkle.verify_inclusion(hashes[i], i, n, proof, bad_root)
    j = data.draw(hs.integers(0, len(proof) - 1))
    for bad in flips(proof[j]):
        assert not merkle.verify_inclusion(hashes[i], i, n, proof[:j] + [bad] + proof[j + 1 :], root)


@given(n=hs.integers(min_value=2, max_value=40), data=hs.data())
@settings(max_examples=40, deadline=None)
def test_any_single_bit_flip_breaks_a_consistency_proof(n, data):
    hashes = [merkle.leaf_hash(x) for x in make_leaves(n)]
    m = data.draw(hs.integers(1, n - 1))
    first, second = merkle.root(hashes[:m]), merkle.root(hashes)
    proof = merkle.consistency_proof(m, hashes)
    for bad in flips(first):
        assert not merkle.verify_consistency(m, n, proof, bad, second)
    for bad in flips(second):
        assert not merkle.verify_consistency(m, n, proof, first, bad)
    j = data.draw(hs.integers(0, len(proof) - 1))
    for bad in flips(proof[j]):
        assert not merkle.verify_consistency(m, n, proof[:j] + [bad] + proof[j + 1 :], first, second)


def test_proof_requests_outside_the_tree_are_refused():
    hashes = [merkle.leaf_hash(x) for x in make_leaves(5)]
    with pytest.raises(ValueError):
        merkle.inclusion_proof(5, hashes)
    with pytest.raises(ValueError):
        merkle.consistency_proof(6, hashes)
    assert not merkle.verify_inclusion(hashes[0], 0, 0, [], merkle.EMPTY_ROOT)
