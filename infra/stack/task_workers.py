"""`passband up --task-workers N`: N local Prefect task workers that sample pass-rate and eval shards.

Each worker is a background process we own (pid file `<home>/run/task-worker-<i>.pid`, log
`<home>/logs/task-worker-<i>.log`, tasks/host/processes.py) running
`python -m passband.tasks.sampling.worker`, told which device to use: one GPU each (CUDA_VISIBLE_DEVICES) when the machine has at least N, otherwise an
equal, disjoint share of the visible CPU cores (VLLM_CPU_OMP_THREADS_BIND + OMP_NUM_THREADS), so
two workers do not fight over the same cores. Flows use them with `sampling.workers=task_workers`
(curate) or `shards.workers=task_workers` (evaluate).
"""

from __future__ import annotations

import os
import sys

from passband.stack.local import prefect_env
from passband.tasks.host.processes import ProcessDir
from passband.tasks.host.settings import StackSettings

NAME_PREFIX = "task-worker-"


def device_env(index: int, num_workers: int, num_gpus: int, cores: list[int]) -> dict[str, str]:
    """Worker `index`'s device: GPU `index` when there are GPUs for all, else its slice of `cores`."""
    if num_gpus >= num_workers:
        return {"CUDA_VISIBLE_DEVICES": str(index)}
    if num_workers > len(cores):
        raise ValueError(f"--task-workers {num_workers} needs at least {num_workers} CPU cores or GPUs; "
                         f"this machine shows {len(cores)} cores and {num_gpus} GPUs")
    share = len(cores) // num_workers
    mine = cores[index * share:(index + 1) * share]
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, mine)), "OMP_NUM_THREADS": str(len(mine)),
            "CUDA_VISIBLE_DEVICES": ""}


def start_task_workers(num_workers: int, api_url: str) -> list[str]:
    """Start `num_workers` shard workers against the Prefect API at `api_url`; return their names."""
    import torch
    from prefect.settings import get_current_settings

    settings = StackSettings.from_env()
    cores = sorted(os.sched_getaffinity(0))
    num_gpus = torch.cuda.device_count()
    # Deferred runs keep their parameters and results in Prefect's local storage: the workers
    # must read and write the folder this process's flows use.
    shared = {**prefect_env(settings), "PREFECT_API_URL": api_url, "PASSBAND_HOME": str(settings.home),
              "PREFECT_LOCAL_STORAGE_PATH": str(get_current_settings().results.local_storage_path)}
    processes = ProcessDir(settings.home)
    names = []
    for index in range(num_workers):
        name = f"{NAME_PREFIX}{index}"
        processes.spawn(name, [sys.executable, "-m", "passband.tasks.sampling.worker"],
                        {**shared, **device_env(index, num_workers, num_gpus, cores), "PASSBAND_WORKER_NAME": name})
        names.append(name)
    return names

