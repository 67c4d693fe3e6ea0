"""LM head + cross-entropy chunk by chunk along tokens, never materializing [N, V] logits.

At long context the logits dominate memory: N = 32K tokens x V = 49152 x 4 bytes = 6.4 GB in fp32,
for one sequence, plus the same again for their gradient. Here each chunk of `chunk_size` tokens
computes its logits, reduces them to one log-prob per token, and drops them; the chunk runs under
`torch.utils.checkpoint`, so backward recomputes that chunk's logits instead of storing them.
Peak extra memory is O(chunk_size * V) in forward and backward.

On CUDA with `liger_kernel` installed, `chunked_lm_loss` uses Liger's fused linear cross-entropy
(the same idea in Triton, with the gradient computed during forward). Its chunk matmuls are plain
torch matmuls, so under bf16 autocast they would run in bf16 while the CPU's path below keeps the
head in fp32: the same config would compute another loss on each device. Liger is therefore called
with autocast off and fp32 inputs (`head_fp32`, the default), as the head below is.

Log-softmax is always computed in fp32 (the hidden states and head weight are upcast per chunk),
which is also what the RL mismatch metric needs from `logprobs_of_tokens`. Under bf16 autocast the
chunk's head matmul is taken out of autocast too: bf16 keeps 8 bits of mantissa, so a logit near 20
would be rounded by up to 0.06, and that error lands directly in log p (logsumexp is dominated by
the largest logits); the loss, its gradient and the RL log-prob ratios would all carry it. The head
is about a fifth of a 135M model's matmul FLOPs, the price of an exact-to-fp32 loss.
"""

from __future__ import annotations

import importlib.util

import torch
from torch.utils.checkpoint import checkpoint

IGNORE_INDEX = -100
DEFAULT_CHUNK_SIZE = 1024


def _chunk_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[C, H], [V, H], [C] -> [C] fp32 log p(target); the [C, V] logits live only inside this call."""
    with torch.autocast(hidden.device.type, enabled=False):  # fp32 logits even under bf16 autocast
        logits = hidden.float() @ weight.float().T  # [C, V] fp32
    target_logits = logits.gather(1, targets[:, None]).squeeze(1)
    return target_logits - torch.logsumexp(logits, dim=1)


def logprobs_of_tokens(
    hidden: torch.Tensor, weight: torch.Tensor, target_ids: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> torch.Tensor:
    """Per-token log p(target_ids[n] | hidden[n]) in fp32, [N], differentiable, chunk by chunk.

    hidden: [N, H] final hidden states (after the last norm); weight: [V, H] LM head;
    target_ids: [N] int64 in [0, V). Positions whose target is IGNORE_INDEX get log-prob 0.
    """
    if hidden.ndim != 2 or weight.ndim != 2 or target_ids.ndim != 1:
        raise ValueError(
            f"expected hidden [N, H], weight [V, H], target_ids [N]; got {tuple(hidden.shape)}, "
            f"{tuple(weight.shape)}, {tuple(target_ids.shape)}"
        )
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    valid = target_ids != IGNORE_INDEX
    safe_targets = torch.where(valid, target_ids, 0)
    # Recompute-in-backward only matters when a graph is being built.
    recompute = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    pieces = []
    for start in range(0, hidden.shape[0], chunk_size):
        args = (hidden[start : start + chunk_size], weight, safe_targets[start : start + chunk_size])
        if recompute:
            # A log-softmax draws nothing at random: preserve_rng_state would only stash and, in
            # backward, set the process-wide CPU generator, which an engine sampling on another
            # thread (RL's rollouts ahead) draws from at that moment.
            pieces.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False, preserve_rng_state=False))
        else:
            pieces.append(_chunk_logprobs(*args))
    logprobs = torch.cat(pieces) if pieces else hidden.new_zeros(0, dtype=torch.float32)
    return logprobs * valid


def _liger_applies(hidden: torch.Tensor) -> bool:
    return hidden.is_cuda and importlib.util.find_spec("liger_kernel") is not None


def chunked_lm_loss(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    reduction: str = "sum",
    use_liger: bool = True,
    head_fp32: bool = True,
) -> torch.Tensor:
    """Cross-entropy of `hidden @ lm_head_weight.T` against `labels`, equal to F.cross_entropy on full logits.

    hidden: [N, H]; lm_head_weight: [V, H]; labels: [N] with IGNORE_INDEX for positions without loss
    (labels are the targets of each position: shift before calling). reduction "sum" adds the
    per-token losses; "mean" divides by the number of non-ignored labels (NaN when there are none,
    like torch). Returns a 0-dim fp32 tensor. `head_fp32` False leaves Liger's matmuls to the caller's
    autocast (bf16: faster, not the CPU's loss); the chunked path below is fp32 either way.
    """
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
    if use_liger and _liger_applies(hidden):
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        loss_fn = LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX, reduction=reduction)
        if not head_fp32:
            return loss_fn(lm_head_weight, hidden, labels).float()
        with torch.autocast(hidden.device.type, enabled=False):
            return loss_fn(lm_head_weight.float(), hidden.float(), labels).float()
    total = -logprobs_of_tokens(hidden, lm_head_weight, labels, chunk_size).sum()
    if reduction == "mean":
        return total / (labels != IGNORE_INDEX).sum()
    return total
