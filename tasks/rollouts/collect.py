"""One iteration's scored rollouts: draw prompts from the seeded cursor, sample, verify, batch;
with dynamic sampling (training/rl/batches/dynamic_sampling.py), in rounds until the batch holds
`prompts_per_step` groups whose rewards differ (partial rollouts: partial.py). It reads the RL flow's settings through
`RolloutSettings` (settings.py); the flow calls it each iteration, or `RolloutsAhead` (ahead.py) does
on its thread.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from passband.tasks.rollouts.settings import RolloutSettings

if TYPE_CHECKING:  # torch-backed: imported where the flow runs
    from passband.training.engines import RolloutEngine, Sample, SamplingConfig
    from passband.training.rl.batches.batching import RolloutBatch
    from passband.training.rl.monitoring.timeline import Span


@dataclass
class ScoredGroup:
    """One prompt's group: its row, its G samples, their rewards and valid flags."""

    row: dict[str, Any]
    samples: list[Any]
    rewards: list[float | None]
    valid: list[bool]
    scores: list[float] = field(default_factory=list)
    """The verifier's score of each sample, also where its reward is None (not a verdict)."""
    statuses: list[str] = field(default_factory=list)
    """The verifier's status of each sample (pass, fail, unparsable, error, ...)."""
    details: list[str] = field(default_factory=list)
    """The verifier's detail of each sample (what it read, why it failed)."""


