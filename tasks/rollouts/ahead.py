"""Rollouts ahead of the trainer: with `rollout.max_off_policy_steps` k >= 1, the next k iterations'
rollouts are sampled on a background thread while the trainer updates (training/rl/batches/staleness.py
says with which weights, and why a fixed lag).

One thread owns the engine's sampling, so collections run one after another, each from the prompt
cursor the one before it left (so a batch's prompts are what the synchronous loop would draw). The
trainer publishes every update as a version (training/weights/versions.py) and does not touch
the engine; each collection loads the version the schedule names before it samples, and the
held-out evaluation borrows the engine through the same lock to score the newest weights.

A checkpoint waits for the collections already queued (the next k iterations') and keeps them
(`in_flight`); a rerun resumed from it trains on those and samples the ones after with the
weights the checkpoint holds, as the uninterrupted run did, so a stop or a kill changes nothing.
A process that stops before the run's end (`max_iterations_this_run`) still collects the k
iterations past its last for that checkpoint.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from passband.tasks.rollouts.settings import RolloutSettings, iteration_seed
from passband.training.rl.batches.staleness import behaviour_version, check_staleness

if TYPE_CHECKING:  # torch-backed: imported where the flow runs
    from passband.tasks.rollouts.collect import Rollouts
    from passband.training.engines import RolloutEngine
    from passband.training.rl.monitoring.timeline import Span


@dataclass
class VersionedEngine:
    """The rollout engine, shared by the rollout thread and the evaluator: who uses it holds the
    lock, and the version it holds is known (`version`), so a load happens only on a change."""

    engine: RolloutEngine
    root: Path
    """Where the trainer publishes its versions."""
    version: int
    """The weights version the engine holds."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    loads: list[Span] = field(default_factory=list)
    """The weight loads not yet taken into the run's timeline, by role."""
    loads_lock: threading.Lock = field(default_factory=threading.Lock)
    """Guards `loads` alone: the trainer takes them while the rollout thread holds `lock` to sample."""

    @contextmanager
    def at(self, version: int, role: str = "rollouts") -> Iterator[RolloutEngine]:
        """The engine holding weights `version` (loaded for `role` if it holds another), for this block alone."""
        from passband.training.rl.monitoring.timeline import Span
        from passband.training.weights.versions import load_version

        with self.lock:
            if version != self.version:
                start = time.time()
                load_version(self.engine, self.root, version)
                with self.loads_lock:
                    self.loads.append(Span(role, "weight_load", start, time.time()))
                self.version = version
            yield self.engine

    def take_loads(self, role: str = "rollouts") -> list[Span]:
        """`role`'s weight loads since the last call, removed from `loads`."""
        with self.loads_lock:
            taken = [span for span in self.loads if span.role == role]
            self.loads = [span for span in self.loads if span.role != role]
        return taken


@dataclass
class RolloutsAhead:
    """The rollouts of iterations up to k ahead of the one training, collected on one thread."""

    settings: RolloutSettings
    """What each collection reads of the RL config."""
    max_off_policy_steps: int
    """k (rollout.max_off_policy_steps >= 1): iteration i samples with the weights of k updates ago."""
    tokenizer: Any
    engine: VersionedEngine
    problems: dict[str, list[dict]]
    judges: dict[str, Any]
    resumed_at: int
    """Iterations completed when this process started; the engine starts at that version."""
    last_iteration: int
    """The run's last iteration: nothing is collected past it."""
    consumed: dict[str, int]
    """The prompt cursor the first collection starts from (each later one starts from the cursor
    its predecessor's rollouts end at)."""
    pending: dict[int, Future] = field(default_factory=dict)
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "rl-rollouts"))

    def take(self, iteration: int) -> Rollouts:
        """Iteration `iteration`'s rollouts (waiting for them), after queueing those of the next k."""
        for ahead in range(iteration, min(iteration + self.max_off_policy_steps, self.last_iteration) + 1):
            if ahead not in self.pending:
                self.pending[ahead] = self._submit(ahead)
        rollouts = self.pending.pop(iteration).result()
        check_staleness(iteration, rollouts.weight_version, self.max_off_policy_steps)
        return rollouts

    def in_flight(self) -> list[dict[str, Any]]:
        """The collections queued for the iterations after the one last taken, waited for, as the
        checkpoint keeps them (RLState.in_flight)."""
        return [{"iteration": ahead, **self.pending[ahead].result().to_json()} for ahead in sorted(self.pending)]

    def resume(self, in_flight: list[dict[str, Any]]) -> None:
        """Take a checkpoint's in-flight rollouts as collected: the next iterations train on them."""
        from passband.tasks.rollouts.collect import Rollouts

        iterations = [item["iteration"] for item in in_flight]
        expected = list(range(self.resumed_at + 1, self.resumed_at + 1 + len(in_flight)))
        if iterations != expected or len(in_flight) > self.max_off_policy_steps:
            raise ValueError(f"the checkpoint after iteration {self.resumed_at} holds in-flight rollouts of "
                             f"iterations {iterations}: max_off_policy_steps={self.max_off_policy_steps} resumes from "
                             f"at most {self.max_off_policy_steps} of them, from iteration {self.resumed_at + 1} on")
        for item in in_flight:
            collected: Future = Future()
            collected.set_result(Rollouts.from_json({k: v for k, v in item.items() if k != "iteration"}))
            self.pending[item["iteration"]] = collected

    def _submit(self, iteration: int) -> Future:
        # the collections queue on one thread: this one starts where the one before it leaves the
        # cursor, which `_collect` hands on through the previous future
        previous = self.pending.get(iteration - 1)
        version = behaviour_version(iteration, self.max_off_policy_steps, self.resumed_at)
        seed = iteration_seed(self.settings.seed, iteration)
        context = contextvars.copy_context()  # the flow run's: Prefect tasks and logging inside see it
        return self.executor.submit(context.run, self._collect, iteration, version, seed, previous)

    def _collect(self, iteration: int, version: int, seed: int, previous: Future | None) -> Rollouts:
        from passband.tasks.rollouts.collect import collect_rollouts

        consumed = previous.result().consumed if previous is not None else self.consumed
        with self.engine.at(version) as engine:
            return collect_rollouts(self.settings, self.tokenizer, engine, self.problems, consumed, iteration, seed,
                                    version, self.judges)

    def close(self) -> None:
        """Wait for the collections still running (past an early stop or this run's last
        iteration they are never trained on) and stop the thread."""
        self.executor.shutdown(wait=True, cancel_futures=True)
