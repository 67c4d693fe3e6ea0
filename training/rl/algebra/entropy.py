"""Token entropy of the policy, computed chunk by chunk (docs/recipe.md section 7).

H_t = -sum_v p_v log p_v = logsumexp(z) - sum_v softmax(z)_v z_v for logits z `[V]`.
Logits `[B, T, V]` are flattened to `[B*T, V]` and processed `chunk_size` rows at a time, so at
most one `[chunk_size, V]` block of probabilities exists at once (with V = 49k and T = 4k a full
softmax copy would be as large as the logits themselves). Entropy here is a monitor: it is
computed without gradient.
"""

from collections.abc import Callable

import torch
from torch import Tensor


def _chunk_entropy(logits: Tensor) -> Tensor:
    """Entropy in nats `[N]` of the rows of `[N, V]` logits, in float32."""
    logits = logits.float()
    log_normalizer = torch.logsumexp(logits, dim=-1)  # [N]
    probs = torch.softmax(logits, dim=-1)  # [N, V]: the one chunk-sized block
    # A -inf logit (a banned token) has p = 0; clamping keeps 0 * -inf from becoming NaN.
    finite_logits = logits.clamp(min=torch.finfo(torch.float32).min)
    return log_normalizer - (probs * finite_logits).sum(dim=-1)


def _reduce(entropy: Tensor, mask: Tensor, reduction: str) -> float | Tensor:
    """Mean over response tokens (float) or the masked `[B, T]` tensor (0 off the mask)."""
    is_response = mask > 0
    entropy = torch.where(is_response, entropy, torch.zeros_like(entropy))
    if reduction == "none":
        return entropy
    if reduction == "mean":
        return float(entropy.sum() / is_response.sum().clamp(min=1))
    raise ValueError(f"unknown reduction {reduction!r}; expected 'mean' or 'none'")


def _chunked_entropy(rows_to_logits: Callable[[int, int], Tensor], mask: Tensor, chunk_size: int) -> Tensor:
    """Entropy `[B, T]` where `rows_to_logits(start, stop)` gives the `[stop-start, V]` logits of
    flattened rows start..stop. Chunks with no response token are skipped (left 0)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    flat_mask = mask.reshape(-1) > 0
    num_rows = flat_mask.numel()
    entropy = torch.zeros(num_rows, dtype=torch.float32, device=mask.device)
    for start in range(0, num_rows, chunk_size):
        stop = min(start + chunk_size, num_rows)
        if flat_mask[start:stop].any():
            entropy[start:stop] = _chunk_entropy(rows_to_logits(start, stop))
    return entropy.reshape(mask.shape)


@torch.no_grad()
def token_entropy(logits: Tensor, mask: Tensor, chunk_size: int = 1024, reduction: str = "mean") -> float | Tensor:
    """Entropy of the next-token distribution at each response position.

    logits: `[B, T, V]`; mask: 0/1 `[B, T]`. reduction="mean" returns the mean over response
    tokens as a float; "none" returns float32 `[B, T]` with 0 at masked positions. Masked
    logits are never trusted (they may be NaN).
    """
    flat_logits = logits.reshape(-1, logits.shape[-1])  # [B*T, V], a view
    entropy = _chunked_entropy(lambda start, stop: flat_logits[start:stop], mask, chunk_size)
    return _reduce(entropy, mask, reduction)


@torch.no_grad()
def entropy_from_hidden(
    hidden: Tensor, lm_head_weight: Tensor, mask: Tensor, chunk_size: int = 1024, reduction: str = "mean"
) -> float | Tensor:
    """Like `token_entropy`, from final hidden states `[B, T, H]` and the LM head `[V, H]`.

    The logits are formed chunk by chunk too (`[chunk_size, V]` at a time), so the full
    `[B, T, V]` logits never exist: useful when the trainer computes log-probs the same way.
    """
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])  # [B*T, H]
    entropy = _chunked_entropy(lambda start, stop: flat_hidden[start:stop] @ lm_head_weight.T, mask, chunk_size)
    return _reduce(entropy, mask, reduction)
