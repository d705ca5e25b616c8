"""Implementations whose behaviour differs on GPUs (used by bench/contracts_gpu.py; they run on CPU too)."""

from __future__ import annotations

import torch


def index_add_row_sum(x):
    """C-ORD-02 signature via index_add_: on CUDA the scatter uses atomicAdd, so the order in which the
    elements of a row arrive (and the rounding) can change from launch to launch. Deterministic on CPU."""
    R, N = x.shape
    rows = torch.arange(R, device=x.device).repeat_interleave(N)
    out = torch.zeros(R, dtype=x.dtype, device=x.device)
    out.index_add_(0, rows, x.reshape(-1))
    return out


def scatter_add_row_sum(x):
    R, N = x.shape
    rows = torch.arange(R, device=x.device).repeat_interleave(N)
    return torch.zeros(R, dtype=x.dtype, device=x.device).scatter_add_(0, rows, x.reshape(-1))
