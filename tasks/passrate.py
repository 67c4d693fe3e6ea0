"""Sharded, resumable pass-rate estimation: n verified rollouts per problem, one artifact per shard.

Problems are cut into shards (curation.passrate.split_into_shards). A shard's result, the
per-problem summary and the per-sample rows, is committed as the artifact
`passrate/<shard_key>`, where the key hashes the shard's problem ids, the checkpoint id (model
ref + hash of its weights' manifest), the sampling settings and the verifier version. Before
sampling a shard its key is looked up: a committed shard is read back, not recomputed, so a
repeated run does no sampling and a crashed run resumes at the first missing shard. The engine
is opened only when some shard is missing (LazyEngine), and counts its generate calls. With
`sampling.workers = task_workers` the missing shards are sampled and committed by Prefect task
workers instead (tasks/shard_dispatch.py), and the flow reads them back like stored ones.
"""

from __future__ import annotations

import functools
import hashlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import NONE

from passband.curation.passrate import shard_key, split_into_shards, summarize_attempts
from passband.curation.catalog import VerifierSettings
from passband.curation.catalog.verify import verify_groups
from passband.tasks.logs import run_logger
from passband.tasks.progress import Progress
from passband.tasks.registry import TRAINER_FILES
from passband.tasks.provenance import code_version, config_hash, dependency_versions
from passband.tasks.shard_dispatch import SamplingWorkersConfig
from passband.tasks.store import open_store
from passband.training.engines import EngineConfig, RolloutEngine, Sample, SamplingConfig, open_engine

SUMMARY_FILE = "summary.parquet"
SAMPLES_FILE = "samples.parquet"
VERIFIER_SOURCES = ("curation/verifiers", "curation/catalog/verify.py", "curation/passrate.py")
REPO_ROOT = Path(__file__).resolve().parents[1]



def sources_version(sources: tuple[str, ...]) -> str:
    """12 hex of a sha256 over the given source files and folders (relative to the repo root)."""
    digest = hashlib.sha256()
    for relative in sources:
        path = REPO_ROOT / relative
        for source in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(source.relative_to(REPO_ROOT).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(source.read_bytes()).digest())
    return digest.hexdigest()[:12]


@functools.cache
def verifier_version() -> str:
    """12 hex of a sha256 over the verifiers', the grouped verification's and the pass-rate
    arithmetic's source files.

    Narrower than code_version(): editing a flow or a trainer does not invalidate stored shards,
    editing how a sample is judged does.
    """
    return sources_version(VERIFIER_SOURCES)


def checkpoint_id(model_ref: str, model_dir: str) -> str:
    """`<ref>@<16 hex>`: the hex hashes the sha256 of every weight/config/tokenizer file of the checkpoint.

    The trainer's resume state (`TRAINER_FILES`: optimizer, RNG states, data cursor) is left out:
    it does not change what the model generates, and its RNG states differ between two runs that
    train bit-identical weights, which would give their samples different seeds. For a committed
    artifact (the shipped model, an artifact URI) the file hashes come from its manifest, so
    nothing is re-read; for a plain directory the files are hashed here.
    """
    from passband.tasks.model import SMOLLM2_KEY
    from passband.training.model_source import SMOLLM2_NAME

    if model_ref == SMOLLM2_NAME:
        files = open_store().manifest(SMOLLM2_KEY)["files"]
    elif model_ref.startswith(("file://", "s3://")):
        root, _, name = model_ref.rstrip("/").rpartition("/")
        files = open_store(root).manifest(name)["files"]
    else:
        files = {path.relative_to(model_dir).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
                 for path in sorted(Path(model_dir).rglob("*")) if path.is_file()}
    model_files = {name: digest for name, digest in files.items() if Path(name).name not in TRAINER_FILES}
    return f"{model_ref}@{config_hash(model_files)[:16]}"


