"""Evaluate one checkpoint on held-out sets: sample n completions per problem, verify, report pass@k.

Shared by the `evaluate` flow and by SFT and RL, which evaluate their checkpoints with it (RL
passes its own live engine, already at the current weights). Eval sets are named lists of suite
rows; the report groups by eval-set name, so `humaneval` and a procedural `code` set, both
verified by the code verifier, get their own `humaneval/pass@1` and `code/pass@1`.

Per-sample rows: {eval_set, problem_id, task (the row's own task: picks the verifier),
subdomain, sample_index, status, score, detail, text, finish_reason, num_tokens, token_ids,
prompt_token_ids}.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.training.engines.protocol import RolloutEngine, Sample, SamplingSettings
from passband.training.evaluation.report import EvalReport, build_report


def verifier_settings_for(math_answer_format: str) -> dict[str, dict[str, Any]]:
    """Keyword arguments of `curation.verifiers.verify` per task: the math extraction rule that
    matches what the prompts asked for ("plain" -> last number, "boxed" -> last \\boxed{})."""
    from passband.curation.suites.math_suite import extraction_rule_for

    return {"math": {"rule": extraction_rule_for(math_answer_format)}, "code": {}, "ifeval": {}}


def eval_sets_from(
    datasets: dict[str, str], suites: dict[str, dict[str, Any]], max_problems: int | None = None,
    run_id: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Named eval sets from dataset artifact URIs (Parquet in the suite row schema, e.g. curate's
    `eval_math`) and from ProblemSource dicts (a procedural suite, `humaneval`, or a user file).

    `max_problems` keeps the first N rows of each dataset (suites size themselves by
    `num_problems`). A name used by both a dataset and a suite is refused.
    """
    from passband.curation.suites.rows import table_to_rows
    from passband.tasks.data import load_problems_task
    from passband.tasks.datasets import read_table

    clashes = sorted(datasets.keys() & suites.keys())
    if clashes:
        raise ValueError(f"eval set name(s) {clashes} are used by both a dataset and a suite; rename one")
    if not datasets and not suites:
        raise ValueError("no eval sets: give at least one dataset URI or suite")
    sets: dict[str, list[dict[str, Any]]] = {}
    for name, uri in datasets.items():
        rows = table_to_rows(read_table(uri))
        if not rows:
            raise ValueError(f"eval set {name!r}: dataset {uri} has no rows")
        sets[name] = rows[:max_problems] if max_problems is not None else rows
    for name, source in suites.items():
        sets[name] = load_problems_task(source, run_id)
    return sets


