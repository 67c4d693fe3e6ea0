"""The trainers' shared settings: how many processes train (SFT and RL alike)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DistributedConfig(BaseModel):
    """How many processes train each stage: one, or torchrun ranks under FSDP2 (training/runtime/distributed.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nproc_per_node: int = Field(
        default=1, ge=1,
        description="Ranks on this machine. 1 trains in the flow's own process; N > 1 has the flow launch "
        "`torchrun --standalone --nproc_per_node N` (one GPU per rank on CUDA, gloo ranks on CPU). The result "
        "is the one-process result up to float summation order, so it is not part of any cache key.",
    )
    collective_timeout_s: float = Field(
        default=600.0, gt=0,
        description="Seconds one collective (an all-gather, reduce-scatter or barrier) may wait on the other "
        "ranks. A rank that hangs or dies makes the rest fail within it, with an error naming the rank and the "
        "call, and torchrun then stops them all (torch's own default is 10 min for NCCL, 30 for gloo).",
    )
    reply_timeout_s: float = Field(
        default=3600.0, gt=0,
        description="Seconds the rl flow waits for its trainer ranks to answer one request (an update with its "
        "weight publish, or a checkpoint) before it stops them and fails naming the request: the bound when "
        "every rank hangs at once, which no collective notices. Larger than one update of your model takes.",
    )
    torchrun_at_one_rank: bool = Field(
        default=False,
        description="With nproc_per_node 1, still train on one torchrun rank, the trainer's own process, instead "
        "of in the flow's: the flow then holds no model, as when the trainer runs as its own Job (infra/). One "
        "rank is not sharded (FSDP2 starts at two), so the result is the in-process one exactly.",
    )

    @property
    def launches_ranks(self) -> bool:
        """Whether the loop runs under torchrun rather than in the flow's process."""
        return self.nproc_per_node > 1 or self.torchrun_at_one_rank
