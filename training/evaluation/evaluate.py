"""One evaluation routine: a live engine on named held-out sets -> an `Evaluation` (docs/recipe.md section 8).

The evaluate flow, SFT (before/after) and RL (before, every `eval_every`, after) all call
`evaluate`; they differ only in which engine they pass (RL passes its own live engine, already
at the current weights) and where they log. Eval sets are named lists of suite rows; the report
groups by eval-set name, so `humaneval` and a procedural `code` set, both verified by the code
verifier, get their own `humaneval/pass@1` and `code/pass@1`.

Per-sample rows: {eval_set, problem_id, task (the row's own task: picks the verifier),
subdomain, sample_index, status, score, detail, text, finish_reason, num_tokens, token_ids,
prompt_token_ids}; with a judge (training/judge/), every row also holds the judge's texts and
scores (`judge_analyses`, `judge_scores`, `judge_reviews`, `judge_review_grades`; empty lists on
rows of programmatically verified tasks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from passband.curation.catalog import VerifierSettings
from passband.training.chat import render_prompt
from passband.training.engines import RolloutEngine, SamplingConfig
from passband.training.episodes.groups import EpisodeSetup, episode_rows
from passband.training.evaluation.report import EvalReport, build_report
from passband.training.judge.judge import Judge
from passband.training.judge.score import judgement_columns, score_groups


@dataclass
class Evaluation:
    """The report of one evaluation and the per-sample rows it was built from."""

    report: EvalReport
    """pass@k (with intervals) per eval set and sub-domain."""
    rows: list[dict[str, Any]]
    """One row per sample (see the module docstring)."""
    set_names: list[str]
    """The eval sets, in the order they were given."""

    @property
    def n(self) -> int:
        """Samples per problem."""
        return len(next(iter(self.report.curves().values())))

    def headline(self) -> dict[str, float]:
        """`<set>/pass@k` for every eval set and k = 1..n, and `mean/pass@k`, their unweighted
        mean over the sets (what RL's `best_metric` and the pipeline's table read)."""
        curves = self.report.curves()
        out = {f"{name}/pass@{k}": curves[name][k - 1] for name in self.set_names for k in range(1, self.n + 1)}
        for k in range(1, self.n + 1):
            out[f"mean/pass@{k}"] = sum(curves[name][k - 1] for name in self.set_names) / len(self.set_names)
        return out


def evaluation_of(rows: list[dict[str, Any]]) -> Evaluation:
    """An Evaluation of stored per-sample rows (e.g. an earlier evaluation's samples)."""
    names = list(dict.fromkeys(row["eval_set"] for row in rows))
    return Evaluation(build_report([{**row, "task": row["eval_set"]} for row in rows]), rows, names)


def problem_key(set_name: str, row: dict[str, Any]) -> str:
    """What seeds a problem's samples in an evaluation: its set and id."""
    return f"{set_name}/{row['id']}"


def evaluate(
    engine: RolloutEngine,
    sets: dict[str, list[dict[str, Any]]],
    sampling: SamplingConfig,
    verifiers: VerifierSettings,
    tokenizer: Any,
    system_prompt: str | None = None,
    judges: dict[str, Judge] | None = None,
    episodes: dict[str, EpisodeSetup] | None = None,
) -> Evaluation:
    """Sample `sampling.n` completions per problem of every set with `engine`, verify each with
    its problem's task verifier, and report pass@1..pass@n per set and sub-domain.

    Prompts are rendered with `tokenizer`'s chat template, as in rollouts. One generate call
    covers every set (the engine batches across sets) and one grouped verification every sample.
    Each problem is seeded by its key `<set>/<problem id>` (with `sampling.seed`), not by its
    position: a problem gets the same samples in a larger or smaller set, in a shard of the sets
    on a task worker, and in a k-curve subset (with vLLM, whose sample j is seeded seed + j for any
    n, the subset's first n samples are the evaluation's n; the evaluate flow takes them from it).
    `judges` (task -> Judge) score those tasks' samples by a model instead of their verifier.
    `episodes` (task -> EpisodeSetup): those tasks' problems run as multi-turn episodes, each sample an
    episode whose last turn is verified (pass@k over episodes), its rows holding `num_turns` and
    `num_tool_calls` (`episode_means`); the other tasks' problems stay single-turn.
    """
    if not sets or any(not rows for rows in sets.values()):
        raise ValueError(f"evaluate needs non-empty eval sets, got sizes { {name: len(rows) for name, rows in sets.items()} }")
    problems = [(name, row) for name, rows in sets.items() for row in rows]
    episodes = episodes or {}
    single = [i for i, (_, row) in enumerate(problems) if row["task"] not in episodes]
    prompts = [render_prompt(tokenizer, problems[i][1]["prompt"], system_prompt) for i in single]
    keys = [problem_key(*problems[i]) for i in single]
    by_index = dict(zip(single, engine.generate(prompts, sampling, prompt_keys=keys) if single else []))
    episodic = episode_rows(engine, tokenizer, [row for _, row in problems], episodes, sampling)
    by_index |= {i: group for i, (group, _) in episodic.items()}
    counts = {(i, j): (result.num_turns, result.num_tool_calls)  # (problem, sample) -> (turns, tool calls)
              for i, (_, results) in episodic.items() for j, result in enumerate(results)}
    samples = [by_index[i] for i in range(len(problems))]
    verdicts, judgements = score_groups(
        [row["task"] for _, row in problems], [row["prompt"] for _, row in problems],
        [row["reference"] for _, row in problems], [[sample.text for sample in group] for group in samples],
        verifiers, judges or {})
    rows = [
        {"eval_set": name, "problem_id": row["id"], "task": row["task"], "subdomain": row["subdomain"],
         "sample_index": sample.sample_index, "status": verdict.status, "score": verdict.score,
         "detail": verdict.detail, "text": sample.text, "finish_reason": sample.finish_reason,
         "num_tokens": len(sample.token_ids), "token_ids": list(sample.token_ids),
         "prompt_token_ids": list(sample.prompt_token_ids)}
        | (judgement_columns(judgements.get((i, j))) if judges else {})
        | ({"num_turns": counts[i, j][0], "num_tool_calls": counts[i, j][1]} if (i, j) in counts else {})
        for i, ((name, row), group, results) in enumerate(zip(problems, samples, verdicts, strict=True))
        for j, (sample, verdict) in enumerate(zip(group, results, strict=True))
    ]
    return evaluation_of(rows)


def episode_means(rows: list[dict[str, Any]]) -> dict[str, float]:
    """`<eval set>/mean_turns` and `<eval set>/mean_tool_calls` over the samples of each set evaluated as
    episodes (none for single-turn sets)."""
    by_set: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if "num_turns" in row:
            by_set.setdefault(row["eval_set"], []).append(row)
    return {f"{name}/mean_{field}": sum(r[f"num_{field}"] for r in kept) / len(kept)
            for name, kept in by_set.items() for field in ("turns", "tool_calls")}
