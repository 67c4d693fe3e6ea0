"""The `curate` flow (docs/recipe.md section 2): problem pools -> eval splits, RL sets, SFT stage sets.

Per task: hold out the eval split before any filtering; remove duplicates and eval overlap;
estimate pass rates of the model to be trained (sharded, resumable); label difficulty bands; keep
the recipe's band for RL, stratified over sub-domains and aligned in size across tasks. SFT:
the student's own verified traces on problems it solves sometimes (stage 1; hard ones to
stage 2), plus corrections on problems it never solves and teacher answers to fresh synthetic
queries (stage 2), every trace checked by the four verifications and scored by the student's
perplexity. Every removed row lands in the `removed` artifact with its reason.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from prefect import flow, get_run_logger

from passband.flows.curate.config import CurateConfig
from passband.tasks.stages.summary import RunSummary

if TYPE_CHECKING:
    from passband.flows.curate.sft import Sampler
    from passband.tasks.sampling.passrate_job import ShardSampling

__all__ = ["CurateConfig", "curate"]


@flow(name="curate", flow_run_name="{run_name}")
def curate(config: CurateConfig = CurateConfig(), parent_run_id: str | None = None,
           run_name: str = "curate") -> RunSummary:
    """Pools -> eval_*, rl_*, sft_stage1, sft_stage2 and removed Parquet artifacts + metrics."""
    from passband.curation.bands import pass_rate_metrics, prefilter
    from passband.curation.curate_rows import removed_metrics
    from passband.curation.hygiene import clean_pool
    from passband.curation.rl_selection import rl_funnel
    from passband.flows.curate.sft import build_sft_sets, open_sampler
    from passband.tasks.reporting import tracking
    from passband.tasks.stages.stage import StageRun, run_in_stage

    logger = get_run_logger()

    def work(run: StageRun) -> RunSummary:
        start = time.perf_counter()
        train, evals = _load_and_hold_out(config)
        pool_sizes = {task_name: len(rows) for task_name, rows in train.items()}
        outputs = {f"eval_{name}": _commit_eval(rows, name, run) for name, rows in evals.items()}
        eval_rows = _eval_rows(config, evals)
        train, removed = _filter_pools(train, lambda rows: clean_pool(rows, eval_rows, config.hygiene), "hygiene")
        if config.prefilter.column:
            train, out = _filter_pools(train, lambda rows: prefilter(rows, config.prefilter), "prefilter")
            removed += out

        # Pass rates of the model to be trained, shard by shard; the engine opens only if needed.
        student = open_sampler(config, config.model)
        sampling = config.pass_rate_sampling()
        train, samples_by_task, results = _pass_rates(config, train, student, sampling)
        metrics = pass_rate_metrics(train, config.histogram_bins, config.difficulty_labels)
        _log_pass_rate_plots(config, train, run.run_id)

        rl_sets, out, empty_bands = _rl_sets(config, train)
        removed += out
        outputs |= {f"rl_{name}": _commit(rows, f"rl_{name}", "training", run) for name, rows in rl_sets.items()}
        metrics |= {f"kept/rl_{name}": len(rows) for name, rows in rl_sets.items()}
        rl_empty = _report_rl_funnel(rl_sets, empty_bands, rl_funnel(pool_sizes, removed, rl_sets))

        if config.sft.enabled:
            sft = build_sft_sets(config, train, samples_by_task, student, sampling, eval_rows)
            removed, results = removed + sft.removed, results + sft.results
            outputs |= {name: _commit_sft(rows, name, run) for name, rows in sft.stages().items()}
            metrics |= {**sft.metrics, **{f"kept/{name}": len(rows) for name, rows in sft.stages().items()}}
        student.engine.close()

        outputs["removed"] = _commit_removed(removed, run)
        metrics |= {**removed_metrics(removed), **_sampling_totals(results),
                    "wall_seconds": time.perf_counter() - start}
        tracking.log_metrics(metrics, step=0, run_id=run.run_id)
        logger.info("curate done in %.0f s: %s", metrics["wall_seconds"], sorted(outputs))
        if rl_empty:
            return run.finish(outputs, metrics, status="partial", message=rl_empty)
        return run.finish(outputs, metrics)

    return run_in_stage("curate", config, work, parent_run_id, run_name)


def _load_and_hold_out(config: CurateConfig) -> tuple[dict, dict]:
    """Per task: the generated/loaded pool split into (train, eval) before any filtering."""
    from passband.curation.holdout import generator_name, split_pool
    from passband.tasks.steps.data import load_problems_task

    train, evals = {}, {}
    for task_name, pool in config.pools().items():
        train[task_name], evals[task_name] = split_pool(task_name, load_problems_task(pool.source), pool.eval_size,
                                                        config.holdout_seed, generator_name(pool.source))
    return train, evals


def _eval_rows(config: CurateConfig, evals: dict[str, list[dict]]) -> list[dict]:
    """Every task's eval rows (and HumanEval's prompts when configured): what no training row may overlap."""
    eval_rows = [row for rows in evals.values() for row in rows]
    if config.hygiene.against_humaneval:
        from passband.curation.suites.humaneval import load_humaneval

        eval_rows += load_humaneval()
    return eval_rows


def _filter_pools(train: dict[str, list[dict]], keep: Callable[[list[dict]], tuple[list[dict], list[dict]]],
                  stage: str) -> tuple[dict[str, list[dict]], list[dict]]:
    """`keep` on each task's pool: (kept rows per task, the removed ones as records of `stage`, in order)."""
    from passband.curation.curate_rows import removed_record

    kept, removed = {}, []
    for task_name, rows in train.items():
        kept[task_name], out = keep(rows)
        removed += [removed_record(row, stage) for row in out]
    return kept, removed


