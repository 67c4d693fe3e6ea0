"""The trainers' shared settings: how many processes train (SFT and RL alike), on how many nodes, on which mesh."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from passband.training.runtime.mesh import MeshShape

class DistributedConfig(BaseModel):
    """How many processes train each stage and how they split the work: one process, or torchrun ranks under
    FSDP2 on a device mesh replicate x shard x sequence_parallel (training/runtime/mesh.py), on one node or
    several (training/runtime/distributed.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nproc_per_node: int = Field(
        default=1, ge=1,
        description="Ranks on each node. 1 (on one node) trains in the flow's own process; N > 1 has the flow "
        "launch `torchrun --standalone --nproc_per_node N` (one GPU per rank on CUDA, gloo ranks on CPU), or with "
        "`nnodes` > 1 torchrun's rendezvous across the nodes. The result is the one-process result up to float "
        "summation order, so it is not part of any cache key.",
    )
    nnodes: int = Field(
        default=1, ge=1,
        description="Nodes (machines) training together, each running `nproc_per_node` ranks: world size = "
        "nproc_per_node x nnodes. Above 1 every node runs torchrun with `--nnodes N --node_rank i "
        "--rdzv_backend static --rdzv_endpoint <rendezvous_endpoint>`: the flow runs on node 0 and announces each "
        "launch, and every other node (a Prefect worker's machine or a Kubernetes pod) joins it with `python -m "
        "passband.tasks.steps.trainer_nodes` (tasks/steps/trainer_nodes.py); PASSBAND_HOME, holding the launch "
        "files and the checkpoints, must be on storage every node mounts at the same path.",
    )
    rendezvous_endpoint: str | None = Field(
        default=None,
        description="host:port where the nodes' torchrun agents meet: node 0's address, reachable from every node, "
        "and a port free there (torchrun's static rendezvous: node 0 hosts its store there; on Kubernetes "
        "infra/k8s-trainer-rendezvous.yaml names pod 0). Required when nnodes > 1; with one node torchrun runs "
        "--standalone on a free local port.",
    )
    replicate: int = Field(
        default=1, ge=1,
        description="Data-parallel replicate degree: groups of ranks that each hold a full sharded copy of the "
        "weights and optimizer, their gradients all-reduced (HSDP's outer dimension; across nodes, as the recipe "
        "does, so only the gradient all-reduce crosses the slow links).",
    )
    shard: int | None = Field(
        default=None, ge=1,
        description="Data-parallel shard degree: the ranks that split the batch and, merged with "
        "`sequence_parallel`, every parameter, gradient and optimizer state (FSDP2's shard dimension). None: the "
        "world size divided by replicate x sequence_parallel.",
    )
    sequence_parallel: int = Field(
        default=1, ge=1,
        description="Ulysses sequence-parallel degree: the ranks that split each sequence along its tokens and "
        "attend head-parallel between two all-to-alls; they see the same samples. Must divide the model's "
        "attention heads and KV heads (checked by `passband config` where the model's config.json is at hand).",
    )
    collective_timeout_s: float = Field(
        default=600.0, gt=0,
        description="Seconds one collective (an all-gather, reduce-scatter or barrier) may wait on the other "
        "ranks. A rank that hangs or dies makes the rest fail within it, with an error naming the node, the rank "
        "and the call, and torchrun then stops them all (torch's own default is 10 min for NCCL, 30 for gloo).",
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

    @model_validator(mode="after")
    def _mesh_divides(self) -> DistributedConfig:
        world, outer = self.world_size, self.replicate * self.sequence_parallel
        ranks = f"{world} ranks (nproc_per_node {self.nproc_per_node} x nnodes {self.nnodes})"
        if self.shard is None and world % outer:
            raise ValueError(f"replicate x sequence_parallel = {self.replicate} x {self.sequence_parallel} does not "
                             f"divide the {ranks}: pick degrees whose product is the world size")
        if self.shard is not None and outer * self.shard != world:
            raise ValueError(f"replicate x shard x sequence_parallel = {self.replicate} x {self.shard} x "
                             f"{self.sequence_parallel} = {outer * self.shard} is not the {ranks}: make the product "
                             f"the world size (or leave shard unset)")
        if self.nnodes > 1 and self.rendezvous_endpoint is None:
            raise ValueError(f"rendezvous_endpoint: nnodes {self.nnodes} needs the host:port where the nodes' "
                             f"torchrun agents meet (node 0's address and a free port)")
        if self.rendezvous_endpoint is not None:
            host, _, port = self.rendezvous_endpoint.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"rendezvous_endpoint {self.rendezvous_endpoint!r}: expected host:port "
                                 f"(e.g. node0.example:29400)")
        return self

    @property
    def world_size(self) -> int:
        """Ranks on all nodes together."""
        return self.nproc_per_node * self.nnodes

    @property
    def mesh(self) -> MeshShape:
        """The trainer mesh's degrees, shard resolved (their product is the world size: checked above)."""
        shard = self.shard or self.world_size // (self.replicate * self.sequence_parallel)
        return MeshShape(replicate=self.replicate, shard=shard, sequence_parallel=self.sequence_parallel)

    @property
    def launches_ranks(self) -> bool:
        """Whether the loop runs under torchrun rather than in the flow's process."""
        return self.world_size > 1 or self.torchrun_at_one_rank
