"""Sharded, resumable pass-rate estimation: n verified rollouts per problem, one artifact per shard.

Problems are cut into shards (curation.passrate.split_into_shards). A shard's result, the
per-problem summary and the per-sample rows, is committed as the artifact
`passrate/<shard_key>`, where the key hashes the shard's problem ids, the checkpoint id (model
ref + hash of its weights' manifest), the sampling settings and the verifier version. Before
sampling a shard its key is looked up: a committed shard is read back, not recomputed, so a
repeated run does no sampling and a crashed run resumes at the first missing shard. The engine
is opened only when some shard is missing (LazyEngine), and counts its generate calls. With
`sampling.workers = task_workers` the missing shards are sampled and committed by Prefect task
workers instead (tasks/sampling/dispatch.py), and the flow reads them back like stored ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from passband.curation.catalog import VerifierSettings
from passband.curation.passrate import shard_key, split_into_shards
from passband.tasks.artifacts.provenance import dependency_versions
from passband.tasks.artifacts.store import open_store
from passband.tasks.reporting.logs import run_logger
from passband.tasks.reporting.progress import Progress
from passband.tasks.sampling.dispatch import run_on_task_workers
from passband.tasks.sampling.engine import LazyEngine
from passband.tasks.sampling.keys import verifier_version
from passband.tasks.sampling.passrate_job import ShardJob, ShardSampling, commit_shard, load_shard, sample_shard, sample_shard_job


@dataclass
class PassRateResult:
    """Per-problem summaries (aligned with the input rows) and per-sample rows of a whole pool."""

    summaries: list[dict] = field(default_factory=list)
    """One dict per problem: problem_id + curation.passrate.summarize_attempts fields."""
    samples: list[dict] = field(default_factory=list)
    """One dict per attempt: problem_id, task, sample_index, completion, finish_reason,
    num_tokens, status, score, detail."""
    shard_uris: list[str] = field(default_factory=list)
    num_shards_reused: int = 0
    num_shards_computed: int = 0
    engine_calls: int = 0
    """Engine generate calls made by this estimate (0 when every shard was stored)."""
    seconds: float = 0.0


@dataclass
class SamplingTally:
    """Totals over several estimates of one run: what was sampled and what was reused."""

    engine_calls: int = 0
    shards_reused: int = 0
    shards_computed: int = 0

    def add(self, result: PassRateResult) -> None:
        self.engine_calls += result.engine_calls
        self.shards_reused += result.num_shards_reused
        self.shards_computed += result.num_shards_computed


def estimate_pass_rates(
    rows: list[dict],
    engine: LazyEngine,
    tokenizer: Any,
    checkpoint: str,
    sampling: ShardSampling,
    verifiers: VerifierSettings,
    shard_size: int,
    system_prompt: str | None = None,
) -> PassRateResult:
    """Pass rates of `rows` (each {id, task, prompt, reference}) under the engine's model.

    `sampling`: the sampling, top_k and engine that change the samples; all of it goes into the
    shard key, and so do the verifier settings.
    """
    start = time.perf_counter()
    calls_before = engine.num_generate_calls
    result = PassRateResult()
    # Versions of what changes the samples or the verdicts (vLLM, transformers, torch, math-verify):
    # an upgrade must not silently reuse pass rates computed by the old stack.
    key_settings = {**sampling.key_fields(), "system_prompt": system_prompt, "verify": verifiers.model_dump(mode="json"),
                    "dependencies": dependency_versions()}
    shards = split_into_shards(rows, shard_size)
    keys = ["passrate/" + shard_key([row["id"] for row in shard], checkpoint, key_settings, verifier_version())
            for shard in shards]
    manifest_configs = [{"checkpoint": checkpoint, **key_settings, "problem_ids": [row["id"] for row in shard],
                         "verifier_version": verifier_version()} for shard in shards]
    missing = [index for index, key in enumerate(keys) if not open_store().exists(key)]
    if missing and engine.workers.workers == "task_workers":
        jobs = [ShardJob(key=keys[index], rows=shards[index], model_ref=engine.model_ref, engine=engine.config,
                         sampling=sampling.for_shard(keys[index]), verifiers=verifiers,
                         system_prompt=system_prompt, manifest_config=manifest_configs[index])
                for index in missing]
        run_on_task_workers(jobs, engine.workers, sample_shard_job)
    progress = Progress(f"pass rates of {len(rows)} problems", len(shards), "shards")
    for index, (shard, key) in enumerate(zip(shards, keys)):
        shard_start = time.perf_counter()
        if index not in missing or engine.workers.workers == "task_workers":
            # stored by an earlier run, or just committed by a task worker
            summaries, samples = load_shard(key)
            result.num_shards_reused += index not in missing
            result.num_shards_computed += index in missing
            run_logger().info("shard %d/%d: reading %s", index + 1, len(shards), key)
        else:
            summaries, samples = sample_shard(shard, engine, tokenizer, sampling.for_shard(key),
                                              verifiers, system_prompt)
            commit_shard(key, summaries, samples, manifest_configs[index])
            result.num_shards_computed += 1
            run_logger().info("shard %d/%d: sampled %d problems in %.0f s (%.1f problems/s; %d to go)",
                                  index + 1, len(shards), len(shard), time.perf_counter() - shard_start,
                                  len(shard) / max(time.perf_counter() - shard_start, 1e-9), len(shards) - index - 1)
        result.summaries.extend(summaries)
        result.samples.extend(samples)
        result.shard_uris.append(open_store().uri(key))
        progress.update(index + 1)
    result.engine_calls = engine.num_generate_calls - calls_before
    result.seconds = time.perf_counter() - start
    return result
