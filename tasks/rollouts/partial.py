"""One iteration's rollouts with `rollout.partial` (training/rl/batches/partial.py): the groups carried
from the last iteration and the prompts that top them up to `prompts_per_step` are sampled in rounds of
`chunk_tokens`; the iteration trains on the groups complete when enough are, and carries the rest.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from passband.tasks.rollouts.collect import Rollouts, ScoredGroup, scored_batch
from passband.tasks.rollouts.settings import RolloutSettings

if TYPE_CHECKING:  # torch-backed: imported where the flow runs
    from passband.training.engines import RolloutEngine
    from passband.training.rl.batches.partial import OpenGroup


def collect_partial(settings: RolloutSettings, tokenizer: Any, engine: RolloutEngine, problems: dict[str, list[dict]],
                    consumed: dict[str, int], carried: list[dict[str, Any]], iteration: int, iteration_seed: int,
                    weight_version: int, judges: dict[str, Any] | None = None) -> Rollouts:
    """The iteration's rollouts from the groups `carried` in (OpenGroup.to_json) and new prompts from the
    cursor `consumed`, sampled by the engine's weights `weight_version`; the result's `carried` holds the
    groups still open for the next iteration."""
    from passband.tasks.steps.rl import score_rollouts
    from passband.tasks.steps.rollout import rollout_stats
    from passband.training.chat import render_prompt
    from passband.training.rl.batches.dynamic_sampling import round_seed
    from passband.training.rl.batches.partial import OpenGroup, needed_complete, partial_metrics, split_groups
    from passband.training.rl.batches.prompt_cursor import draw_prompts
    from passband.training.rl.batches.staleness import check_token_staleness
    from passband.training.rl.monitoring.timeline import Span

    config, max_tokens = settings.partial, settings.sampling.max_tokens
    assert config is not None, "collect_partial runs under rollout.partial"
    open_groups = [OpenGroup.from_json(group) for group in carried]
    weights = {task: weight for task, weight in settings.task_weights.items() if task in problems}
    picks, consumed = draw_prompts({task: len(rows) for task, rows in problems.items()}, weights, consumed,
                                   max(settings.prompts_per_step - len(open_groups), 0), settings.seed)
    rows = [problems[task][index] for task, index in picks]
    prompts = [render_prompt(tokenizer, row["prompt"], settings.system_prompt) for row in rows]

    start = time.time()
    need = needed_complete(settings.prompts_per_step, config.min_complete)
    groups = open_groups + _first_round(engine, rows, prompts, settings, round_seed(iteration_seed, 0), weight_version,
                                        iteration)
    groups = _continue(engine, groups, settings, round_seed(iteration_seed, 0), weight_version, range(len(open_groups)))
    rounds = 1
    while _more_rounds(groups, need, max_tokens, config.max_carries):
        groups = _continue(engine, groups, settings, round_seed(iteration_seed, rounds), weight_version,
                           range(len(groups)))
        rounds += 1
    complete, still_open = split_groups(groups, max_tokens)
    for group in complete:
        for sample in group.samples:
            check_token_staleness(iteration, str(group.row["id"]), sample.token_versions or [], config.max_carries)
    for group in still_open:
        group.carries += 1

    scoring_start = time.time()
    rewards, valid, counts, judged, verdicts = score_rollouts([g.row for g in complete], [g.samples for g in complete],
                                                              settings.verifiers, judges or {})
    scored = [ScoredGroup(group.row, group.samples, group_rewards, group_valid, [r.score for r in results],
                          [r.status for r in results], [r.detail for r in results])
              for group, group_rewards, group_valid, results in zip(complete, rewards, valid, verdicts)]
    spans = [Span("rollouts", "rollout", start, scoring_start), Span("rollouts", "scoring", scoring_start, time.time())]
    speed = rollout_stats([g.samples for g in complete], scoring_start - start)["tokens_per_s"]
    batch, shaping = scored_batch(settings, scored)
    metrics = counts | shaping | partial_metrics(complete, still_open, iteration, rounds) | {"rollout_tokens_per_s": speed}
    return Rollouts(scored, batch, consumed, metrics, weight_version, spans, judged,
                    carried=[group.to_json() for group in still_open])


def _first_round(engine: RolloutEngine, rows: list[dict], prompts: list[str], settings: RolloutSettings, seed: int,
                 version: int, iteration: int) -> list[OpenGroup]:
    """The new prompts' groups after their first chunk (G answers each, one engine call)."""
    from passband.training.rl.batches.partial import OpenGroup, first_chunk

    if not rows:
        return []
    config, max_tokens = settings.partial, settings.sampling.max_tokens
    sampling = settings.sampling.model_copy(update={"seed": seed, "max_tokens": min(config.chunk_tokens, max_tokens)})
    chunks = engine.generate(prompts, sampling)
    return [OpenGroup(row, list(group[0].prompt_token_ids), [first_chunk(s, version, max_tokens) for s in group],
                      drawn_at=iteration) for row, group in zip(rows, chunks)]


def _continue(engine: RolloutEngine, groups: list[OpenGroup], settings: RolloutSettings, seed: int, version: int,
              only: range) -> list[OpenGroup]:
    """`groups` with every open answer of the groups in `only` grown by one round: a chunk, or to the end
    for a group carried `max_carries` times, never past max_tokens. One engine call per distinct budget
    (one answer per prompt: the prompt's tokens and the answer's so far, continued exactly), seeded by
    the round's seed and the budget, each answer by its place in the call: a rerun cuts and continues the
    same answers the same way."""
    from passband.training.rl.batches.partial import chunk_budget, extend

    config, max_tokens = settings.partial, settings.sampling.max_tokens
    by_budget: dict[int, list[tuple[int, int]]] = {}
    for g in only:
        for s, sample in enumerate(groups[g].samples):
            if not groups[g].answer_done(sample, max_tokens):
                budget = chunk_budget(sample, max_tokens, config.chunk_tokens, groups[g].carries >= config.max_carries)
                by_budget.setdefault(budget, []).append((g, s))
    for budget, answers in sorted(by_budget.items()):
        sampling = settings.sampling.model_copy(update={"seed": seed + budget, "n": 1, "max_tokens": budget})
        contexts = [groups[g].prompt_ids + groups[g].samples[s].token_ids for g, s in answers]
        for (g, s), (chunk,) in zip(answers, engine.generate(contexts, sampling), strict=True):
            groups[g].samples[s] = extend(groups[g].samples[s], chunk, version, max_tokens)
    return groups


def _more_rounds(groups: list[OpenGroup], need: int, max_tokens: int, max_carries: int) -> bool:
    """Whether to sample another round: too few groups are complete, or a group at its last carry is open."""
    complete = sum(g.complete(max_tokens) for g in groups)
    if complete == len(groups):
        return False
    return complete < need or any(g.carries >= max_carries and not g.complete(max_tokens) for g in groups)
