"""A Prefect task worker that serves pass-rate, eval and RL rollout shards: `python -m passband.tasks.sampling.worker`.

It connects to the Prefect server at PREFECT_API_URL (task workers do not work with the ephemeral
API) and runs one shard at a time, keeping its engine open between shards (the engine keeper's
scope spans the worker's life). It must see what the
flow sees: the same artifact root (PASSBAND_ARTIFACT_ROOT or PASSBAND_HOME) and the same Prefect
storage for task parameters and results (PREFECT_LOCAL_STORAGE_PATH on one machine, or
PREFECT_TASKS_SCHEDULING_DEFAULT_STORAGE_BLOCK + PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK naming a
shared bucket across machines; infra/README.md). Cores or GPU: VLLM_CPU_OMP_THREADS_BIND and
OMP_NUM_THREADS, or CUDA_VISIBLE_DEVICES, as `passband up --task-workers` sets them.
PASSBAND_WORKER_NAME labels its task runs; PASSBAND_WORKER_STATUS_PORT serves Prefect's /status.
"""

from __future__ import annotations

import os


def main() -> None:
    if not os.environ.get("PREFECT_API_URL"):
        raise SystemExit("a shard worker needs a Prefect server: set PREFECT_API_URL "
                         "(`passband up` starts one at http://127.0.0.1:4200/api)")
    from prefect.task_worker import serve

    from passband.tasks.sampling.eval_job import evaluate_shard_job
    from passband.tasks.sampling.passrate_job import sample_shard_job
    from passband.tasks.sampling.rollout_job import rollout_shard_job
    from passband.training.engines.keeper import ENGINES

    # one shard at a time: the worker's one engine serves one generate call at a time
    port = os.environ.get("PASSBAND_WORKER_STATUS_PORT")  # Prefect's /status page, for health checks
    with ENGINES.scope():
        serve(sample_shard_job, evaluate_shard_job, rollout_shard_job, limit=1,
              status_server_port=int(port) if port else None)


if __name__ == "__main__":
    main()