def _pass_rates(config: CurateConfig, train: dict[str, list[dict]], student: Sampler,
                sampling: ShardSampling) -> tuple[dict[str, list[dict]], dict[str, list[dict]], list]:
    """(Rows labeled with the student's pass rates and bands, their samples) per task, and the
    estimates' results (for the run's sampling totals)."""
    from passband.curation.bands import label_rows
    from passband.curation.curate_rows import attach_pass_rates
    from passband.tasks.sampling.passrate import estimate_pass_rates

    logger = get_run_logger()
    verifiers, bands = config.verifiers(), config.difficulty_bands()
    labeled, samples_by_task, results = {}, {}, []
    for task_name, rows in train.items():
        logger.info("%s: estimating pass rates of %d problems", task_name, len(rows))
        result = estimate_pass_rates(rows, student.engine, student.tokenizer, student.checkpoint,
                                     sampling.for_task(task_name), verifiers, config.pass_rate.shard_size,
                                     config.sft.system_prompt)
        labeled[task_name] = label_rows(attach_pass_rates(rows, result.summaries, student.checkpoint), bands)
        samples_by_task[task_name] = result.samples
        results.append(result)
    return labeled, samples_by_task, results


def _sampling_totals(results: list) -> dict[str, int]:
    """Engine calls and shards reused / computed over every estimate of the run."""
    from passband.tasks.sampling.passrate import SamplingTally

    tally = SamplingTally()
    for result in results:
        tally.add(result)
    return {"engine_calls": tally.engine_calls, "shards_reused": tally.shards_reused,
            "shards_computed": tally.shards_computed}


def _log_pass_rate_plots(config: CurateConfig, train: dict, run_id: str) -> None:
    """One pass-rate histogram PNG per task."""
    from passband.curation.bands import pass_rate_histogram
    from passband.tasks.reporting import tracking
    from passband.tasks.reporting.plots import pass_rate_histogram_figure

    rows = [row for task_rows in train.values() for row in task_rows]
    for task_name, entry in pass_rate_histogram(rows, bins=config.histogram_bins).items():
        tracking.log_figure(pass_rate_histogram_figure({task_name: entry}), f"plots/pass_rate_{task_name}.png", run_id)


