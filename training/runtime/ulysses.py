"""Ulysses sequence parallelism: each sequence split along its tokens over the SP group (DeepSpeed-Ulysses).

The SP ranks (training/runtime/mesh.py: `sequence_parallel_group`, consecutive ranks) see the same packed
micro-batch, one row of N tokens (N a multiple of the degree P: the pack's padding tail grows), and each runs
the decoder on its contiguous shard of N / P tokens (`token_shard`) with the pack's global position ids, so
RoPE sees each document's own positions wherever the shard edge cuts it. Embeddings, norms, the MLPs and the
q/k/v/o projections are per token and run on the shard as they are. Attention needs every earlier token of a
document: `head_parallel_attention` (called by the varlen kernel, training/runtime/varlen_attention.py, when
the forward passes `sequence_parallel_group`) all-to-alls q, k and v from [tokens / P, all heads] to [all
tokens, heads / P], attends per document over the whole sequence with the pack's global `cu_seqlens` (a
document crossing the shard edge is whole again), and all-to-alls the output back to the token shard. The
all-to-all is a permutation, so its backward is the other all-to-all (`_SeqToHeads`, `_HeadsToSeq`).

Heads that the degree does not divide (SmolLM2-135M: 9 query and 3 KV heads at P = 2): K and V are repeated
to the query heads (what grouped-query attention computes anyway) and all three padded with zero heads up to
a multiple of P; a zero head attends uniformly to zero values, its output is dropped after the way back.
Where P divides the KV heads, they travel as they are (rank r's query heads use exactly its KV heads).

The loss side (training/logprobs.py, training/sft/model_loss.py): each SP rank applies the LM head to its own
tokens only and the per-token log-probs are all-gathered (`gather_tokens`), so every sequence-level term
(GSPO's ratio, seq-MIS, length normalisation, sequence KL) is computed from the whole row as in one process;
every SP rank then computes the same loss, and the gather's backward hands each rank its own tokens' slice of
that loss's gradient, not a sum over the SP ranks. The parameter gradients of the SP ranks are therefore
partial sums over their tokens, and FSDP's reduce-scatter over shard x sp with SUM (divide factor 1,
training/runtime/distributed.py) adds them to the one-process gradient; an average would halve it at P = 2.
SFT's summed loss goes the same way through `sum_over` (an all-reduce whose backward is the identity).

Every SP rank must run the backward through every layer, whatever its own tokens contribute: a rank's
attention backward holds heads of the other ranks' tokens. `keep_in_backward` ties a rank with no loss token
in its shard to its hidden states by a zero term.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed import ProcessGroup


def degree(group: ProcessGroup | None) -> int:
    """The SP degree: the group's size, 1 without a group."""
    return 1 if group is None else dist.get_world_size(group)


def pack_multiple(pad_to_multiple: int, group: ProcessGroup | None) -> int:
    """What a pack's length is rounded up to: `pad_to_multiple` and the SP degree both divide it."""
    return math.lcm(pad_to_multiple, degree(group))


def token_shard(num_tokens: int, group: ProcessGroup | None) -> slice:
    """This rank's contiguous tokens of a pack of `num_tokens` (a multiple of the degree): all without a group."""
    parts = degree(group)
    if num_tokens % parts:
        raise ValueError(f"a pack of {num_tokens} tokens does not split over {parts} sequence-parallel ranks: "
                         "pad it to a multiple of the degree (pack_multiple)")
    size = num_tokens // parts
    index = 0 if group is None else dist.get_rank(group)
    return slice(index * size, (index + 1) * size)


