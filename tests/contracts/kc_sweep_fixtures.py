"""A fixture whose only defect is on the directed probes (identity products), for the failing-clause test."""

import torch


def probe_breaking_matmul(a, b, *, config=None):
    """Correct except when one operand is an exact identity matrix: then one ulp is added to every entry."""
    out = torch.matmul(a, b)
    for m in (a, b):
        if m.shape[0] == m.shape[1] and torch.equal(m, torch.eye(m.shape[0])):
            return torch.nextafter(out, torch.full_like(out, float("inf")))
    return out