def _rl_sets(config: CurateConfig, train: dict) -> tuple[dict[str, list[dict]], list[dict], list]:
    """The recipe's band per task, then stratified sampling and size alignment across tasks;
    (RL rows per task, the removed records, the tasks whose band held no problem)."""
    from passband.curation.curate_rows import removed_record
    from passband.curation.rl_selection import rl_bands, select_rl_sets

    tasks = {name: config.tasks[name] for name in train}
    selection = select_rl_sets(train, rl_bands({name: pool.band for name, pool in tasks.items()}), config.balance,
                               weights={name: pool.weight for name, pool in tasks.items()},
                               proportions={name: pool.proportions for name, pool in tasks.items()})
    removed = [removed_record(row, "band") for row in selection.removed_by_band]
    removed += [removed_record(row, "balance") for row in selection.removed_by_balance]
    return selection.sets, removed, selection.empty


def _report_rl_funnel(rl_sets: dict[str, list[dict]], empty_bands: list, funnel: list[dict]) -> str | None:
    """Log and publish which stage removed what per task; warn for each task with an empty band.
    Returns why the run is partial (every RL set is empty), else None."""
    from passband.curation.rl_selection import funnel_markdown
    from passband.tasks.reporting.prefect_artifacts import publish_markdown

    logger = get_run_logger()
    table = funnel_markdown(funnel)
    publish_markdown("# RL sets: problems removed per stage\n\n" + table,
                     "curate: problems per task kept for RL and removed by hygiene, prefilter, band and balance")
    for empty in empty_bands:
        logger.warning("%s; its RL set is empty and the other tasks are aligned without it", empty.describe())
    if rl_sets and not any(rl_sets.values()):
        message = ("every RL set is empty (" + ", ".join(f"rl_{name}" for name in rl_sets) + "): no problem lies in "
                   "its task's band; widen the bands, add problems or pass-rate samples (see the table above)")
        logger.warning("%s\n%s", message, table)
        return message
    logger.info("RL sets, problems removed per stage:\n%s", table)
    return None


def _commit(rows: list[dict], name: str, context: str, run: Any, key: str | None = None) -> str:
    """Problem rows as a versioned Parquet artifact (an RL set typed even when empty), logged to
    MLflow; at `key` (default: under this run's folder)."""
    from passband.curation.curate_rows import problems_table
    from passband.tasks.reporting import tracking
    from passband.tasks.artifacts.datasets import commit_table

    table = problems_table(rows, rl_columns=context == "training")
    # the producing run in the manifest: RL names it when this set is empty
    uri = commit_table(table, key or f"datasets/curate/{run.run_id}/{name}", "curate", run.resolved,
                       extra={"mlflow_run_id": run.run_id})
    tracking.log_dataset(uri, name, context, table, run.run_id)
    return uri


def _commit_eval(rows: list[dict], task_name: str, run: Any) -> str:
    """A held-out split at a path named by its rows' content: curate runs that hold out the same rows
    (another training seed, another pass-rate sampling) give the same URI, so what is keyed by it is
    reused, the base model's evaluation above all (a new URI would sample the base again: 19 min of
    the demo on a 2-core box)."""
    import hashlib
    import json

    name = f"eval_{task_name}"
    # default=str: a loaded dataset's rows may carry values JSON lacks (dates); their text is stable
    content = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()
    return _commit(rows, name, "eval", run, key=f"datasets/eval-splits/{content[:24]}/{name}")


def _commit_sft(rows: list[dict], name: str, run: Any) -> str:
    """SFT rows in their fixed schema as a versioned Parquet artifact, logged to MLflow."""
    from passband.curation.curate_rows import sft_table
    from passband.tasks.reporting import tracking
    from passband.tasks.artifacts.datasets import commit_table

    table = sft_table(rows)
    uri = commit_table(table, f"datasets/curate/{run.run_id}/{name}", "curate", run.resolved)
    tracking.log_dataset(uri, name, "training", table, run.run_id)
    return uri


def _commit_removed(removed: list[dict], run: Any) -> str:
    from passband.curation.curate_rows import removed_table
    from passband.tasks.reporting import tracking
    from passband.tasks.artifacts.datasets import commit_table

    table = removed_table(removed)
    uri = commit_table(table, f"datasets/curate/{run.run_id}/removed", "curate", run.resolved)
    tracking.log_dataset(uri, "removed", "removed", table, run.run_id)
    return uri
