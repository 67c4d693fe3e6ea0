"""Where shard-level sampling runs, and the flow's side of running shards on Prefect task workers.

`local` (the embedded default): the flow's own engine samples every missing shard in its process.
`task_workers`: every missing shard becomes a deferred run of a shard job's task
(`sample-shard-job` for pass rates, tasks/sampling/passrate_job.py; `evaluate-shard-job` for
evaluation, tasks/sampling/eval_job.py) that any connected task worker takes; the worker commits the shard and returns its URI, the flow
then reads the shards it needs from the artifact store.

A dead worker loses nothing. The flow polls the server's list of connected task workers; once a
worker has been gone for `lost_worker_grace_s`, the shard it was running (its claimed run, see
tasks/sampling/claim.py) is marked crashed and submitted again, and so is every shard not yet
started, since the dead worker may have received one before it died (a task worker takes its next
run while busy with the current one, and the server does not hand that run out again). A run
that crashed (its worker stopped under it) is submitted again the same way; a run that failed
(the shard's own code raised) fails the flow with its message. A shard submitted twice is
committed once: a run whose key is already committed samples nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from passband.tasks.reporting.logs import run_logger
from passband.tasks.sampling.claim import claimant

if TYPE_CHECKING:
    from prefect import Task


class SamplingWorkersConfig(BaseModel):
    """Where shards are sampled: curate's pass rates, corrections and synthetic answers; the
    evaluate flow's eval shards (tasks/sampling/eval_shards.py)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    workers: Literal["local", "task_workers"] = "local"
    """`local`: the flow's own engine (no services). `task_workers`: Prefect task workers started by
    `passband up --task-workers N` (or `python -m passband.tasks.sampling.worker` anywhere); needs a
    Prefect server (PREFECT_API_URL). Pass rates and evaluation rows are the same bit for bit either
    way on one machine."""
    connect_timeout_s: float = Field(300.0, gt=0)
    """How long the flow waits for a first task worker to connect before it fails."""
    lost_worker_grace_s: float = Field(5.0, gt=0)
    """A worker missing from the server's list of connected task workers this long is dead: its
    shards are submitted again."""
    poll_s: float = Field(1.0, gt=0)
    """Seconds between the flow's looks at its shards' runs."""


class RolloutWorkersConfig(SamplingWorkersConfig):
    """Where RL's rollouts are sampled (the RL flow's `rollout`): the flow's engine, or task workers."""

    workers: Literal["local", "task_workers"] = "local"
    """`local`: the flow's own engine, in its process. `task_workers`: every sampling call (the
    iteration's rollouts, dynamic sampling's rounds, the held-out evaluation) runs as
    `shards_per_call` jobs on Prefect task workers that keep their engine and load each published
    weights version in place (tasks/sampling/rollout_workers.py: WorkerEngine); start them with
    `passband up --rollout-workers N` (needs a Prefect server). One shard gives the local run's samples bit for
    bit; the flow and the workers must share the artifact root and PASSBAND_HOME (one machine or a
    shared filesystem)."""
    shards_per_call: int = Field(1, ge=1)
    """Jobs each sampling call is split into on task workers, contiguous runs of its prompts (set it
    to the number of workers). With more than one, each prompt is seeded by its index in the call."""
    weights_through_store: bool = False
    """Task workers on other machines: commit each weights version they sample with to the artifact
    store (PASSBAND_ARTIFACT_ROOT, e.g. s3://) and send them its URI; false: send the version's
    folder (one machine, or a filesystem the workers share)."""


class ShardJobLike(Protocol):
    """What the dispatch reads of a shard job (a pass-rate ShardJob, an EvalShardJob): its artifact
    key, and the JSON its task takes."""

    key: str

    def model_dump_json(self) -> str: ...


