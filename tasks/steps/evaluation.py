"""Evaluation I/O: eval sets in, the one `evaluate()` as a Prefect task, results logged.

The computation is training/evaluation/evaluate.py `evaluate(engine, sets, sampling, verifiers,
tokenizer)`; the evaluate flow, SFT and RL all call it through `run_evaluation` here, which
also logs its metrics (under a prefix, at a step) and its per-sample rows to MLflow.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.curation.catalog import VerifierSettings
from passband.curation.suites.source import ProblemSource
from passband.training.engines import RolloutEngine, SamplingConfig
from passband.training.evaluation.evaluate import Evaluation, episode_means, evaluate


def eval_sets_from(
    datasets: dict[str, str], suites: dict[str, ProblemSource], max_problems: int | None = None,
    run_id: str | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Named eval sets from dataset artifact URIs (Parquet in the suite row schema, e.g. curate's
    `eval_math`) and from problem sources (a procedural suite, `humaneval`, or a user file).

    `max_problems` keeps the first N rows of each dataset (suites size themselves by
    `num_problems`). A name used by both a dataset and a suite is refused.
    """
    clashes = sorted(datasets.keys() & suites.keys())
    if clashes:
        raise ValueError(f"eval set name(s) {clashes} are used by both a dataset and a suite; rename one")
    if not datasets and not suites:
        raise ValueError("no eval sets: give at least one dataset URI or suite")
    sets: dict[str, list[dict[str, Any]]] = {}
    for name, uri in datasets.items():
        rows = problem_rows(uri)
        if not rows:
            raise ValueError(f"eval set {name!r}: dataset {uri} has no rows")
        sets[name] = rows[:max_problems] if max_problems is not None else rows
    for name, source in suites.items():
        sets[name] = problem_rows(source, run_id)
    return sets


def problem_rows(ref: str | ProblemSource, run_id: str | None = None) -> list[dict[str, Any]]:
    """The problem rows of a dataset artifact URI (Parquet in the suite row schema) or of a problem
    source; possibly none (the caller decides what an empty set means)."""
    from passband.curation.suites.rows import table_to_rows
    from passband.tasks.steps.data import load_problems_task
    from passband.tasks.artifacts.datasets import read_table

    if isinstance(ref, str):
        return table_to_rows(read_table(ref))
    return load_problems_task(ref, run_id)


def earlier_model_rows(samples_uri: str, eval_sets: dict[str, list[dict[str, Any]]], n: int,
                       label: str = "model") -> list[dict[str, Any]]:
    """The evaluated model's per-sample rows (those of checkpoint `label`: `k_curve/model` for its
    k-curve subset) from an earlier evaluation's `samples` artifact, checked to hold exactly n
    samples of every problem in `eval_sets` and nothing else."""
    from collections import Counter

    from passband.tasks.artifacts.datasets import read_table

    rows = [{k: v for k, v in row.items() if k != "checkpoint"}
            for row in read_table(samples_uri).to_pylist() if row["checkpoint"] == label]
    have = Counter((row["eval_set"], row["problem_id"]) for row in rows)
    want = {(name, problem["id"]): n for name, problems in eval_sets.items() for problem in problems}
    if have != want:
        missing = sorted(want.keys() - have.keys())[:3]
        extra = sorted(have.keys() - want.keys())[:3]
        miscounted = sorted(key for key in want.keys() & have.keys() if have[key] != n)[:3]
        raise ValueError(f"baseline_samples {samples_uri} ({label!r} rows) do not match these eval sets with n={n}: "
                         f"missing {missing}, extra {extra}, sample count differs for {miscounted} "
                         "(first 3 of each); evaluate the baseline again instead")
    return rows


@task(name="evaluate", cache_policy=NONE)
def run_evaluation(
    engine: RolloutEngine, sets: dict[str, list[dict[str, Any]]], sampling: SamplingConfig,
    verifiers: VerifierSettings, model_dir: str, system_prompt: str | None = None,
    judges: dict[str, Any] | None = None, episodes: dict[str, Any] | None = None, trust_remote_code: bool = False,
) -> Evaluation:
    """`evaluate` the engine's CURRENT weights on `sets`; `model_dir` supplies the chat template;
    `judges` (task -> training.judge Judge) score those tasks' samples; `episodes` (task -> how its
    episodes open, their budget) evaluates those tasks as multi-turn episodes; `trust_remote_code`: the
    model's own code allowed (EngineConfig.trust_remote_code), for a tokenizer of its own."""
    from passband.training.model_source import load_tokenizer

    return evaluate(engine, sets, sampling, verifiers, load_tokenizer(Path(model_dir), trust_remote_code), system_prompt,
                    judges,
                    episodes)


EVAL_PREFIX = "eval"
"""The MLflow prefix of every held-out evaluation series in SFT and RL (`eval/math/pass@1`,
`eval/mean/pass@1`, `eval/math/arithmetic/pass@1`, ...), stepped by the training step it scored.
Their summaries name the first and the last evaluation `before/...` and `after/...`."""


