"""DAPO's soft overlong punishment (Yu et al. 2025, "DAPO", eq. 13; docs/recipe.md section 4.4).

A length reward added to the task reward of an answer of |y| tokens, with L_max the sampling limit
(`max_tokens`) and L_cache the buffer before it:

    R_length(y) = 0                              if |y| <= L_max - L_cache
                = ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
                = -1                             if L_max < |y|

It falls linearly from 0 at L_max - L_cache to -1 at L_max, so an answer the engine cut at the limit
(|y| = L_max) gets -1, as one past it would.
"""

from __future__ import annotations


def soft_overlong_penalty(length: int, max_tokens: int, buffer_tokens: int) -> float:
    """R_length of an answer of `length` tokens (<= 0): 0 up to max_tokens - buffer_tokens, then
    linear down to -1 at max_tokens, and -1 beyond. Needs 1 <= buffer_tokens < max_tokens."""
    if not 1 <= buffer_tokens < max_tokens:
        raise ValueError(f"soft overlong punishment needs 1 <= buffer_tokens < max_tokens "
                         f"(got buffer_tokens={buffer_tokens}, max_tokens={max_tokens})")
    expected = max_tokens - buffer_tokens  # L_max - L_cache: the longest answer that costs nothing
    if length <= expected:
        return 0.0
    if length <= max_tokens:
        return (expected - length) / buffer_tokens
    return -1.0
