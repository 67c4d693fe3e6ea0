"""The evaluate flow's sampling on Prefect task workers (`shards.workers = task_workers`).

The eval sets are cut into shards of `shard_size` problems in their order
(training/evaluation/shards.py). A shard's key hashes its problems (keys and rows), the checkpoint
id, the engine config, the sampling, the verifier settings and version, the system prompt and the
dependency versions, so a committed shard is reused by any later evaluation that would compute the
same rows. The missing shards go to the task workers through the pass-rate shards' dispatch
(tasks/sampling/dispatch.py: lost workers, resubmission); each worker commits its shard's rows
(tasks/sampling/eval_job.py) and the flow reads every shard back from the store and builds the
Evaluation from the concatenated rows: the rows one in-process `evaluate()` on the sets gives.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from passband.curation.catalog import VerifierSettings
from passband.tasks.sampling.dispatch import SamplingWorkersConfig
from passband.tasks.sampling.eval_job import EVAL_SHARD_PREFIX, EvalShardJob
from passband.training.engines import EngineConfig, SamplingConfig
from passband.training.evaluation.evaluate import Evaluation


EVALUATE_SOURCES = ("training/evaluation/evaluate.py",)
"""Source files of the per-sample rows a shard stores, hashed into its key."""


class EvalShardsConfig(SamplingWorkersConfig):
    """Where the evaluate flow samples: in one call on its own engine, or in shards on task workers."""

    shard_size: int = Field(8, ge=1)
    """Problems per shard on task workers (`local` ignores it: one evaluate call covers every set).
    Smaller shards spread better over the workers; each shard is one generate call and one commit."""


def eval_shard_jobs(
    sets: dict[str, list[dict[str, Any]]], model_ref: str, checkpoint: str, engine: EngineConfig,
    sampling: SamplingConfig, verifiers: VerifierSettings, system_prompt: str | None, shard_size: int,
) -> list[EvalShardJob]:
    """The shards of `sets` as jobs, in the sets' order, each keyed by its content; `checkpoint`
    is tasks/sampling/keys.py's checkpoint_id of the model."""
    from passband.curation.passrate import shard_key
    from passband.tasks.artifacts.provenance import dependency_versions
    from passband.tasks.sampling.keys import sources_version, verifier_version
    from passband.training.evaluation.evaluate import problem_key
    from passband.training.evaluation.shards import cut_eval_sets

    # the engine as it samples: `auto` keyed by the dtype it resolves to here, so a store shared with a
    # machine where auto means the other dtype keeps each machine's shards apart (issue #56)
    settings = {"engine": {**engine.model_dump(mode="json"), "dtype": engine.resolved_dtype()},
                "sampling": sampling.model_dump(mode="json"),
                "verify": verifiers.model_dump(mode="json"), "system_prompt": system_prompt,
                "dependencies": dependency_versions(),
                # how a problem's rows are built (seeding by key, row fields): an edit resamples
                "evaluate_source": sources_version(EVALUATE_SOURCES)}
    jobs = []
    for shard in cut_eval_sets(sets, shard_size):
        keys = [problem_key(name, row) for name, rows in shard.items() for row in rows]
        key = EVAL_SHARD_PREFIX + shard_key(keys, checkpoint, {**settings, "sets": shard}, verifier_version())
        jobs.append(EvalShardJob(
            key=key, sets=shard, model_ref=model_ref, engine=engine, sampling=sampling, verifiers=verifiers,
            system_prompt=system_prompt, manifest_config={"checkpoint": checkpoint, **settings, "problems": keys,
                                                          "verifier_version": verifier_version()}))
    return jobs


def evaluate_on_task_workers(
    model_ref: str, model_dir: str, engine: EngineConfig, sets: dict[str, list[dict[str, Any]]],
    sampling: SamplingConfig, verifiers: VerifierSettings, system_prompt: str | None, config: EvalShardsConfig,
) -> Evaluation:
    """`evaluate()` of the checkpoint `model_ref` (resolved here to `model_dir`) on `sets`, its
    missing shards sampled by the task workers, its committed ones reused."""
    from passband.tasks.artifacts.store import open_store
    from passband.tasks.reporting.logs import run_logger
    from passband.tasks.sampling.dispatch import run_on_task_workers
    from passband.tasks.sampling.eval_job import evaluate_shard_job, load_eval_shard
    from passband.tasks.sampling.keys import checkpoint_id
    from passband.training.evaluation.evaluate import evaluation_of

    jobs = eval_shard_jobs(sets, model_ref, checkpoint_id(model_ref, model_dir), engine, sampling, verifiers,
                           system_prompt, config.shard_size)
    store = open_store()
    missing = [job for job in jobs if not store.exists(job.key)]
    run_logger().info("%d eval shards of %d problems: %d committed before, %d to the task workers",
                      len(jobs), config.shard_size, len(jobs) - len(missing), len(missing))
    if missing:
        run_on_task_workers(missing, config, evaluate_shard_job)
    return evaluation_of([row for job in jobs for row in load_eval_shard(job.key)])
