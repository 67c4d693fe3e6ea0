"""Episodes as RL's groups: G episodes per row, returned as the engine's samples per prompt."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from passband.training.engines.config import SamplingConfig
from passband.training.engines.protocol import RolloutEngine, Sample
from passband.training.episodes.environment import Episode, EpisodeBudget
from passband.training.episodes.rollout import EpisodeResult, run_episodes


def episode_groups(engine: RolloutEngine, tokenizer: Any, rows: list[dict[str, Any]],
                   open_episode: Callable[[dict[str, Any]], Episode], sampling: SamplingConfig,
                   budget: EpisodeBudget) -> tuple[list[list[Sample]], list[list[EpisodeResult]]]:
    """(samples, episode results) per row: `sampling.n` episodes of each row run together; each sample is
    an episode's tokens after its prompt with their loss mask, its text the final turn's. Episode
    keys are the row's place in `rows`, its id and the member, so a row drawn twice gets two groups."""
    n = sampling.n
    episodes = [open_episode(row) for row in rows for _ in range(n)]
    keys = [f"{index}/{row['id']}/{member}" for index, row in enumerate(rows) for member in range(n)]
    results = run_episodes(engine, tokenizer, episodes, keys, sampling, budget)
    groups = [results[index * n:(index + 1) * n] for index in range(len(rows))]
    return [[result.to_sample(index, member) for member, result in enumerate(group)]
            for index, group in enumerate(groups)], groups


EpisodeSetup = tuple[Callable[[dict[str, Any]], Episode], EpisodeBudget]
"""(open an episode of a row, its EpisodeBudget): how one multi-turn task's rows run (setups.py: episode_setups)."""


def episode_rows(engine: RolloutEngine, tokenizer: Any, rows: list[dict[str, Any]], setups: dict[str, EpisodeSetup],
                 sampling: SamplingConfig) -> dict[int, tuple[list[Sample], list[EpisodeResult]]]:
    """The rows of the tasks in `setups` as episodes, by their place in `rows`: (samples, episode
    results) of each, task by task, a task's rows together. The other rows are single-turn: the
    caller samples them its own way (evaluation, curation and RL seed them differently)."""
    by_row: dict[int, tuple[list[Sample], list[EpisodeResult]]] = {}
    for task, (open_episode, budget) in setups.items():
        mine = [i for i, row in enumerate(rows) if row["task"] == task]
        if mine:
            groups, results = episode_groups(engine, tokenizer, [rows[i] for i in mine], open_episode, sampling, budget)
            by_row |= dict(zip(mine, zip(groups, results)))
    return by_row


def episode_counts(task: str, groups: list[list[EpisodeResult]]) -> dict[str, float]:
    """Sums over a round's episodes of `task` (sums, so that rounds add up; mean turns per episode is
    num_turns / num_episodes): episodes, model turns, tool calls, and the wall seconds their
    environment steps took (`episode_env_seconds`, summed over episodes that ran side by side)."""
    results = [result for group in groups for result in group]
    return {f"{task}/num_episodes": float(len(results)),
            f"{task}/num_turns": float(sum(r.num_turns for r in results)),
            f"{task}/num_tool_calls": float(sum(r.num_tool_calls for r in results)),
            "episode_env_seconds": sum(r.env_seconds for r in results)}


@dataclass
class TimedEngine:
    """An engine that counts the wall seconds spent in its generate calls: around an episode batch,
    the rest of the batch's wall time is what it waited on environment steps (and on the chat
    template's tokenization of their answers)."""

    engine: RolloutEngine
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return self.engine.name

    def generate(self, prompts: Any, sampling: SamplingConfig, prompt_keys: list[str] | None = None) -> list[list[Sample]]:
        start = time.perf_counter()
        samples = self.engine.generate(prompts, sampling, prompt_keys)
        self.seconds += time.perf_counter() - start
        return samples
