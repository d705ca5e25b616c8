"""Baselines of the declared-property contracts (docs/contracts.md#declared-property-contracts): they fail even the
naive allclose check. For the batch-invariance contracts each reduces over the wrong dimension — the batch — so it
is also batch-variant (a wrong kernel that happens to be batch-invariant would pass a contract that states only
invariance; the baseline must not)."""

from __future__ import annotations

import torch


def batch_rms_norm(x, out, eps: float = 1e-6):
    torch.mul(x, torch.rsqrt((x * x).mean(0, keepdim=True) + eps), out=out)
    return out


def batch_layer_norm(x, eps: float = 1e-5):
    c = x - x.mean(0, keepdim=True)
    return c / torch.sqrt((c * c).mean(0, keepdim=True) + eps)


def batch_softmax(x):
    return torch.softmax(x, 0)


def batch_centred_matmul(a, b, *, config=None):
    return (a - a.mean(0, keepdim=True)) @ b


def cross_batch_attention(q, k, v):
    """Every query attends to the keys of every sequence in the batch."""
    B, S, d = k.shape
    s = (q @ k.reshape(B * S, d).T) / d**0.5
    return torch.softmax(s, -1) @ v.reshape(B * S, d)


def relu_gelu(x, out):
    return out.copy_(torch.relu(x))


def suffix_cumsum(x):
    """Sums from the end of the row."""
    return torch.flip(torch.cumsum(torch.flip(x, [-1]), -1), [-1])


def bottom_k(x, k):
    return torch.sort(x, dim=-1, stable=True).indices[:, :k].contiguous()


def unmasked_attention(q, k, v):
    return torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, -1) @ v
