"""One Muon step of one matrix, in its parts (Moonlight's Algorithm 1 with Nesterov momentum, arXiv:2502.16982):

    B <- mu B + g                         momentum, one buffer per matrix (elementwise: a shard's is exact)
    U  = g + mu B   (nesterov) | B        what is orthogonalised
    O  = NS(U)                            training/optim/newton_schulz.py, on the whole matrix
    W <- W (1 - lr wd) - lr scale(A, B) O  decoupled weight decay, then the scaled update

The parts are split so the elementwise ones run on a rank's shard and only NS needs the whole matrix
(training/optim/parallel.py).
"""

from __future__ import annotations

import math

import torch


def momentum_update(buffer: torch.Tensor, grad: torch.Tensor, momentum: float, nesterov: bool) -> torch.Tensor:
    """Advance `buffer` in place (B <- mu B + g) and return what Newton-Schulz orthogonalises (a new tensor
    with nesterov, else the buffer itself: NS does not write to it). Any shape: a shard works as the whole."""
    buffer.mul_(momentum).add_(grad)
    return grad.add(buffer, alpha=momentum) if nesterov else buffer


def update_scale(shape: tuple[int, ...], rule: str) -> float:
    """The factor on the orthogonalised update of an [A, B] matrix.

    'match_adamw_rms': 0.2 sqrt(max(A, B)). O's singular values are ~1, so its RMS is
    sqrt(min(A, B) / (A B)) = 1 / sqrt(max(A, B)); times this factor it is 0.2, the RMS Moonlight measured for
    AdamW's updates, so AdamW's lr and weight decay carry over (Liu et al. 2025, section 2.2).
    'keller': sqrt(max(1, A / B)), Keller Jordan's original (torch.optim.Muon's default)."""
    rows, cols = shape
    if rule == "match_adamw_rms":
        return 0.2 * math.sqrt(max(rows, cols))
    if rule == "keller":
        return math.sqrt(max(1.0, rows / cols))
    raise ValueError(f"update_scale must be 'match_adamw_rms' or 'keller', got {rule!r}")


def apply_update(weight: torch.Tensor, orthogonal: torch.Tensor, lr: float, scale: float, weight_decay: float) -> None:
    """W <- W (1 - lr wd) - lr scale O, in place; `weight` and `orthogonal` the same shape (a shard and its rows
    of O under ranks). O arrives in Newton-Schulz's dtype and is cast to the weight's."""
    if weight_decay:
        weight.mul_(1.0 - lr * weight_decay)
    weight.add_(orthogonal.to(weight.dtype), alpha=-lr * scale)