def log_evaluation(evaluation: Evaluation, label: str, step: int, run_id: str) -> dict[str, float]:
    """Log every report metric and the headline (`mean/pass@k` too) as `eval/<name>` at `step`, and
    the per-sample rows as the MLflow artifact `eval/<label>.jsonl` (`before`, `after`,
    `iter-000004`, ...); return the headline, unprefixed."""
    from passband.tasks.reporting import tracking

    headline = evaluation.headline()
    logged = evaluation.report.metrics() | headline | episode_means(evaluation.rows)  # mean turns, tool calls
    tracking.log_metrics({f"{EVAL_PREFIX}/{name}": value for name, value in logged.items()}, step=step, run_id=run_id)
    with tempfile.TemporaryDirectory(prefix="passband-eval-") as tmp:
        path = Path(tmp) / f"{label.replace('/', '_')}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in evaluation.rows))
        tracking.log_artifact_file(path, EVAL_PREFIX, run_id)
    return headline


@task(name="perplexities-on-samples", cache_policy=NONE)
def perplexities_on_samples(
    model_dir: str, sample_sets: dict[str, list[dict[str, Any]]], micro_batch_size: int = 8,
    trust_remote_code: bool = False,
) -> dict[str, float]:
    """{name: perplexity (temperature 1) of the model in `model_dir` on that set's response tokens
    given their prompts}, loading the model once. The base model on a candidate's outputs, next to
    the base on its own outputs, shows whether the candidate left the base distribution (docs/recipe.md section 8).
    `trust_remote_code`: the model's own code allowed (EngineConfig.trust_remote_code)."""
    from passband.training.evaluation.perplexity import perplexity_under
    from passband.training.model_source import load_causal_lm

    model = load_causal_lm(Path(model_dir), trust_remote_code=trust_remote_code)
    return {
        name: perplexity_under(model, [row["prompt_token_ids"] for row in rows],
                               [row["token_ids"] for row in rows], micro_batch_size=micro_batch_size)
        for name, rows in sample_sets.items()
    }


def commit_evaluation(evaluations: dict[str, Evaluation], eval_sets: dict[str, list[dict]], datasets: dict[str, str],
                      resolved: dict, run_id: str) -> dict[str, str]:
    """Report table (Parquet artifact, CSV in MLflow, a table in the Prefect UI), samples (Parquet),
    pass@k plot with interval bands (PNG; the `k_curve/...` evaluations in a second one,
    `plots/k_curve.png`); returns the `report` and `samples` URIs."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    from passband.curation.suites.rows import rows_to_table
    from passband.tasks.reporting import tracking
    from passband.tasks.artifacts.datasets import commit_table
    from passband.tasks.reporting.plots import pass_at_k_figure
    from passband.tasks.reporting.prefect_artifacts import publish_table
    from passband.training.evaluation.report import pass_at_k_curves, pass_at_k_intervals_by_task

    reports = {label: evaluation.report for label, evaluation in evaluations.items()}
    report_table = pa.Table.from_pylist(
        [{"checkpoint": label, **row} for label, report in reports.items() for row in report.table()])
    samples = [{"checkpoint": label, **row} for label, evaluation in evaluations.items() for row in evaluation.rows]
    # every row's columns (from_pylist would keep the first row's only): episode rows carry their
    # turns and tool calls, single-turn rows of other sets get nulls there
    columns = list(dict.fromkeys(key for row in samples for key in row))
    samples_table = pa.Table.from_pylist([{key: row.get(key) for key in columns} for row in samples])
    report_uri = commit_table(report_table, f"evaluations/{run_id}/report", "evaluate", resolved)
    samples_uri = commit_table(samples_table, f"evaluations/{run_id}/samples", "evaluate", resolved)
    with tempfile.TemporaryDirectory(prefix="passband-eval-") as tmp:
        csv_path = Path(tmp) / "eval_report.csv"
        pa_csv.write_csv(report_table, csv_path)
        tracking.log_artifact_file(csv_path, "tables", run_id)
    for name, uri in datasets.items():
        tracking.log_dataset(uri, name, "eval", rows_to_table(eval_sets[name]), run_id)
    tracking.log_dataset(samples_uri, "eval_samples", "output", samples_table, run_id)
    publish_table([{k: v for k, v in row.items() if not isinstance(v, list)} for row in report_table.to_pylist()],
                  description="pass@k per checkpoint, eval set and sub-domain, with 95% intervals")
    # the k-curve subset (labels `k_curve/...`, many samples on few problems) gets its own figure
    main = {label: report for label, report in reports.items() if not label.startswith("k_curve/")}
    k_curve = {label.removeprefix("k_curve/"): report for label, report in reports.items()
               if label.startswith("k_curve/")}
    for figure_reports, path in ((main, "plots/pass_at_k.png"), (k_curve, "plots/k_curve.png")):
        if figure_reports:
            tracking.log_figure(pass_at_k_figure(pass_at_k_curves(figure_reports),
                                                 pass_at_k_intervals_by_task(figure_reports)), path, run_id)
    return {"report": report_uri, "samples": samples_uri}
