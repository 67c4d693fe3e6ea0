"""Scoring rows of mixed tasks where some tasks are judged by a model: the judged tasks' samples go
to their Judge, a reward model's to the model, every other task's to its program or the user's
reward (curation/catalog/verify.py verify_groups: a function, a reward server or an entry-point
task under the verifier contract), in one place for RL's rollouts and evaluation's samples.

With no judge and no user task the call is verify_groups itself, unchanged.
"""

from __future__ import annotations

from typing import Any

from passband.curation.catalog import TASKS, VerifierSettings
from passband.curation.catalog.reward_model import RewardModelConfig
from passband.curation.catalog.verify import verify_groups
from passband.curation.verifiers.result import VerifyResult
from passband.training.judge.judge import Judge, Judgement


def score_groups(
    tasks_of_rows: list[str], prompts: list[Any], references: list[Any], completions: list[list[str]],
    verifiers: VerifierSettings, judges: dict[str, Judge],
) -> tuple[list[list[VerifyResult]], dict[tuple[int, int], Judgement]]:
    """(results[i][j] for completion j of row i, the Judgement of every judged (i, j)).

    prompts[i] is row i's prompt as the task wrote it (the judge's and the reward model's "problem");
    a row whose task has a judge is scored by it, one whose task `verifiers.rewards` names by that
    reward (a function, a server, a reward model; for a built-in task too), the others by their
    task's verifier with `verifiers` (ours, or the user's entry-point or import-path task)."""
    if not judges and not verifiers.rewards and all(name in TASKS for name in tasks_of_rows):
        return verify_groups(tasks_of_rows, references, completions, verifiers), {}
    if not len(tasks_of_rows) == len(prompts) == len(references) == len(completions):
        raise ValueError(f"{len(tasks_of_rows)} task names, {len(prompts)} prompts, {len(references)} references and "
                         f"{len(completions)} completion groups; need one of each per row")
    results: list[list[VerifyResult | None]] = [[None] * len(group) for group in completions]
    modelled = {name: spec for name, spec in verifiers.rewards.items()
                if isinstance(spec, RewardModelConfig) and name not in judges}
    # by program: ours, the user's entry-point task, or the reward `rewards` names for it (a built-in
    # task's verifier replaced too), verify_groups routing each; a reward model combined with the
    # task's verifier (sum, gate) needs that verifier's verdict first
    own = verifiers.model_copy(update={"rewards": {n: s for n, s in verifiers.rewards.items() if n not in modelled}})
    rows = [i for i, name in enumerate(tasks_of_rows)
            if name not in judges and (name not in modelled or modelled[name].combine != "replace")]
    verified = verify_groups([tasks_of_rows[i] for i in rows], [references[i] for i in rows],
                             [completions[i] for i in rows], own)
    for i, group in zip(rows, verified, strict=True):
        results[i] = list(group)
    for name, spec in modelled.items():
        score_by_model(name, spec, tasks_of_rows, prompts, completions, results)
    judgements: dict[tuple[int, int], Judgement] = {}
    for name, judge in judges.items():
        pairs = [(i, j) for i, row_task in enumerate(tasks_of_rows) if row_task == name for j in range(len(completions[i]))]
        graded = judge.grade([prompts[i] for i, _ in pairs], [completions[i][j] for i, j in pairs])
        for (i, j), judgement in zip(pairs, graded, strict=True):
            results[i][j] = judgement.result
            judgements[(i, j)] = judgement
    return results, judgements  # type: ignore[return-value]  # every slot was filled above


def score_by_model(name: str, config: RewardModelConfig, tasks_of_rows: list[str], prompts: list[Any],
                   completions: list[list[str]], results: list[list[VerifyResult | None]]) -> None:
    """Set results[i][j] of every completion of the rows of task `name` to the reward model's verdict,
    or combine it with the verifier's verdict already there (`config.combine`: sum, gate)."""
    from passband.curation.catalog.reward_model import with_model_reward
    from passband.training.judge.reward_model import score_with_model  # torch and transformers

    pairs = [(i, j) for i, row_task in enumerate(tasks_of_rows) if row_task == name for j in range(len(completions[i]))]
    scored = score_with_model(config, [prompts[i] for i, _ in pairs], [completions[i][j] for i, j in pairs])
    for (i, j), result in zip(pairs, scored, strict=True):
        verdict = results[i][j]
        results[i][j] = result if verdict is None else with_model_reward(config, verdict, result.score)


def judgement_columns(judgement: Judgement | None) -> dict[str, Any]:
    """The judge's texts and scores as columns of a sample row (empty for a programmatic one), so
    they are stored beside the rollout they judged."""
    if judgement is None:
        return {"judge_analyses": [], "judge_scores": [], "judge_reviews": [], "judge_review_grades": []}
    return {"judge_analyses": judgement.analyses, "judge_scores": judgement.scores,
            "judge_reviews": judgement.reviews, "judge_review_grades": judgement.review_grades}
