"""One shard of a rollout call as a job a Prefect task worker runs (the twin of the pass-rate and
eval shard jobs: tasks/sampling/passrate_job.py, tasks/sampling/eval_job.py).

A job names everything its samples depend on: the chat-templated prompts and their seed keys, the
model (for the engine's architecture and tokenizer), the weights version it samples with (an RL
version folder, training/weights/versions.py, or None for the model's own weights), the engine
config and the sampling (seed included), plus its key `rollout-shards/<hash>`. The worker takes
its kept engine (a version of the same model only swaps weights in), samples, commits every
Sample (token ids, text, the engine's per-token log-probs, finish reason) as JSON, manifest last,
and returns the shard's URI; a job whose key is already committed samples nothing.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE
from pydantic import BaseModel, ConfigDict

from passband.tasks.artifacts.provenance import code_version
from passband.tasks.artifacts.store import fetch_artifact, open_store
from passband.tasks.sampling.claim import claim, job_run_name
from passband.tasks.sampling.engine import kept_engine
from passband.training.engines import EngineConfig, Sample, SamplingConfig

ROLLOUT_SHARD_PREFIX = "rollout-shards/"
SAMPLES_FILE = "samples.json"


class RolloutShardJob(BaseModel):
    """What a task worker needs to sample one shard of a rollout call, and nothing that depends on where."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    """Artifact key of the shard's samples, `rollout-shards/<hash of its content>`."""
    prompts: list[str]
    """The shard's prompts, chat template applied."""
    prompt_keys: list[str] | None
    """Each prompt's seed key (RolloutEngine.generate); None: seeded by position, as one call."""
    model_ref: str
    """The model as the flow names it (shipped name, artifact URI or a directory both see): the
    engine's architecture, tokenizer and, without `weights_dir`, weights."""
    weights_dir: str | None
    """The weights version to sample with: a folder the worker sees, or an artifact URI it fetches
    (rollout.weights_through_store); None: model_ref's own."""
    weight_version: int | None
    """The version `weights_dir` holds (recorded in the shard's manifest; None: not an RL version)."""
    engine: EngineConfig
    """The flow's engine config (the worker's engine is keyed by it and the model)."""
    sampling: SamplingConfig
    """n, temperature, max_tokens, the call's seed, ..."""


@task(name="rollout-shard-job", cache_policy=NONE, task_run_name=job_run_name)
def rollout_shard_job(job_json: str) -> str:
    """Sample one rollout shard with the job's weights, commit its samples (manifest last); its URI.
    The job travels as JSON for the reason sample_shard_job's does."""
    job = RolloutShardJob.model_validate_json(job_json)
    committed = claim(job.key)
    if committed is not None:
        return committed
    weights = job.weights_dir
    if weights is not None and "://" in weights:  # committed to the artifact store: fetched once, cached
        weights = str(fetch_artifact(weights))
    engine, _ = kept_engine(job.model_ref, job.engine, weights)
    groups = engine.generate(job.prompts, job.sampling, job.prompt_keys)
    return commit_rollout_shard(job.key, groups, {"weights_dir": job.weights_dir,
                                                  "weight_version": job.weight_version})


@task(name="commit-rollout-shard", retries=2, retry_delay_seconds=2)
def commit_rollout_shard(key: str, groups: list[list[Sample]], config: dict) -> str:
    """The shard's samples (one list per prompt) as JSON under `key`, manifest last."""
    with tempfile.TemporaryDirectory(prefix="passband-rollouts-") as tmp:
        (Path(tmp) / SAMPLES_FILE).write_text(json.dumps([[asdict(s) for s in group] for group in groups]))
        return open_store().commit(key, Path(tmp), flow="rl", config=config, code_version=code_version(),
                                   extra={"num_prompts": len(groups), "num_samples": sum(map(len, groups))})


@task(name="load-rollout-shard", retries=2, retry_delay_seconds=2)
def load_rollout_shard(key: str) -> list[list[Sample]]:
    """The samples of a committed rollout shard, checksums verified."""
    folder = open_store().fetch(key)
    return [[Sample(**sample) for sample in group] for group in json.loads((folder / SAMPLES_FILE).read_text())]