@task(name="verify-samples", cache_policy=NONE)
def verify_samples(
    eval_set: str, rows: list[dict[str, Any]], samples: list[list[Sample]],
    verifier_settings: dict[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """Per-sample rows of one eval set: every sample verified by its problem's task verifier."""
    from passband.curation.verifiers import verify

    flat = [(row, sample) for row, group in zip(rows, samples, strict=True) for sample in group]
    records: list[dict[str, Any]] = []
    for task_name in sorted({row["task"] for row, _ in flat}):
        if task_name not in verifier_settings:
            raise ValueError(f"eval set {eval_set!r}: no verifier settings for task {task_name!r} "
                             f"(have {sorted(verifier_settings)})")
        pairs = [(row, sample) for row, sample in flat if row["task"] == task_name]
        results = verify(task_name, [s.text for _, s in pairs], [r["reference"] for r, _ in pairs],
                         **verifier_settings[task_name])
        for (row, sample), result in zip(pairs, results, strict=True):
            records.append({
                "eval_set": eval_set, "problem_id": row["id"], "task": row["task"],
                "subdomain": row["subdomain"], "sample_index": sample.sample_index,
                "status": result.status, "score": result.score, "detail": result.detail,
                "text": sample.text, "finish_reason": sample.finish_reason,
                "num_tokens": len(sample.token_ids), "token_ids": list(sample.token_ids),
                "prompt_token_ids": list(sample.prompt_token_ids),
            })
    return records


def earlier_model_rows(samples_uri: str, eval_sets: dict[str, list[dict[str, Any]]], n: int) -> list[dict[str, Any]]:
    """The evaluated model's per-sample rows from an earlier evaluation's `samples` artifact,
    checked to hold exactly n samples of every problem in `eval_sets` and nothing else."""
    from collections import Counter

    from passband.tasks.datasets import read_table

    rows = [{k: v for k, v in row.items() if k != "checkpoint"}
            for row in read_table(samples_uri).to_pylist() if row["checkpoint"] == "model"]
    have = Counter((row["eval_set"], row["problem_id"]) for row in rows)
    want = {(name, problem["id"]): n for name, problems in eval_sets.items() for problem in problems}
    if have != want:
        missing = sorted(want.keys() - have.keys())[:3]
        extra = sorted(have.keys() - want.keys())[:3]
        miscounted = sorted(key for key in want.keys() & have.keys() if have[key] != n)[:3]
        raise ValueError(f"baseline_samples {samples_uri} do not match these eval sets with n={n}: "
                         f"missing {missing}, extra {extra}, sample count differs for {miscounted} "
                         "(first 3 of each); evaluate the baseline again instead")
    return rows


def report_of(sample_rows: list[dict[str, Any]]) -> EvalReport:
    """The EvalReport of per-sample rows, grouped by eval set (the report's "task")."""
    return build_report([{**row, "task": row["eval_set"]} for row in sample_rows])


def evaluate_checkpoint(
    model_dir: str,
    eval_sets: dict[str, list[dict[str, Any]]],
    sampling: SamplingSettings,
    engine_kind: str,
    engine_cfg: dict[str, Any],
    verifier_settings: dict[str, dict[str, Any]],
    engine: RolloutEngine | None = None,
    system_prompt: str | None = None,
) -> tuple[EvalReport, list[dict[str, Any]]]:
    """(report, per-sample rows) of the checkpoint in `model_dir` on `eval_sets` (name -> rows).

    `sampling.n` samples per problem give pass@1..pass@n. With `engine` given (a live engine at
    this checkpoint's weights) it is used and left open; otherwise one of `engine_kind` is opened
    from `model_dir` with `engine_cfg` (an EngineConfig dump) and closed before returning.
    Prompts are rendered with `model_dir`'s chat template, as in rollouts.
    """
    from passband.tasks.rollout import generate, open_engine
    from passband.training.chat import render_prompt
    from passband.training.model_source import load_tokenizer

    if not eval_sets or any(not rows for rows in eval_sets.values()):
        raise ValueError(f"evaluate_checkpoint needs non-empty eval sets, got sizes "
                         f"{ {name: len(rows) for name, rows in eval_sets.items()} }")
    tokenizer = load_tokenizer(Path(model_dir))
    names = list(eval_sets)
    all_rows = [row for name in names for row in eval_sets[name]]
    prompts = [render_prompt(tokenizer, row["prompt"], system_prompt) for row in all_rows]
    own_engine = engine is None
    if own_engine:
        engine = open_engine(engine_kind, model_dir, engine_cfg)
    # One generate call for every set: the engine batches across sets.
    samples, _seconds = generate(engine, prompts, sampling)
    if own_engine:
        engine.close()
    sample_rows: list[dict[str, Any]] = []
    start = 0
    for name in names:
        stop = start + len(eval_sets[name])
        sample_rows += verify_samples(name, eval_sets[name], samples[start:stop], verifier_settings)
        start = stop
    return report_of(sample_rows), sample_rows


@task(name="perplexities-on-samples", cache_policy=NONE)
def perplexities_on_samples(
    model_dir: str, sample_sets: dict[str, list[dict[str, Any]]], micro_batch_size: int = 8,
) -> dict[str, float]:
    """{name: perplexity (temperature 1) of the model in `model_dir` on that set's response tokens
    given their prompts}, loading the model once. The base model on a candidate's outputs, next to
    the base on its own outputs, shows whether the candidate left the base distribution (RECIPE 8)."""
    from passband.training.evaluation.perplexity import perplexity_under
    from passband.training.model_source import load_causal_lm

    model = load_causal_lm(Path(model_dir))
    return {
        name: perplexity_under(model, [row["prompt_token_ids"] for row in rows],
                               [row["token_ids"] for row in rows], micro_batch_size=micro_batch_size)
        for name, rows in sample_sets.items()
    }
