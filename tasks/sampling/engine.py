"""The engines shards are sampled on: the flow's engine, opened only when a shard is missing
(LazyEngine), and a task worker's engine, kept open across its jobs (kept_engine)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from passband.tasks.reporting.logs import run_logger
from passband.tasks.sampling.dispatch import SamplingWorkersConfig
from passband.training.engines import EngineConfig, RolloutEngine, Sample, SamplingConfig, open_engine


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


@functools.cache
def _model_dir(model_ref: str) -> str:
    """The worker's local copy of a checkpoint, resolved once: a name or URI names immutable
    weights, and a plain directory resolves to itself (the keeper notices rewritten weights)."""
    from passband.tasks.artifacts.model import resolve_model

    return resolve_model(model_ref)


def kept_engine(model_ref: str, config: EngineConfig, weights_dir: str | None = None) -> tuple[RolloutEngine, Any]:
    """The worker's engine holding `model_ref`'s weights (or `weights_dir`'s: an RL weights version
    of that model), and its tokenizer: the engine comes from the process's keeper
    (training/engines/keeper.py), so it stays open across jobs and a job on another checkpoint of
    the same architecture only swaps weights in. The worker holds the keeper's scope for its
    lifetime (tasks/sampling/worker.py)."""
    from passband.training.engines.keeper import ENGINES
    from passband.training.model_source import load_tokenizer

    model_dir = _model_dir(model_ref)
    return ENGINES.engine(config, model_dir, weights_dir), load_tokenizer(Path(model_dir), config.trust_remote_code)