def run_on_task_workers(jobs: Sequence[ShardJobLike], config: SamplingWorkersConfig,
                        job_task: "Task[[str], str]") -> list[str]:
    """Run every job on the task workers as a deferred run of `job_task` (which takes the job as
    JSON and returns its shard's URI); return the committed shards' URIs in job order."""
    from prefect.client.orchestration import get_client
    from prefect.settings import get_current_settings
    from prefect.states import Crashed

    from passband.tasks.artifacts.store import open_store

    if get_current_settings().api.url is None:
        raise ValueError("workers = task_workers needs a Prefect server and task workers: "
                         "run `passband up --task-workers N` first, or set PREFECT_API_URL")
    log = run_logger()
    store = open_store()
    uris: dict[str, str] = {}
    runs: dict[UUID, str] = {}  # every run submitted, to its shard key
    abandoned: set[UUID] = set()  # runs of lost workers, marked crashed by this loop
    absent_since: dict[str, float] = {}  # worker id -> when the server stopped listing it
    by_key = {job.key: job for job in jobs}
    with get_client(sync_client=True) as client:
        _wait_for_workers(client, job_task.task_key, config.connect_timeout_s)
        for job in jobs:
            runs[job_task.delay(job.model_dump_json()).task_run_id] = job.key
        log.info("%d shards submitted to task workers", len(jobs))
        last_seen_worker = time.monotonic()
        while len(uris) < len(jobs):
            time.sleep(config.poll_s)
            live = _connected_workers(client, job_task.task_key)
            if live:
                last_seen_worker = time.monotonic()
            elif time.monotonic() - last_seen_worker > config.connect_timeout_s:
                raise TimeoutError(f"no task worker has been connected for {config.connect_timeout_s:.0f} s "
                                   f"(connect_timeout_s of the workers config) with {len(jobs) - len(uris)} shards to go")
            # a run the server has not written a state for yet (its first state write can wait on a
            # locked SQLite) has state None: it is read again at the next poll
            states = [run for run in _read_runs(client, list(runs)) if run.state is not None]
            crashed = {run.id for run in states if run.state.is_crashed() and run.id not in abandoned}
            for run in states:
                key = runs[run.id]
                if run.state.is_completed() and key not in uris:
                    # The run returned this URI; the flow takes it from the store, whose manifest
                    # is the commit, so it never reads the worker's Prefect result storage.
                    if not store.exists(key):
                        raise RuntimeError(f"task run {run.name!r} completed but {key} has no manifest in "
                                           f"{store.uri(key)}: do the flow and the workers share the artifact root?")
                    uris[key] = store.uri(key)
                    log.info("%s committed by %s (%d/%d)", key, run.name, len(uris), len(jobs))
                elif run.state.is_final() and not run.state.is_completed() and run.id not in abandoned | crashed:
                    raise RuntimeError(f"shard {key} failed in task run {run.name!r} ({run.id}): "
                                       f"{run.state.message}")
            running = [run for run in states if run.state.is_running() and run.id not in abandoned]
            now = time.monotonic()
            # a running run's worker id is in its name (None in the moment before the worker
            # renames it; a run that stays unnamed lost its worker right at the start)
            absent_since = {worker: absent_since.get(worker, now)
                            for worker in {claimant(run.name) for run in running} - live}
            dead = {worker for worker, since in absent_since.items() if now - since >= config.lost_worker_grace_s}
            if not dead and not crashed:
                continue
            # Resubmit the dead workers' shards, the crashed ones (a worker stopped under them),
            # and every shard not started yet (a dead worker may hold one); a shard running on a
            # live worker keeps its run.
            abandoned |= crashed
            for run in running:
                if claimant(run.name) in dead:
                    client.set_task_run_state(run.id, Crashed(message=f"task worker {claimant(run.name)} lost"),
                                              force=True)
                    abandoned.add(run.id)
            busy = {runs[run.id] for run in running if claimant(run.name) not in dead}
            retry = sorted(set(by_key) - set(uris) - busy)
            log.warning("task workers lost: %s, runs crashed: %d; resubmitting %d shards: %s",
                        sorted(dead), len(crashed), len(retry), retry)
            for key in retry:
                runs[job_task.delay(by_key[key].model_dump_json()).task_run_id] = key
    return [uris[job.key] for job in jobs]


def _read_runs(client, run_ids: list[UUID]) -> list:
    """The task runs `run_ids`, read in pages the server accepts (at most 200 a request)."""
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterId

    page = 200
    return [run for start in range(0, len(run_ids), page)
            for run in client.read_task_runs(task_run_filter=TaskRunFilter(id=TaskRunFilterId(
                any_=run_ids[start:start + page])), limit=page)]


def _connected_workers(client, task_key: str) -> set[str]:
    """Ids of the task workers the server lists as connected for `task_key`."""
    response = client.request("POST", "/task_workers/filter",
                              json={"task_worker_filter": {"task_keys": [task_key]}})
    response.raise_for_status()
    return {worker["identifier"] for worker in response.json()}


def _wait_for_workers(client, task_key: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not _connected_workers(client, task_key):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no task worker serves {task_key} on {client.api_url} after {timeout_s:.0f} s "
                               "(connect_timeout_s of the workers config): start some with `passband up --task-workers N`")
        time.sleep(1.0)
