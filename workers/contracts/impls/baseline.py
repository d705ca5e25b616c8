"""Baselines: implementations that fail the visible functional check (the first calibration state)."""

from __future__ import annotations

import torch


def zeros_matmul(a, b, *, config=None):
    return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)


zeros_matmul.configs = ["A"]


def uncentred_layer_norm(x, eps: float = 1e-5):
    """Forgets to subtract the mean."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def zeros_mul(x, w):
    return torch.zeros_like(x * w)


def transposed_linear(x, w):
    """Uses w as if it were [N, K]: right shape only for square w, wrong values."""
    return x @ w.t().contiguous().reshape(w.shape)


def first_column_mean(x):
    return x[:, 0].clone()


def row_sum_first_half(x):
    return x[:, : x.shape[1] // 2].sum(-1)


def zeros_rms_norm(x, out, eps: float = 1e-6):
    out.zero_()
    return out


def identity_softmax(x):
    return x.clone()


def row_min(x):
    return torch.amin(x, -1)


def zeros_gather(data, idx):
    return torch.zeros(idx.shape[0], data.shape[1], dtype=data.dtype, device=data.device)