def shard_counts(positions: list[int], num_tokens: int, group: ProcessGroup | None) -> list[int]:
    """How many of the sorted global `positions` fall in each SP rank's shard, in rank order."""
    size = num_tokens // degree(group)
    counts = [0] * degree(group)
    for position in positions:
        counts[position // size] += 1
    return counts


def _all_to_all(chunks: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """[P, ...] contiguous: chunk j goes to rank j; returns [P, ...] with chunk i from rank i."""
    received = torch.empty_like(chunks)
    dist.all_to_all_single(received, chunks, group=group)
    return received


def _seq_to_heads(x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """[B, h, n, D] (this rank's n tokens, every head) -> [B, h / P, P * n, D] (its heads, every token)."""
    parts = dist.get_world_size(group)
    b, h, n, d = x.shape
    sent = x.reshape(b, parts, h // parts, n, d).transpose(0, 1).contiguous()  # [P, B, h/P, n, D]: heads of rank j
    received = _all_to_all(sent, group)  # chunk i: rank i's tokens of this rank's heads
    return received.permute(1, 2, 0, 3, 4).reshape(b, h // parts, parts * n, d)


def _heads_to_seq(x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """The inverse of `_seq_to_heads`: [B, h / P, P * n, D] -> [B, h, n, D]."""
    parts = dist.get_world_size(group)
    b, h_local, total, d = x.shape
    sent = x.reshape(b, h_local, parts, total // parts, d).permute(2, 0, 1, 3, 4).contiguous()  # tokens of rank j
    received = _all_to_all(sent, group)  # chunk i: rank i's heads of this rank's tokens
    return received.transpose(0, 1).reshape(b, parts * h_local, total // parts, d)


class _SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
        ctx.group = group
        return _seq_to_heads(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _heads_to_seq(grad, ctx.group), None


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
        ctx.group = group
        return _heads_to_seq(x, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _seq_to_heads(grad, ctx.group), None


def seq_to_heads(x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """Sequence-sharded [B, h, n, D] -> head-sharded [B, h / P, P * n, D], differentiable (backward: the way back)."""
    return _SeqToHeads.apply(x, group)


def heads_to_seq(x: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
    """Head-sharded [B, h / P, N, D] -> sequence-sharded [B, h, N / P, D], differentiable."""
    return _HeadsToSeq.apply(x, group)


def head_parallel_attention(attention, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            group: ProcessGroup, **kwargs: object) -> torch.Tensor:
    """`attention(q, k, v, **kwargs)` over the whole sequence for this rank's heads, from and back to its tokens.

    query [1, H, n, D], key/value [1, Hkv, n, D] on this rank's n tokens (RoPE applied at the global
    positions); `attention` takes [1, h, N, D] tensors and returns [1, N, h, D] (the varlen kernel with the
    pack's global cu_seqlens). Returns [1, n, H, D], the transformers attention contract on the shard.
    """
    parts = dist.get_world_size(group)
    heads = query.shape[1]
    if key.shape[1] % parts:  # each rank's query heads would need KV heads of two ranks: give every query its own
        repeats = heads // key.shape[1]
        key, value = key.repeat_interleave(repeats, dim=1), value.repeat_interleave(repeats, dim=1)
    missing = -heads % parts
    if missing:  # zero heads up to a multiple of the degree; their output is dropped below
        query, key, value = (F.pad(t, (0, 0, 0, 0, 0, missing)) for t in (query, key, value))
    out = attention(seq_to_heads(query, group), seq_to_heads(key, group), seq_to_heads(value, group), **kwargs)
    out = heads_to_seq(out.transpose(1, 2), group)  # [1, H + missing, n, D]
    return out[:, :heads].transpose(1, 2)


class _GatherTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local: torch.Tensor, counts: list[int], group: ProcessGroup) -> torch.Tensor:
        index = dist.get_rank(group)
        ctx.span = (sum(counts[:index]), counts[index])
        width = max(counts)
        padded = torch.zeros((width, *local.shape[1:]), dtype=local.dtype, device=local.device)
        padded[: counts[index]] = local
        pieces = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(pieces, padded, group=group)
        return torch.cat([piece[:count] for piece, count in zip(pieces, counts)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        # Every SP rank computed the same loss from the gathered values: this rank's share of its gradient is
        # its own slice, not a sum over the ranks (which would count the loss P times).
        start, count = ctx.span
        return grad[start : start + count], None, None


def gather_tokens(local: torch.Tensor, counts: list[int], group: ProcessGroup | None) -> torch.Tensor:
    """Per-token values of every SP rank, concatenated in rank order (= token order): [sum(counts), ...].

    local: this rank's [counts[rank], ...]; counts: every rank's (known on every rank from the pack, so no
    exchange of sizes). Differentiable; the backward assumes every SP rank builds the same loss from the
    result (module docstring). The values themselves without a group."""
    if group is None:
        return local
    return _GatherTokens.apply(local, counts, group)


class _SumOver(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local: torch.Tensor, group: ProcessGroup) -> torch.Tensor:
        total = local.clone()
        dist.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None  # d(sum of the ranks' terms)/d(this rank's term) = 1; every rank backwards the same total


def sum_over(local: torch.Tensor, group: ProcessGroup | None) -> torch.Tensor:
    """The sum of every SP rank's `local` on every rank; differentiable, each rank's gradient its own term's."""
    return local if group is None else _SumOver.apply(local, group)


@torch.no_grad()
def gather_sequence(hidden: torch.Tensor, group: ProcessGroup | None) -> torch.Tensor:
    """[1, n, H] this rank's tokens -> [1, P * n, H] the whole pack, no gradient (the RL entropy's hidden states)."""
    if group is None:
        return hidden
    pieces = [torch.empty_like(hidden) for _ in range(dist.get_world_size(group))]
    dist.all_gather(pieces, hidden.contiguous(), group=group)
    return torch.cat(pieces, dim=1)


def keep_in_backward(values: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """`values` tied to `hidden` by a zero term: a rank whose shard holds no loss token still runs the decoder's
    backward, whose all-to-alls the other SP ranks wait on. A rank with values is tied already: `values` then."""
    if values.numel():
        return values
    return values + hidden.sum() * 0.0
