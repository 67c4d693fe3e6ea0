"""One pass-rate shard's work, in the flow or as a job a Prefect task worker runs.

`sample_shard` generates n * top_k attempts per problem and verifies them; `commit_shard` stores
the per-problem summary and the per-sample rows as the artifact `passrate/<shard_key>`, manifest
last; `load_shard` reads them back. The flow calls them itself (tasks/sampling/passrate.py) or
sends the shard as a `ShardJob`: it names everything the shard's samples depend on (rows,
checkpoint, engine config, sampling, verifiers) plus its key, the worker samples, verifies and
commits it and returns the shard's URI, so payloads never travel through Prefect.

A worker (`python -m passband.tasks.sampling.worker`, started by `passband up --task-workers N`,
the compose service or the Kubernetes manifest) serves one job at a time, pass-rate shards and eval
shards (tasks/sampling/eval_job.py) alike, and keeps its engine open across jobs in the process's
engine keeper (tasks/sampling/engine.py: kept_engine): an engine start costs ~20 s here, a weight
swap ~1 s.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import NONE
from pydantic import BaseModel, ConfigDict, Field

from passband.curation.catalog import VerifierSettings
from passband.curation.catalog.verify import verify_groups
from passband.curation.passrate import summarize_attempts
from passband.tasks.artifacts.provenance import code_version
from passband.tasks.artifacts.store import open_store
from passband.tasks.sampling.claim import claim, job_run_name
from passband.tasks.sampling.keys import sources_version
from passband.tasks.sampling.engine import LazyEngine, kept_engine
from passband.training.engines import EngineConfig, RolloutEngine, SamplingConfig
from passband.training.episodes.code_feedback import CodeFeedbackConfig
from passband.training.episodes.math_python import MathToolConfig
from passband.training.episodes.setups import EnvironmentConfig, environment_source_version

SUMMARY_FILE = "summary.parquet"
SAMPLES_FILE = "samples.parquet"


class ShardSampling(BaseModel):
    """What changes a pass-rate shard's samples beside its rows, checkpoint and verifiers: the sampling,
    the attempts per rollout and the engine that draws them. It is hashed into the shard's key
    (`key_fields`), and the key seeds the shard (`for_shard`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sampling: SamplingConfig
    """n = rollouts per problem; seed: the run's base seed in the key, the shard's own once `for_shard`."""
    top_k: int = Field(1, ge=1)
    """Attempts per rollout; a rollout solves a problem if any of its attempts passes."""
    engine_kind: str
    """EngineConfig.kind: the two engines sample differently from the same seed."""
    engine_dtype: str
    """EngineConfig.resolved_dtype(): what the engine runs in (`auto` decided by the flow's machine)."""
    engine_split_kv: bool = False
    """EngineConfig.split_kv_attention: on, a sequence's logits depend on what shares its steps."""
    engine_lm_head_fp32: bool = False
    """EngineConfig.lm_head_fp32: the logits in fp32 under a bf16 body sample other tokens at near-ties."""
    math_tool: MathToolConfig | None = None
    """Math problems as multi-turn episodes with the Python tool (curate's `math_tool`): each attempt is
    a whole episode, graded on its answer turn. None: single-turn."""
    code_feedback: CodeFeedbackConfig | None = None
    """Code problems as multi-turn episodes with test feedback (curate's `code_feedback`), each attempt
    graded on its last try. None: single-turn."""
    environments: dict[str, EnvironmentConfig] = {}
    """Tasks run as episodes of the user's own environments (curate's `environments`)."""

    def key_fields(self) -> dict[str, Any]:
        """The settings as the shard key hashes them (a flat mapping: the keys, hence the shards'
        seeds, of every stored shard were computed from exactly these nine entries; split-KV attention,
        the fp32 LM head and the episode settings, off by default, add an entry each only when on, so
        the default's keys and seeds stay those). With episodes, the source of the environments keys the
        shard too (training/episodes/, and a user environment's module), so an edit resamples."""
        s = self.sampling
        return {"n": s.n, "top_k": self.top_k, "temperature": s.temperature, "top_p": s.top_p,
                "max_tokens": s.max_tokens, "stop": list(s.stop), "seed": s.seed,
                "engine_kind": self.engine_kind, "engine_dtype": self.engine_dtype,
                **({"engine_split_kv": True} if self.engine_split_kv else {}),
                **({"engine_lm_head_fp32": True} if self.engine_lm_head_fp32 else {}),
                **({"math_tool": self.math_tool.model_dump(mode="json")} if self.math_tool else {}),
                **({"code_feedback": self.code_feedback.model_dump(mode="json")} if self.code_feedback else {}),
                **({"environments": {task: {**config.model_dump(mode="json"),
                                            "source": environment_source_version(config.environment)}
                                     for task, config in sorted(self.environments.items())}}
                   if self.environments else {}),
                **({"episodes_source": sources_version(("training/episodes",))}
                   if self.math_tool or self.code_feedback or self.environments else {})}

    def for_task(self, task: str) -> ShardSampling:
        """These settings with only `task`'s episode settings: a shard of a single-turn task keys and
        samples as it would with none."""
        return self.model_copy(update={"math_tool": self.math_tool if task == "math" else None,
                                       "code_feedback": self.code_feedback if task == "code" else None,
                                       "environments": {name: config for name, config in self.environments.items()
                                                        if name == task}})

    def for_shard(self, key: str) -> ShardSampling:
        """These settings seeded by the shard's own key (its problems, model, settings): its samples do
        not depend on which shards ran before it, nor on which process ran it."""
        return self.model_copy(update={"sampling": self.sampling.model_copy(
            update={"seed": int(key.rsplit("/", 1)[1][:12], 16)})})

    def with_draw(self, n: int) -> ShardSampling:
        """These settings with `n` rollouts of one attempt each (SFT selection's own draw)."""
        return self.model_copy(update={"sampling": self.sampling.model_copy(update={"n": n}), "top_k": 1})

    def attempts(self) -> SamplingConfig:
        """The engine's SamplingConfig: n * top_k attempts per problem."""
        return self.sampling.model_copy(update={"n": self.sampling.n * self.top_k})


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
    sampling: ShardSampling
    """The shard's sampling, seeded by its key."""
    verifiers: VerifierSettings
    """Verifier settings of the run."""
    system_prompt: str | None
    """System message of the rollouts."""
    manifest_config: dict[str, Any]
    """What the shard's manifest records as its producing config."""


@task(name="sample-shard", cache_policy=NONE)
def sample_shard(
    shard: list[dict], engine: LazyEngine | RolloutEngine, tokenizer: Any, sampling: ShardSampling,
    verifiers: VerifierSettings, system_prompt: str | None,
) -> tuple[list[dict], list[dict]]:
    """Generate n * top_k attempts per problem, verify each, summarize per problem. A task that
    `sampling` runs as episodes (math_tool, code_feedback, environments) makes each attempt a whole episode: its
    completion is the last turn, the one the task's verifier grades, and its row also holds the
    episode's turns and tool calls."""
    from passband.training.chat import render_prompt
    from passband.training.episodes.groups import episode_rows
    from passband.training.episodes.setups import episode_setups

    setups = episode_setups(sampling.math_tool, sampling.code_feedback, verifiers, sampling.environments)
    single = [i for i, row in enumerate(shard) if row["task"] not in setups]
    prompts = [render_prompt(tokenizer, shard[i]["prompt"], system_prompt) for i in single]
    by_index = dict(zip(single, engine.generate(prompts, sampling.attempts()) if single else []))
    episodic = episode_rows(engine, tokenizer, shard, setups, sampling.attempts())
    by_index |= {i: group for i, (group, _) in episodic.items()}
    turns = {(i, j): result.token_columns()  # (problem, attempt) -> the episode's columns
             for i, (_, results) in episodic.items() for j, result in enumerate(results)}
    groups = [by_index[i] for i in range(len(shard))]
    samples = [
        {"problem_id": row["id"], "task": row["task"], "sample_index": s.sample_index, "completion": s.text,
         "finish_reason": s.finish_reason, "num_tokens": len(s.token_ids)} | turns.get((i, j), {})
        for i, (row, group) in enumerate(zip(shard, groups)) for j, s in enumerate(group)
    ]
    verdicts = verify_groups([row["task"] for row in shard], [row["reference"] for row in shard],
                             [[s.text for s in group] for group in groups], verifiers)
    for sample, verdict in zip(samples, (v for group in verdicts for v in group), strict=True):
        sample.update(status=verdict.status, score=verdict.score, detail=verdict.detail)
    statuses = [[s["status"] for s in samples if s["problem_id"] == row["id"]] for row in shard]
    summaries = [{"problem_id": row["id"], **summary}
                 for row, summary in zip(shard, summarize_attempts(statuses, k=sampling.top_k))]
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


@task(name="sample-shard-job", cache_policy=NONE, task_run_name=job_run_name)
def sample_shard_job(job_json: str) -> str:
    """Sample, verify and commit one shard (manifest last); return its URI.

    The job travels as JSON, not pickled: a worker whose configs gained a defaulted field since
    the flow started still reads it (a pickled pydantic object would lack the field)."""
    job = ShardJob.model_validate_json(job_json)
    committed = claim(job.key)
    if committed is not None:
        return committed
    engine, tokenizer = kept_engine(job.model_ref, job.engine)
    summaries, samples = sample_shard(job.rows, engine, tokenizer, job.sampling, job.verifiers, job.system_prompt)
    return commit_shard(job.key, summaries, samples, job.manifest_config)