@dataclass
class Rollouts:
    """What an iteration trains on, and how it was gathered."""

    groups: list[ScoredGroup]
    batch: RolloutBatch
    consumed: dict[str, int]
    """The prompt cursor after every prompt drawn (all rounds)."""
    metrics: dict[str, float]
    """Verifier-status counts of every rollout sampled, rollout speed, dynamic-sampling counts."""
    weight_version: int
    """The weights version the engine sampled them with (training/rl/batches/staleness.py)."""
    spans: list[Span]
    """When each round sampled and scored (training/rl/monitoring/timeline.py; role `rollouts`)."""
    judged: list[dict[str, Any]] = field(default_factory=list)
    """One record per rollout a judge scored, every round (training/judge/; empty without judges)."""
    carried: list[dict[str, Any]] = field(default_factory=list)
    """With rollout.partial, the groups still being written, for the next iteration (OpenGroup.to_json)."""

    @property
    def rollout_s(self) -> float:
        return _seconds(self.spans, "rollout")

    def to_json(self) -> dict[str, Any]:
        """Everything of it as JSON values (a checkpoint keeps the rollouts sampled ahead of the trainer)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rollouts:
        from passband.training.engines.protocol import Sample
        from passband.training.rl.batches.batching import RolloutBatch
        from passband.training.rl.monitoring.timeline import Span

        groups = [ScoredGroup(group["row"], [Sample(**sample) for sample in group["samples"]], group["rewards"],
                              group["valid"], group.get("scores", []), group.get("statuses", []),
                              group.get("details", []))  # checkpoints before these fields lack them
                  for group in data["groups"]]
        return cls(groups, RolloutBatch(**data["batch"]), dict(data["consumed"]), dict(data["metrics"]),
                   data["weight_version"], [Span(**span) for span in data["spans"]], list(data["judged"]),
                   list(data.get("carried", [])))

    @property
    def scoring_s(self) -> float:
        return _seconds(self.spans, "scoring")


def _sample_round(settings: RolloutSettings, tokenizer: Any, engine: RolloutEngine, problems: dict[str, list[dict]],
                  consumed: dict[str, int], num_prompts: int, seed: int,
                  judges: dict[str, Any]) -> tuple[list[ScoredGroup], dict, dict, list[Span], list[dict]]:
    """(groups, cursor after, status counts, the rollout and scoring spans, judge records) of one
    round of `num_prompts`."""
    from passband.tasks.steps.rl import score_rollouts
    from passband.training.chat import render_prompt
    from passband.training.rl.batches.prompt_cursor import draw_prompts
    from passband.training.rl.monitoring.timeline import Span

    weights = {task: weight for task, weight in settings.task_weights.items() if task in problems}  # empty sets left out
    picks, consumed = draw_prompts({task: len(rows) for task, rows in problems.items()}, weights,
                                   consumed, num_prompts, settings.seed)
    rows = [problems[task][index] for task, index in picks]
    prompts = [render_prompt(tokenizer, row["prompt"], settings.system_prompt) for row in rows]
    rollout_start = time.time()
    sampling = settings.sampling.model_copy(update={"seed": seed})
    # one path whatever the settings: episode_setups alone decides which tasks are multi-turn (math_tool,
    # code_feedback and every user environment), as evaluation and curation ask it; none: all single-turn
    samples, episode_counts = _episode_samples(settings, tokenizer, engine, rows, prompts, sampling)
    scoring_start = time.time()
    rewards, valid, counts, judged, verdicts = score_rollouts(rows, samples, settings.verifiers, judges)
    counts = counts | episode_counts
    groups = [ScoredGroup(row, group, group_rewards, group_valid, [r.score for r in results],
                          [r.status for r in results], [r.detail for r in results])
              for row, group, group_rewards, group_valid, results in zip(rows, samples, rewards, valid, verdicts)]
    spans = [Span("rollouts", "rollout", rollout_start, scoring_start), Span("rollouts", "scoring", scoring_start, time.time())]
    return groups, consumed, counts, spans, judged


def _episode_samples(settings: RolloutSettings, tokenizer: Any, engine: RolloutEngine, rows: list[dict], prompts: list[str],
                     sampling: SamplingConfig) -> tuple[list[list[Sample]], dict[str, float]]:
    """(samples per row, the episodes' counts): the rows of the tasks episode_setups runs as episodes
    (math_tool's Python tool, code_feedback's test feedback, the user's `environments`; under the
    environment's system message instead of system_prompt), the others single-turn. An
    episode's sample holds its tokens after the prompt with their loss mask, and its text is the last
    turn's, which the task's verifier scores as a single-turn answer."""
    from passband.tasks.steps.rollout import generate
    from passband.training.episodes.groups import TimedEngine, episode_counts, episode_rows
    from passband.training.episodes.setups import episode_setups

    setups = episode_setups(settings.math_tool, settings.code_feedback, settings.verifiers, settings.environments)
    timed, start = TimedEngine(engine), time.perf_counter()
    episodic = episode_rows(timed, tokenizer, rows, setups, sampling)
    wall = time.perf_counter() - start
    by_row = {i: group for i, (group, _) in episodic.items()}
    counts: dict[str, float] = {}
    for task in {rows[i]["task"] for i in episodic}:
        task_counts = episode_counts(task, [results for i, (_, results) in episodic.items() if rows[i]["task"] == task])
        counts |= task_counts | {"episode_env_seconds": counts.get("episode_env_seconds", 0.0)
                                 + task_counts["episode_env_seconds"]}
    if episodic:
        # wall seconds of the episode batches, and of them the time outside the engine: waiting on
        # environment steps (and tokenizing their answers), the multi-turn cost a single turn has not
        counts |= {"episode_wall_seconds": wall, "episode_wait_seconds": wall - timed.seconds}
    other = [i for i in range(len(rows)) if i not in by_row]
    single, _ = generate(engine, [prompts[i] for i in other], sampling) if other else ([], 0.0)
    by_row |= dict(zip(other, single))
    return [by_row[i] for i in range(len(rows))], counts


def scored_batch(settings: RolloutSettings, groups: list[ScoredGroup]) -> tuple[RolloutBatch, dict[str, float]]:
    """The batch of `groups`, each task's truncated answers shaped as its reward.overlong setting says
    (masked by default: the batch mask_truncated gave), and the shaping's metrics."""
    from passband.training.rl.batches.batching import build_rollout_batch
    from passband.training.rl.batches.overlong import shape_overlong

    samples, tasks = [g.samples for g in groups], [g.row["task"] for g in groups]
    shaped = shape_overlong(samples, [g.rewards for g in groups], [g.valid for g in groups], tasks,
                            {task: settings.overlong[task] for task in set(tasks)}, settings.sampling.max_tokens,
                            settings.mask_truncated)
    batch = build_rollout_batch(samples, shaped.rewards, shaped.valid, tasks, False, settings.sampling.temperature,
                                settings.invalid_reward)  # mask_truncated off: shape_overlong masked per task
    return batch, shaped.metrics


def collect_rollouts(settings: RolloutSettings, tokenizer: Any, engine: RolloutEngine, problems: dict[str, list[dict]],
                     consumed: dict[str, int], iteration: int, iteration_seed: int, weight_version: int,
                     judges: dict[str, Any] | None = None) -> Rollouts:
    """The iteration's scored groups from the prompt cursor `consumed` (left unchanged; the one
    after is the result's);
    `judges` (task -> training.judge Judge) score their tasks' rollouts instead of the verifiers."""
    from passband.tasks.steps.rollout import rollout_stats
    from passband.training.rl.batches.dynamic_sampling import GroupPool, round_prompts, round_seed
    from passband.training.rl.monitoring.rollout_metrics import zero_variance_flags

    dynamic = settings.dynamic_sampling
    if dynamic is None:
        groups, consumed, counts, spans, judged = _sample_round(
            settings, tokenizer, engine, problems, consumed, settings.prompts_per_step, iteration_seed,
            judges or {})
        speed = rollout_stats([g.samples for g in groups], _seconds(spans, "rollout"))["tokens_per_s"]
        batch, shaping = scored_batch(settings, groups)
        return Rollouts(groups, batch, consumed, counts | shaping | {"rollout_tokens_per_s": speed},
                        weight_version, spans, judged)

    pool: GroupPool[ScoredGroup] = GroupPool(need=settings.prompts_per_step)
    counts, spans, samples, rounds = {}, [], [], 0
    judged: list[dict] = []
    while pool.missing > 0 and rounds < dynamic.max_rounds:
        groups, consumed, round_counts, round_spans, round_judged = _sample_round(
            settings, tokenizer, engine, problems, consumed, round_prompts(pool.missing, dynamic.oversample),
            round_seed(iteration_seed, rounds), judges or {})
        judged += [record | {"round": rounds} for record in round_judged]
        pool.add_round(groups, zero_variance_flags(scored_batch(settings, groups)[0]))
        counts = {name: counts.get(name, 0.0) + round_counts.get(name, 0.0) for name in {*counts, *round_counts}}
        rounds, spans = rounds + 1, spans + round_spans
        samples += [g.samples for g in groups]
    kept = pool.batch(dynamic.when_short, iteration, rounds)
    speed = rollout_stats(samples, _seconds(spans, "rollout"))["tokens_per_s"]
    batch, shaping = scored_batch(settings, kept)
    metrics = counts | pool.metrics(rounds) | shaping | {"rollout_tokens_per_s": speed}
    return Rollouts(kept, batch, consumed, metrics, weight_version, spans, judged)


def _seconds(spans: list[Span], phase: str) -> float:
    from passband.training.rl.monitoring.timeline import phase_seconds

    return phase_seconds(spans).get(("rollouts", phase), 0.0)
