"""Run under torchrun by tests/test_mesh.py: the trainer mesh as each rank sees it, one JSON line per rank, in a
file of its own under $MESH_RANKS_OUT (torchrun relays the ranks' stdout, and under load it ran two ranks' lines
together).

    torchrun --standalone --nproc_per_node W tests/mesh_ranks.py REPLICATE SHARD SP TIMEOUT_S [hang]

Each rank prints its SP group, its data-parallel group and index, the FSDP mesh's dimensions, and how a
Linear(4, 8) sharded on it is placed. With `hang` the last rank then sleeps while the others all-reduce over
their replicate group: they print how long that took to fail (the mesh's sub-groups carry TIMEOUT_S).
"""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from passband.training.runtime.distributed import open_process_group, rank, trainer_mesh, world_size
from passband.training.runtime.mesh import (MeshShape, data_parallel_group, data_parallel_ranks, fsdp_mesh,
                                            sequence_parallel_group)

replicate, shard, sp = (int(value) for value in sys.argv[1:4])
timeout_s = float(sys.argv[4])
open_process_group(timeout_s, MeshShape(replicate=replicate, shard=shard, sequence_parallel=sp))
mesh = trainer_mesh("cpu")
linear = torch.nn.Linear(4, 8, bias=False)
fully_shard(linear, mesh=fsdp_mesh(mesh))
sp_group = sequence_parallel_group(mesh)


def emit(record: dict) -> None:
    with open(Path(os.environ["MESH_RANKS_OUT"]) / f"rank-{rank()}.jsonl", "a") as out:
        out.write(json.dumps(record) + "\n")


emit({
    "rank": rank(),
    "sp": None if sp_group is None else dist.get_process_group_ranks(sp_group),
    "dp": dist.get_process_group_ranks(data_parallel_group(mesh)),
    "dp_ranks": list(data_parallel_ranks(mesh)),
    "fsdp_dims": list(fsdp_mesh(mesh).mesh_dim_names),
    "placements": [str(p) for p in linear.weight.placements],
    "local_rows": linear.weight.to_local().shape[0],
})
if sys.argv[5:] == ["hang"]:
    dist.barrier()
    if rank() == world_size() - 1:
        time.sleep(4 * timeout_s)
    else:
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1), group=mesh["replicate"].get_group())
            emit({"rank": rank(), "failed_after_s": None})
        except RuntimeError:
            emit({"rank": rank(), "failed_after_s": time.monotonic() - start})
    os._exit(0)  # the group is broken: no orderly teardown to wait on
dist.barrier()
dist.destroy_process_group()
