"""Newton-Schulz on whole matrices when each rank holds a shard of every matrix (FSDP2's DTensors).

Under FSDP2 a weight, its gradient and its momentum buffer are DTensors sharded on dim 0: rank r holds rows
[r c, (r + 1) c) of an [m, n] matrix, c = ceil(m / N) (torch.chunk's split; the last ranks may hold fewer rows,
or none). Momentum is elementwise, so each rank advances its shard exactly; Newton-Schulz is not, it needs the
whole matrix. So each matrix gets one owner rank, which gathers the N shards (padded to c rows: gather and
scatter move equal-sized pieces), orthogonalises, and scatters each rank its rows back. Owners are spread by
Newton-Schulz cost (greedy, largest first, onto the least-loaded rank), and the matrices move in rounds of
`matrices_per_rank` per owner, so no rank holds more than that many whole matrices at once. Every rank walks
the same plan in the same order (it depends on the global shapes only), which the collectives require.

A placement with one sharded mesh dimension (Shard(0)) and any replicated ones (HSDP) works: the matrix is
gathered over the sharded dimension's group and every replica computes the same result. The result is the
one-process result, up to the gradient's own summation order across ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.distributed as dist

from passband.training.optim.newton_schulz import newton_schulz_flops


def assign_owners(costs: list[int], num_ranks: int) -> list[int]:
    """The owner rank of each matrix, balancing the summed cost: the most expensive first, each onto the rank
    with the least cost so far (ties: the lower matrix index first, then the lower rank). Deterministic."""
    loads = [0] * num_ranks
    owners = [0] * len(costs)
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        rank = min(range(num_ranks), key=lambda r: (loads[r], r))
        owners[index] = rank
        loads[rank] += costs[index]
    return owners


def plan_rounds(owners: list[int], num_ranks: int, matrices_per_rank: int) -> list[list[int]]:
    """Matrix indices per round: round k holds each rank's owned matrices number k * matrices_per_rank to
    (k + 1) * matrices_per_rank - 1 (in index order), so a rank holds at most matrices_per_rank whole ones."""
    owned = [[index for index, owner in enumerate(owners) if owner == rank] for rank in range(num_ranks)]
    num_rounds = max((math.ceil(len(indices) / matrices_per_rank) for indices in owned), default=0)
    return [sorted(index for indices in owned
                   for index in indices[k * matrices_per_rank:(k + 1) * matrices_per_rank])
            for k in range(num_rounds)]


def shard_group(parameter: torch.Tensor) -> dist.ProcessGroup | None:
    """The process group over which `parameter`'s rows are sharded; None for a plain tensor (whole here)."""
    from torch.distributed.tensor import DTensor

    if not isinstance(parameter, DTensor):
        return None
    sharded = [dim for dim, placement in enumerate(parameter.placements) if not placement.is_replicate()]
    if len(sharded) != 1 or not parameter.placements[sharded[0]].is_shard(0):
        raise ValueError(f"Muon gathers matrices sharded on dim 0 over one mesh dimension (FSDP2, HSDP); got "
                         f"placements {parameter.placements}: shard the model with fully_shard")
    return parameter.device_mesh.get_group(sharded[0])


def orthogonalize(parameters: list[torch.Tensor], updates: list[torch.Tensor],
                  newton_schulz: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype,
                  matrices_per_rank: int) -> list[torch.Tensor]:
    """NS(update) of each parameter's whole matrix, as this rank's part of it: the whole result for a plain
    tensor, this rank's rows for a sharded one. `updates[i]` is this rank's part of parameter i's update
    (its local shard); results come in `dtype`. A collective when any parameter is sharded: every rank of the
    shard group calls it with the same parameters in the same order."""
    results: list[torch.Tensor | None] = [None] * len(parameters)
    groups = [shard_group(parameter) for parameter in parameters]
    for index, group in enumerate(groups):
        if group is None:
            results[index] = newton_schulz(updates[index])
    sharded = [index for index, group in enumerate(groups) if group is not None]
    if sharded:
        if len({id(groups[index]) for index in sharded}) > 1:
            raise ValueError("Muon's matrices are sharded over different process groups: shard every layer on one mesh")
        group = groups[sharded[0]]
        owners = assign_owners([newton_schulz_flops(tuple(parameters[i].shape), 1) for i in sharded],
                               dist.get_world_size(group))
        for round_ in plan_rounds(owners, dist.get_world_size(group), matrices_per_rank):
            pieces = _orthogonalize_round([sharded[j] for j in round_], [owners[j] for j in round_], parameters,
                                          updates, newton_schulz, dtype, group)
            for j, piece in zip(round_, pieces):
                results[sharded[j]] = piece
    return results


def _orthogonalize_round(indices: list[int], owners: list[int], parameters: list[torch.Tensor],
                         updates: list[torch.Tensor], newton_schulz: Callable[[torch.Tensor], torch.Tensor],
                         dtype: torch.dtype, group: dist.ProcessGroup) -> list[torch.Tensor]:
    """One round: gather each matrix to its owner, orthogonalise the owned ones, scatter the rows back."""
    num_ranks, me = dist.get_world_size(group), dist.get_rank(group)
    wholes: dict[int, torch.Tensor] = {}  # matrix index -> [num_ranks * rows, n] padded, on its owner only
    handles = []
    for index, owner in zip(indices, owners):
        rows_total, cols = parameters[index].shape
        rows = math.ceil(rows_total / num_ranks)  # the first ranks' shard height; the rest pad up to it
        local = updates[index].to(dtype)  # [local_rows, n], local_rows <= rows
        piece = torch.nn.functional.pad(local, (0, 0, 0, rows - local.shape[0]))
        pieces = None
        if owner == me:
            wholes[index] = torch.empty(num_ranks * rows, cols, dtype=dtype, device=local.device)
            pieces = list(wholes[index].chunk(num_ranks))  # views: the gather writes the whole matrix in place
        handles.append(dist.gather(piece, pieces, dst=dist.get_global_rank(group, owner), group=group,
                                   async_op=True))
    for handle in handles:
        handle.wait()
    for index, whole in wholes.items():
        rows_total = parameters[index].shape[0]
        whole[:rows_total] = newton_schulz(whole[:rows_total])
    handles, received = [], []
    for index, owner in zip(indices, owners):
        local_rows = updates[index].shape[0]
        piece = torch.empty(math.ceil(parameters[index].shape[0] / num_ranks), parameters[index].shape[1],
                            dtype=dtype, device=updates[index].device)
        pieces = list(wholes[index].chunk(num_ranks)) if owner == me else None
        handles.append(dist.scatter(piece, pieces, src=dist.get_global_rank(group, owner), group=group,
                                    async_op=True))
        received.append(piece[:local_rows])
    for handle in handles:
        handle.wait()
    return received