class LazyEngine:
    """A rollout engine opened on the first generate call; counts generate calls.

    Opening vLLM costs ~1 minute here, so a run whose shards are all stored never opens it.
    """

    def __init__(self, config: EngineConfig, model_dir: str, model_ref: str | None = None,
                 workers: SamplingWorkersConfig = SamplingWorkersConfig()) -> None:
        if workers.workers == "task_workers" and model_ref is None:
            raise ValueError("sampling.workers = task_workers needs the model's ref (name, URI or "
                             "directory) for the workers to open; pass model_ref")
        self.config = config
        self.model_dir = model_dir
        self.model_ref = model_ref
        """The checkpoint as the flow names it: what a task worker resolves and opens."""
        self.workers = workers
        """Where missing shards are sampled: this engine (`local`) or Prefect task workers."""
        self.engine: RolloutEngine | None = None
        self.num_generate_calls = 0
        """How many times generate reached the engine (the count a reuse test asserts on)."""

    def generate(
        self, prompts: list[str], sampling: SamplingConfig, prompt_keys: list[str] | None = None
    ) -> list[list[Sample]]:
        if self.engine is None:
            run_logger().info("opening %s engine on %s", self.config.kind, self.model_dir)
            self.engine = open_engine(self.config, self.model_dir)
        self.num_generate_calls += 1
        return self.engine.generate(prompts, sampling, prompt_keys)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


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
    sampling: dict[str, Any],
    verifiers: VerifierSettings,
    shard_size: int,
    system_prompt: str | None = None,
) -> PassRateResult:
    """Pass rates of `rows` (each {id, task, prompt, reference}) under the engine's model.

    `sampling` holds n (rollouts per problem), top_k (attempts per rollout), temperature,
    top_p, max_tokens, stop and seed, plus anything else that changes the samples (engine kind
    and dtype); all of it goes into the shard key, and so do the verifier settings.
    """
    start = time.perf_counter()
    calls_before = engine.num_generate_calls
    result = PassRateResult()
    # Versions of what changes the samples or the verdicts (vLLM, transformers, torch, math-verify):
    # an upgrade must not silently reuse pass rates computed by the old stack.
    key_settings = {**sampling, "system_prompt": system_prompt, "verify": verifiers.model_dump(mode="json"),
                    "dependencies": dependency_versions()}
    shards = split_into_shards(rows, shard_size)
    keys = ["passrate/" + shard_key([row["id"] for row in shard], checkpoint, key_settings, verifier_version())
            for shard in shards]
    manifest_configs = [{"checkpoint": checkpoint, **key_settings, "problem_ids": [row["id"] for row in shard],
                         "verifier_version": verifier_version()} for shard in shards]
    missing = [index for index, key in enumerate(keys) if not open_store().exists(key)]
    if missing and engine.workers.workers == "task_workers":
        from passband.tasks.shard_dispatch import run_on_task_workers
        from passband.tasks.shard_job import ShardJob, sample_shard_job

        jobs = [ShardJob(key=keys[index], rows=shards[index], model_ref=engine.model_ref, engine=engine.config,
                         sampling=shard_sampling(sampling, keys[index]), verifiers=verifiers,
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
            summaries, samples = sample_shard(shard, engine, tokenizer, shard_sampling(sampling, key),
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


def shard_sampling(sampling: dict[str, Any], key: str) -> dict[str, Any]:
    """The sampling settings of one shard, seeded by the shard's own key (its problems, model,
    settings): its samples do not depend on which shards ran before it, nor on which process ran it."""
    return {**sampling, "seed": int(key.rsplit("/", 1)[1][:12], 16)}


@task(name="sample-shard", cache_policy=NONE)
def sample_shard(
    shard: list[dict], engine: LazyEngine | RolloutEngine, tokenizer: Any, sampling: dict[str, Any],
    verifiers: VerifierSettings, system_prompt: str | None,
) -> tuple[list[dict], list[dict]]:
    """Generate n * top_k attempts per problem, verify each, summarize per problem."""
    from passband.training.chat import render_prompt
    from passband.training.engines import SamplingConfig

    num_attempts = sampling["n"] * sampling["top_k"]
    settings = SamplingConfig(
        n=num_attempts, temperature=sampling["temperature"], top_p=sampling["top_p"],
        max_tokens=sampling["max_tokens"], stop=sampling["stop"], seed=sampling["seed"],
    )
    prompts = [render_prompt(tokenizer, row["prompt"], system_prompt) for row in shard]
    groups = engine.generate(prompts, settings)
    samples = [
        {"problem_id": row["id"], "task": row["task"], "sample_index": s.sample_index, "completion": s.text,
         "finish_reason": s.finish_reason, "num_tokens": len(s.token_ids)}
        for row, group in zip(shard, groups) for s in group
    ]
    verdicts = verify_groups([row["task"] for row in shard], [row["reference"] for row in shard],
                             [[s.text for s in group] for group in groups], verifiers)
    for sample, verdict in zip(samples, (v for group in verdicts for v in group), strict=True):
        sample.update(status=verdict.status, score=verdict.score, detail=verdict.detail)
    statuses = [[s["status"] for s in samples if s["problem_id"] == row["id"]] for row in shard]
    summaries = [{"problem_id": row["id"], **summary}
                 for row, summary in zip(shard, summarize_attempts(statuses, k=sampling["top_k"]))]
    return summaries, samples


@task(name="commit-shard", retries=2, retry_delay_seconds=2)
def commit_shard(key: str, summaries: list[dict], samples: list[dict], config: dict[str, Any]) -> str:
    """Both Parquet files of a shard under `key`, manifest last (so a crash leaves no shard)."""
    store = open_store()
    with tempfile.TemporaryDirectory(prefix="passband-shard-") as tmp:
        pq.write_table(pa.Table.from_pylist(summaries), Path(tmp) / SUMMARY_FILE)
        pq.write_table(pa.Table.from_pylist(samples), Path(tmp) / SAMPLES_FILE)
        store.commit(key, Path(tmp), flow="curate", config=config, code_version=code_version(),
                     extra={"num_problems": len(summaries), "num_samples": len(samples)})
    return store.uri(key)


@task(name="load-shard", retries=2, retry_delay_seconds=2)
def load_shard(key: str) -> tuple[list[dict], list[dict]]:
    """The (summaries, samples) of a committed shard, checksums verified."""
    folder = open_store().fetch(key)
    return pq.read_table(folder / SUMMARY_FILE).to_pylist(), pq.read_table(folder / SAMPLES_FILE).to_pylist()
