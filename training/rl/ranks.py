"""The RL update on torchrun ranks: the policy (and the reference) sharded by FSDP2, micro-batches split.

SFT's sharding (training/runtime/distributed.py) applied to RL: every decoder layer is an FSDP unit,
then the root `ShardedPolicy`, whose forward runs one micro-batch's log-prob (or entropy) pass, so
the embeddings, final norm and tied head are gathered while `response_logprobs` uses the head
outside the decoder. Gradients are summed across ranks, not averaged (`shard_for_training`).

Every rank holds the whole batch and runs `rl_update` on it; each micro-batch loop of the update
(the scoring passes, the inner steps) takes its round-robin share (`own_chunks`, SFT's
`rank_micro_batches`: a rank left one short runs a zero-weight copy of the last micro-batch, so
every rank joins the same collectives; with `algo.micro_batch_tokens` the micro-batches are laid out so that
this round-robin deals every rank the same number and about the same tokens: training/rl/batches/micro_batches.py).
Each micro-batch's loss is already its share of the whole
batch's loss (training/rl/loss.py), so the summed gradient is the one-process gradient up to float
summation order. The per-row log-probs and entropies a rank computed are summed into every rank's
copy (`merge_rows`): every batch-wide decision (advantages with KL, Clip-Cov, the metrics) then
sees the same numbers on every rank. One process: no wrapper, every micro-batch its own, no merge.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from passband.training.runtime.distributed import rank_micro_batches, shard_for_training, trainer_mesh, world_size
from passband.training.runtime.mesh import data_parallel_group, data_parallel_ranks


class ShardedPolicy(torch.nn.Module):
    """The FSDP root around a causal LM `lm`: calling it runs `run(lm)` inside the root's forward,
    so the root's own parameters are all-gathered while `run` reads them."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    @property
    def model(self) -> torch.nn.Module:
        """The decoder (what `response_logprobs` calls `model.model`)."""
        return self.lm.model

    @property
    def lm_head(self) -> torch.nn.Module:
        return self.lm.lm_head

    def forward(self, run: Callable[[torch.nn.Module], tuple[Tensor, ...]]) -> tuple[Tensor, ...]:
        # A tuple of tensors, not a dataclass: FSDP hooks the backward of the forward's tensor outputs.
        return run(self.lm)


def through_root(model: torch.nn.Module, run: Callable[[torch.nn.Module], tuple[Tensor, ...]]) -> tuple[Tensor, ...]:
    """run(lm) on the plain LM in one process; inside the FSDP root's forward under ranks."""
    return model(run) if isinstance(model, ShardedPolicy) else run(model)


def shard_policy(lm: torch.nn.Module, device: torch.device, precision: str = "fp32") -> torch.nn.Module:
    """`lm` itself in one process; a `ShardedPolicy` sharded by FSDP2 onto `device` when WORLD_SIZE > 1
    (its decoder layers in bf16 under `precision` bf16_autocast: `shard_for_training`)."""
    if world_size() == 1:
        return lm
    return shard_for_training(ShardedPolicy(lm), device, precision)


def own_chunks(chunks: list[list[int]], device: torch.device) -> list[tuple[list[int], bool]]:
    """(micro-batch, counts) this rank runs: all of them, counted, in one process (`rank_micro_batches`), dealt
    over the data-parallel ranks of the trainer mesh on `device`: the ranks of one sequence-parallel group run
    the same micro-batches, each its shard of their tokens (training/runtime/ulysses.py)."""
    num_ranks, this_rank = data_parallel_ranks(trainer_mesh(device.type))
    return [(chunks[index], counts) for index, counts in rank_micro_batches(len(chunks), num_ranks, this_rank)]


def merge_rows(values: Tensor, own_rows: list[int], all_rows: list[int]) -> None:
    """Under ranks, set `values`' rows `all_rows` (each computed by exactly one data-parallel rank; `own_rows`
    by this one) to what their rank computed, in place on every rank. Exact: the other ranks add zeros. Summed
    over the data-parallel group: the ranks of one sequence-parallel group hold the same rows, counted once."""
    if world_size() == 1:
        return
    mine = torch.zeros_like(values)
    own = torch.tensor(own_rows, dtype=torch.long).to(values.device)
    mine[own] = values[own]
    torch.distributed.all_reduce(mine, group=data_parallel_group(trainer_mesh(values.device.type)))
    every = torch.tensor(all_rows, dtype=torch.long).to(values.device)
    values[every] = mine[every]


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The causal LM inside a `ShardedPolicy` (its parameters are the shards); `model` itself otherwise."""
    return model.lm if isinstance(model, ShardedPolicy) else model
