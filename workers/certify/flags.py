"""Data-error flags and input tolerances of the token-interval engine (fail closed:
docs/intervals.md#error-robust-widening).

Any non-zero flag makes a position fail closed: TV ∈ [0, 1], KL ≤ +∞, status DATA_ERROR. The flags are int32 bits so
one position can carry several reasons; :func:`describe_errors` turns a mask into words for error messages.
"""

from __future__ import annotations

ERR_NONFINITE = 1
ERR_POSITIVE = 2
ERR_UNSORTED = 4
ERR_DUPLICATE = 8
ERR_MASS = 16
ERR_SAMPLED_MISMATCH = 32
ERR_SAMPLED_ABOVE_CAP = 64
ERR_PADDING = 128
ERR_BAD_ID = 256
ERR_REASONS = {
    ERR_NONFINITE: "non-finite log-prob",
    ERR_POSITIVE: "positive log-prob",
    ERR_UNSORTED: "top-K list not sorted descending",
    ERR_DUPLICATE: "duplicate id in a top-K list",
    ERR_MASS: "listed probabilities sum above 1",
    ERR_SAMPLED_MISMATCH: "sampled-token log-prob disagrees with its top-K entry",
    ERR_SAMPLED_ABOVE_CAP: "sampled token more likely than the K-th listed token but not listed (not a top-K list)",
    ERR_PADDING: "padding (id -1) before a listed entry",
    ERR_BAD_ID: "negative sampled token id",
}

POS_TOL = 1e-6  # a log-prob above this is "positive" (log_softmax rounding can give +1e-7)
# Consistency tolerances are double-precision arithmetic only. The declared precision (η boxes, robust.py) is the
# whole allowance for logged values: data that no distribution within it can produce — the lower ends of the listed
# probabilities summing above 1, or two readings of one token further apart than their η — are a DATA_ERROR. (They
# were 1e-4 and 1e-5, which certified such data from one reading: up to ≈ 5e-5 of TV with nothing to back it.)
SUM_TOL = 1e-12  # Σ of the listed probabilities' lower box ends may exceed 1 by the rounding of the sum only
AGREE_TOL = 1e-12  # |sampled log-prob − its list entry| beyond both η (log space): rounding of the subtraction only


def describe_errors(flags: int) -> list[str]:
    """Human reasons for an error bit mask."""
    return [msg for bit, msg in ERR_REASONS.items() if int(flags) & bit]
