"""The trainer mesh: every rank placed on a grid replicate x shard x sp, as torchtitan builds its world mesh.

    rank = (replicate_index * shard + shard_index) * sp + sp_index

`sp` is innermost, so a sequence-parallel group is consecutive ranks (on one node: its all-to-alls stay on
the node's fast links); `replicate` is outermost, so with shard x sp = nproc_per_node each replica is one node
and only the gradient all-reduce crosses nodes (the recipe's HSDP: sharded inside a node, replicated across).

What each dimension means for the trainers (docs/scaling.md, "A device mesh"):
- replicate x shard = the data-parallel ranks: they split a step's micro-batches between them
  (`data_parallel_ranks`); the ranks of one SP group see the same micro-batches.
- shard x sp, merged ("shard_sp"): FSDP2's shard dimension. Every parameter, its gradient and its optimizer
  state is split over it (the FFNs' among them, as the recipe shards them over DP-shard x SP), replicated
  across `replicate` (`fsdp_mesh`: 1-D when replicate is 1, 2-D, i.e. HSDP, otherwise). Gradients are summed
  over the whole mesh: each rank's loss is already its share of the step's loss (training/runtime/distributed.py).
- sp: Ulysses sequence parallelism (`sequence_parallel_group`).

Sub-groups are opened with the trainer's collective timeout: torch opens a mesh's sub-groups with its own
default (30 min for gloo) otherwise, so a dead rank would hang the replicate all-reduce that long.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

DIM_NAMES = ("replicate", "shard", "sp")
"""The mesh's dimensions, outermost first."""
SHARD_SP = "shard_sp"
"""shard and sp flattened: FSDP2's shard dimension."""
DATA_PARALLEL = "dp"
"""replicate and shard flattened: the ranks that see different samples."""


class MeshShape(BaseModel):
    """The degrees of the trainer mesh; their product is the world size (DistributedConfig.mesh resolves them)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    replicate: int = Field(1, ge=1)
    """Data-parallel replicate degree: full sharded copies of the weights, gradients all-reduced between them."""
    shard: int = Field(1, ge=1)
    """Data-parallel shard degree: ranks that split the batch and (merged with sp) the parameters."""
    sequence_parallel: int = Field(1, ge=1)
    """Ulysses degree: ranks that split each sequence along its tokens."""

    @property
    def world_size(self) -> int:
        return self.replicate * self.shard * self.sequence_parallel

    @property
    def data_parallel(self) -> int:
        """Ranks that see different samples: replicate x shard."""
        return self.replicate * self.shard


def build_mesh(shape: MeshShape, device_type: str, collective_timeout_s: float) -> DeviceMesh:
    """The trainer mesh over the open process group (`shape.world_size` ranks, else a ValueError), with its
    flattened dimensions "shard_sp" and "dp"; each sub-group's collectives bounded by `collective_timeout_s`.
    A collective: every rank calls it with the same shape."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if shape.world_size != dist.get_world_size():
        raise ValueError(f"the mesh replicate x shard x sequence_parallel = {shape.replicate} x {shape.shard} x "
                         f"{shape.sequence_parallel} is {shape.world_size} ranks, but torchrun started "
                         f"{dist.get_world_size()}")
    backend = dist.Backend.default_device_backend_map[device_type]
    override = (backend, _timeout_options(backend, collective_timeout_s))
    mesh = init_device_mesh(device_type, (shape.replicate, shape.shard, shape.sequence_parallel),
                            mesh_dim_names=DIM_NAMES, backend_override={name: override for name in DIM_NAMES})
    mesh["shard", "sp"]._flatten(SHARD_SP, backend_override=override)
    mesh["replicate", "shard"]._flatten(DATA_PARALLEL, backend_override=override)
    return mesh


def _timeout_options(backend: str, collective_timeout_s: float):
    """The backend's group options carrying the timeout (torch reads a sub-group's timeout from them)."""
    import torch.distributed as dist

    options = dist.ProcessGroupNCCL.Options() if backend == "nccl" else dist.ProcessGroupGloo._Options()
    options._timeout = timedelta(seconds=collective_timeout_s)
    return options


def fsdp_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """What fully_shard shards over: shard x sp merged (1-D, FSDP) when replicate is 1, else replicate by that
    (2-D, HSDP: parameters Shard(0) over shard_sp, Replicate() over replicate; gradients reduce-scattered inside
    a replica, then all-reduced across replicas)."""
    if mesh["replicate"].size() == 1:
        return mesh[SHARD_SP]
    return mesh["replicate", SHARD_SP]


def sequence_parallel_group(mesh: DeviceMesh | None) -> ProcessGroup | None:
    """The Ulysses group of this rank (the ranks that split its sequences), or None when there is no sequence
    parallelism: one process (no mesh) or sequence_parallel 1. None, not a group of one, so that a caller
    runs whole sequences and issues no all-to-all at all."""
    if mesh is None or mesh["sp"].size() == 1:
        return None
    return mesh["sp"].get_group()


def data_parallel_group(mesh: DeviceMesh | None) -> ProcessGroup | None:
    """The ranks that see different samples (replicate x shard; this rank's SP peers left out), or None in one
    process. A sum of per-sample results over it counts each sample once."""
    return None if mesh is None else mesh[DATA_PARALLEL].get_group()


def data_parallel_ranks(mesh: DeviceMesh | None) -> tuple[int, int]:
    """(number of data-parallel ranks, this rank's index among them): what `rank_micro_batches` splits a step's
    micro-batches by. (1, 0) in one process; the ranks of one SP group get the same index."""
    if mesh is None:
        return 1, 0
    return mesh[DATA_PARALLEL].size(), mesh[DATA_PARALLEL].get_local_rank()
