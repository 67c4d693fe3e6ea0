"""Newton-Schulz orthogonalisation: a matrix G = U S V^T -> about U V^T, by matmuls only.

Keller Jordan's quintic iteration (kellerjordan.github.io/posts/muon): scale G by its Frobenius norm (so every
singular value is <= 1), then apply X <- a X + b (X X^T) X + c (X X^T)^2 X `steps` times. On the singular
values that is s <- a s + b s^3 + c s^5; the published (a, b, c) = (3.4445, -4.7750, 2.0315) trade exact
convergence for speed: after 5 steps the singular values sit in about [0.68, 1.13], not at 1, which
Keller Jordan and Moonlight found trains as well as U V^T.
"""

from __future__ import annotations

import torch

NORM_EPS = 1e-7
"""Added to the Frobenius norm before dividing (Keller Jordan's and torch.optim.Muon's): a zero matrix stays zero."""


def newton_schulz(matrix: torch.Tensor, steps: int, coefficients: tuple[float, float, float],
                  dtype: torch.dtype) -> torch.Tensor:
    """About U V^T of `matrix` [m, n] (U S V^T its SVD), computed in `dtype`, returned in `dtype`.

    The Gram matrix is taken on the short side: a tall [m, n] (m > n) is transposed first, so every
    matmul is [min, min] x [min, max] and the work is ~ steps * (2 min^2 max + min^3) multiply-adds."""
    a, b, c = coefficients
    x = matrix.to(dtype)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / (x.norm() + NORM_EPS)  # [short, long], spectral norm <= Frobenius norm = 1
    for _ in range(steps):
        gram = x @ x.T  # [short, short]
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.T if tall else x


def newton_schulz_flops(shape: tuple[int, int], steps: int) -> int:
    """Multiply-adds of `newton_schulz` on an [m, n] matrix: per step X X^T (s^2 l), its square (s^3), times X
    (s^2 l), with s, l the short and long sides. The cost owners are balanced by (training/optim/parallel.py)."""
    short, long = sorted(shape)
    return steps * (2 * short * short * long + short ** 3)
