"""One pass-rate shard as a job a Prefect task worker runs, and the worker process itself.

A job names everything its shard's samples depend on (rows, checkpoint, engine config, sampling,
verifiers) plus its key `passrate/<hash>`. The worker samples it, verifies it and commits it to
the artifact store, manifest last, and returns the shard's URI: payloads never travel through
Prefect. A job whose key is already committed (another run of the same shard finished first) is
answered with the URI and samples nothing, so running a job twice commits its shard once.

A worker (`python -m passband.tasks.shard_worker`, started by `passband up --task-workers N`, the
compose service or the Kubernetes manifest) serves one job at a time, pass-rate shards and eval
shards (tasks/eval_shard_job.py) alike, and keeps its engine open across jobs in the process's
engine keeper: an engine start costs ~20 s here, a weight swap ~1 s.
"""

from __future__ import annotations

import functools
import json
import os
import socket
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE
from pydantic import BaseModel, ConfigDict

from passband.curation.catalog import VerifierSettings
from passband.training.engines import EngineConfig, RolloutEngine

WORKER_NAME_ENV = "PASSBAND_WORKER_NAME"


class ShardJob(BaseModel):
    """What a task worker needs to compute one shard, and nothing that depends on where."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    """Artifact key of the shard, `passrate/<hash of its content>`."""
    rows: list[dict[str, Any]]
    """The shard's problems: {id, task, prompt, reference}."""
    model_ref: str
    """The checkpoint as the flow names it (shipped name, artifact URI or a directory both see)."""
    engine: EngineConfig
    """The flow's engine config (the worker's engine is keyed by it and the checkpoint)."""
    sampling: dict[str, Any]
    """n, top_k, temperature, top_p, max_tokens, stop and the shard's own seed."""
    verifiers: VerifierSettings
    """Verifier settings of the run."""
    system_prompt: str | None
    """System message of the rollouts."""
    manifest_config: dict[str, Any]
    """What the shard's manifest records as its producing config."""


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


@functools.cache
def _model_dir(model_ref: str) -> str:
    """The worker's local copy of a checkpoint, resolved once: a name or URI names immutable
    weights, and a plain directory resolves to itself (the keeper notices rewritten weights)."""
    from passband.tasks.model import resolve_model

    return resolve_model(model_ref)


def kept_engine(model_ref: str, config: EngineConfig) -> tuple[RolloutEngine, Any]:
    """The worker's engine holding `model_ref`'s weights, and its tokenizer: the engine comes from
    the process's keeper (training/engines/keeper.py), so it stays open across jobs and a job on
    another checkpoint of the same architecture only swaps weights in. The worker holds the
    keeper's scope for its lifetime (tasks/shard_worker.py)."""
    from passband.training.engines.keeper import ENGINES
    from passband.training.model_source import load_tokenizer

    model_dir = _model_dir(model_ref)
    return ENGINES.engine(config, model_dir), load_tokenizer(Path(model_dir))


def claim(key: str) -> str | None:
    """Name the running task run after this worker (the flow watches that worker's liveness);
    return the shard's URI if `key` is already committed (an earlier run of it finished), else None."""
    from prefect.client.orchestration import get_client
    from prefect.context import TaskRunContext

    from passband.tasks.logs import run_logger
    from passband.tasks.store import open_store

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


@task(name="sample-shard-job", cache_policy=NONE, task_run_name=job_run_name)
def sample_shard_job(job_json: str) -> str:
    """Sample, verify and commit one shard (manifest last); return its URI.

    The job travels as JSON, not pickled: a worker whose configs gained a defaulted field since
    the flow started still reads it (a pickled pydantic object would lack the field)."""
    from passband.tasks.passrate import commit_shard, sample_shard

    job = ShardJob.model_validate_json(job_json)
    committed = claim(job.key)
    if committed is not None:
        return committed
    engine, tokenizer = kept_engine(job.model_ref, job.engine)
    summaries, samples = sample_shard(job.rows, engine, tokenizer, job.sampling, job.verifiers, job.system_prompt)
    return commit_shard(job.key, summaries, samples, job.manifest_config)
