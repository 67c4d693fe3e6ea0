"""One evaluation shard as a job a Prefect task worker runs (the pass-rate twin: tasks/sampling/passrate_job.py).

A job names everything its samples and verdicts depend on (its problems per eval set, checkpoint,
engine config, sampling, verifiers, system prompt) plus its key `eval-shards/<hash>`. The worker
runs the one `evaluate()` on it with its kept engine, commits the per-sample rows to the artifact
store, manifest last, and returns the shard's URI; a job whose key is already committed is
answered with the URI and samples nothing.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NONE
from pydantic import BaseModel, ConfigDict

from passband.curation.catalog import VerifierSettings
from passband.tasks.sampling.claim import claim, job_run_name
from passband.tasks.sampling.engine import kept_engine
from passband.training.engines import EngineConfig, SamplingConfig

EVAL_SHARD_PREFIX = "eval-shards/"


class EvalShardJob(BaseModel):
    """What a task worker needs to evaluate one shard of the eval sets, and nothing that depends on where."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    """Artifact key of the shard's rows, `eval-shards/<hash of its content>`."""
    sets: dict[str, list[dict[str, Any]]]
    """The shard's problems: eval set name -> its suite rows, in the sets' order."""
    model_ref: str
    """The checkpoint as the flow names it (shipped name, artifact URI or a directory both see)."""
    engine: EngineConfig
    """The flow's engine config."""
    sampling: SamplingConfig
    """The evaluation's sampling (n, temperature, seed, ...); each problem is seeded by its key."""
    verifiers: VerifierSettings
    """Verifier settings of the evaluation."""
    system_prompt: str | None
    """System message of the chat template."""
    manifest_config: dict[str, Any]
    """What the shard's manifest records as its producing config."""


@task(name="evaluate-shard-job", cache_policy=NONE, task_run_name=job_run_name)
def evaluate_shard_job(job_json: str) -> str:
    """Evaluate one shard (sample + verify), commit its per-sample rows (manifest last); return the URI.
    The job travels as JSON for the reason sample_shard_job's does."""
    from passband.training.evaluation.evaluate import evaluate

    job = EvalShardJob.model_validate_json(job_json)
    committed = claim(job.key)
    if committed is not None:
        return committed
    engine, tokenizer = kept_engine(job.model_ref, job.engine)
    evaluation = evaluate(engine, job.sets, job.sampling, job.verifiers, tokenizer, job.system_prompt)
    return commit_eval_shard(job.key, evaluation.rows, job.manifest_config)


@task(name="commit-eval-shard", retries=2, retry_delay_seconds=2)
def commit_eval_shard(key: str, rows: list[dict[str, Any]], config: dict[str, Any]) -> str:
    """The shard's per-sample rows as one Parquet table under `key`, manifest last."""
    import pyarrow as pa

    from passband.tasks.artifacts.datasets import commit_table

    return commit_table(pa.Table.from_pylist(rows), key, "evaluate", config)


@task(name="load-eval-shard", retries=2, retry_delay_seconds=2)
def load_eval_shard(key: str) -> list[dict[str, Any]]:
    """The per-sample rows of a committed eval shard, checksums verified."""
    from passband.tasks.artifacts.datasets import read_table
    from passband.tasks.artifacts.store import open_store

    return read_table.fn(open_store().uri(key)).to_pylist()
