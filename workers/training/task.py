"""Synthetic RL task with rewards in [0, 1] (used by the audit and bench/cdppo_mini.py).

Copy task: the prompt is P tokens x_0..x_{P−1}; the target at response position t is x_{t mod P};
R(x, y) = (1/T)·Σ_t 1[y_t = x_{t mod P}] ∈ [0, 1]. A uniform policy scores 1/V.
"""

from __future__ import annotations

import torch


def copy_reward(prompts: torch.Tensor, responses: torch.Tensor, vocab: int | None = None) -> torch.Tensor:
    """R = mean_t 1[y_t = x_{t mod P}] as float64 ``[B]`` (vectorised)."""
    P = prompts.shape[1]
    T = responses.shape[1]
    idx = torch.arange(T, device=prompts.device) % P
    target = prompts[:, idx]
    return (responses == target).to(torch.float64).mean(-1)


def group_advantages(R: torch.Tensor, group: int, *, std: bool = False) -> torch.Tensor:
    """GRPO-style advantages Â_i = R_i − mean_group(R) (optionally divided by the group std); groups are
    consecutive blocks of ``group`` rows."""
    g = R.reshape(-1, group)
    a = g - g.mean(-1, keepdim=True)
    if std:
        a = a / (g.std(-1, keepdim=True) + 1e-6)
    return a.reshape(-1)
