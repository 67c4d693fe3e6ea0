"""What every shard job does first on a task worker: claim its run, and skip a committed shard.

A worker names the task run it starts after itself (`shard <12 hex> on <name> [<worker id>]`), so
the flow (tasks/sampling/dispatch.py) can tell whose runs a lost worker held; a job whose key is
already committed (another run of the same shard finished first) is answered with the shard's URI
and samples nothing, so running a job twice commits its shard once.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

WORKER_NAME_ENV = "PASSBAND_WORKER_NAME"


def worker_id() -> str:
    """Prefect's own id of this task worker (TaskWorker.client_id): the server lists it while the
    worker is connected, and the flow reads it back from the names of the runs it claims."""
    return f"{socket.gethostname()}-{os.getpid()}"


def claimed_run_name(key: str) -> str:
    """`shard <12 hex> on <worker name> [<worker id>]`: the task run's name once a worker runs it."""
    label = os.environ.get(WORKER_NAME_ENV, "task-worker")
    return f"shard {key.rsplit('/', 1)[-1][:12]} on {label} [{worker_id()}]"


def claimant(run_name: str) -> str | None:
    """The worker id in a claimed run's name; None while no worker has started the run."""
    if not run_name.startswith("shard ") or not run_name.endswith("]"):
        return None
    return run_name.rsplit("[", 1)[1][:-1]


def claim(key: str) -> str | None:
    """Name the running task run after this worker (the flow watches that worker's liveness);
    return the shard's URI if `key` is already committed (an earlier run of it finished), else None."""
    from prefect.client.orchestration import get_client
    from prefect.context import TaskRunContext

    from passband.tasks.artifacts.store import open_store
    from passband.tasks.reporting.logs import run_logger

    run = TaskRunContext.get().task_run
    with get_client(sync_client=True) as client:
        client.set_task_run_name(run.id, claimed_run_name(key))
    store = open_store()
    if not store.exists(key):
        return None
    run_logger().info("%s is already committed (an earlier run of this shard finished)", key)
    return store.uri(key)


def job_run_name(parameters: dict[str, Any]) -> str:
    """The run name a worker gives a job's task run (`job_json` is its one parameter)."""
    return claimed_run_name(json.loads(parameters["job_json"])["key"])
