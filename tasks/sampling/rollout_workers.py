"""RL's rollouts on Prefect task workers (`rollout.workers: task_workers`): the rollout engine
protocol (training/engines/protocol.py) served by long-lived workers that keep their engine.

The RL flow holds a `WorkerEngine` where it would hold its own engine, so everything that samples
through the engine (the iteration's rollouts, dynamic sampling's rounds, the held-out evaluation,
the rollouts ahead of the trainer) samples on the workers unchanged. Its weights are a version
folder the trainer published (training/weights/versions.py): `load_weights` only records which,
and every job names it, so a worker loads a version in place (its engine keeper swaps weights) the
first time a job asks for it. A call is split into `shards_per_call` contiguous shards, one job
each (tasks/sampling/rollout_job.py), run by tasks/sampling/dispatch.py: a lost worker's shards are
submitted again, and a shard committed twice is sampled once.

Seeds: one shard is the one call the flow's own engine would make (the same `prompt_keys`, so the
same samples bit for bit on one machine). Split into several, each prompt is seeded by its index in
the whole call, which is exactly what vLLM does in one call (training/engines/seeds.py); the
transformers engine then seeds per prompt rather than once per call, equally reproducible but
another stream.

The flow and the workers must see the same artifact root. The weights travel as the version's
folder (one machine, or a filesystem the workers share) or, with `weights_through_store`, as an
artifact committed once per version (`rl-weights/<hash>`) that each worker fetches into its cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from passband.tasks.reporting.logs import run_logger
from passband.tasks.sampling.dispatch import RolloutWorkersConfig, run_on_task_workers
from passband.tasks.sampling.rollout_job import (ROLLOUT_SHARD_PREFIX, RolloutShardJob, load_rollout_shard,
                                                 rollout_shard_job)
from passband.training.engines import EngineConfig, Sample, SamplingConfig


def shard_bounds(num_prompts: int, num_shards: int) -> list[tuple[int, int]]:
    """[start, end) of at most `num_shards` contiguous, non-empty shards of `num_prompts` prompts,
    sizes differing by at most one (the first ones larger)."""
    num_shards = max(1, min(num_shards, num_prompts))
    size, extra = divmod(num_prompts, num_shards)
    bounds, start = [], 0
    for index in range(num_shards):
        end = start + size + (index < extra)
        bounds.append((start, end))
        start = end
    return bounds


class WorkerEngine:
    """RolloutEngine whose generate calls run on Prefect task workers, at the weights it was last
    told to hold."""

    name = "task_workers"

    def __init__(self, model_ref: str, config: EngineConfig, weights_dir: Path, workers: RolloutWorkersConfig) -> None:
        self.model_ref = model_ref
        """The model as the flow names it: the workers' engine architecture and tokenizer."""
        self.config = config
        self.weights_dir = weights_dir
        """The weights the next calls sample with: the model's own folder, or a published version."""
        self.workers = workers
        self._committed: dict[str, str] = {}
        """Weights identity (hash of weights_fingerprint) -> the URI it was committed at (weights_through_store)."""
        self.num_jobs = 0
        """Shard jobs submitted by this engine (tests and logs read it)."""

    def generate(self, prompts: list[str], sampling: SamplingConfig,
                 prompt_keys: list[str] | None = None) -> list[list[Sample]]:
        from passband.training.engines.keeper import weights_fingerprint
        from passband.training.weights.versions import MANIFEST

        bounds = shard_bounds(len(prompts), self.workers.shards_per_call)
        if prompt_keys is None and len(bounds) > 1:  # the call's own seeds: each prompt's index in it
            prompt_keys = [str(index) for index in range(len(prompts))]
        # the weights, once for every shard of the call: named by their files' paths, sizes and mtimes
        # in each shard's key (a version republished by a resumed run is another shard, a shard
        # resubmitted after a lost worker the same one), and their version when they are one
        fingerprint = weights_fingerprint(self.weights_dir)
        manifest = self.weights_dir / MANIFEST
        version = json.loads(manifest.read_text())["version"] if manifest.is_file() else None
        weights = self._weights_ref(self.weights_dir, fingerprint)
        jobs = []
        for start, end in bounds:
            keys = None if prompt_keys is None else prompt_keys[start:end]
            content = {"prompts": prompts[start:end], "prompt_keys": keys, "model": self.model_ref,
                       "weights": fingerprint, "engine": self.config.model_dump(mode="json"),
                       "sampling": sampling.model_dump(mode="json")}
            digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
            jobs.append(RolloutShardJob(key=ROLLOUT_SHARD_PREFIX + digest, prompts=prompts[start:end], prompt_keys=keys,
                                        model_ref=self.model_ref, weights_dir=weights, weight_version=version,
                                        engine=self.config, sampling=sampling))
        self.num_jobs += len(jobs)
        run_logger().info("rollouts: %d prompts in %d shards on task workers", len(prompts), len(jobs))
        run_on_task_workers(jobs, self.workers, rollout_shard_job)
        groups = [group for job in jobs for group in load_rollout_shard(job.key)]
        return [[_at(sample, index) for sample in group] for index, group in enumerate(groups)]

    def _weights_ref(self, folder: Path, fingerprint: tuple) -> str:
        """What a job names the weights by: the folder, or its store URI (committed on first use)."""
        if not self.workers.weights_through_store:
            return str(folder)
        from passband.tasks.artifacts.checkpoints import commit_checkpoint

        # by content identity: a version the evaluator and the rollouts take turns at is committed once,
        # one a resumed run republished under the same name again
        digest = hashlib.sha256(json.dumps(fingerprint).encode()).hexdigest()[:24]
        if digest not in self._committed:
            # the weights alone, hard-linked beside the version (no copy): the store owns the name
            # manifest.json, which a version folder uses for its own
            with tempfile.TemporaryDirectory(prefix=".store-", dir=folder.parent) as staging:  # one filesystem
                for shard in folder.glob("*.safetensors"):
                    os.link(shard, Path(staging) / shard.name)
                self._committed[digest] = commit_checkpoint(staging, f"rl-weights/{digest}", "rl",
                                                            {"weights_dir": str(folder)}, {})
        return self._committed[digest]

    def load_weights(self, checkpoint_dir: Path) -> None:
        """Sample the next calls with `checkpoint_dir`'s weights (each worker loads them on its next job)."""
        self.weights_dir = Path(checkpoint_dir)

    def release_weights(self) -> None:
        """Nothing is held in this process."""

    def sleep(self) -> None:
        """The workers' engines are not beside the trainer."""

    def wake(self) -> None:
        """See sleep."""

    def close(self) -> None:
        """The workers keep their engines for the next run (`passband down` stops them)."""


def _at(sample: Sample, prompt_index: int) -> Sample:
    """`sample` renumbered to its prompt's index in the whole call (a shard numbers from 0)."""
    from dataclasses import replace

    return replace(sample, prompt_index=prompt_index)
