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

from prefect import flow, get_run_logger

from passband.flows.curate_config import CurateConfig
from passband.tasks.stages.summary import RunSummary

__all__ = ["CurateConfig", "curate"]


@flow(name="curate", flow_run_name="{run_name}")
def curate(config: CurateConfig = CurateConfig(), parent_run_id: str | None = None,
           run_name: str = "curate") -> RunSummary:
    """Pools -> eval_*, rl_*, sft_stage1, sft_stage2 and removed Parquet artifacts + metrics."""
    from passband.curation.bands import BandFilter, DifficultyBands, label_rows, prefilter_by_column
    from passband.curation.curate_rows import attach_pass_rates, count_by, removed_record
    from passband.curation.rl_selection import rl_funnel
    from passband.tasks.artifacts.model import resolve_model
    from passband.tasks.reporting import tracking
    from passband.tasks.sampling.engine import LazyEngine
    from passband.tasks.sampling.keys import checkpoint_id
    from passband.tasks.sampling.passrate import SamplingTally, estimate_pass_rates
    from passband.tasks.stages.stage import stage_run
    from passband.training.model_source import load_tokenizer

    logger = get_run_logger()
    with stage_run("curate", config, parent_run_id, run_name) as run:
        if run.cached is not None:
            logger.info("reusing curate outputs of an identical earlier run (%s)", run.cache_key)
            return run.cached
        run_id, resolved = run.run_id, run.resolved
        start = time.perf_counter()
        removed: list[dict] = []
        metrics: dict[str, float] = {}
        outputs: dict[str, str] = {}

        train, evals = _load_and_hold_out(config)
        pool_sizes = {task_name: len(rows) for task_name, rows in train.items()}
        for task_name, rows in evals.items():
            outputs[f"eval_{task_name}"] = _commit(rows, f"eval_{task_name}", "eval", run_id, resolved)
        eval_rows = [row for rows in evals.values() for row in rows]
        if config.hygiene.against_humaneval:
            from passband.curation.suites.humaneval import load_humaneval

            eval_rows += load_humaneval()
        train = _hygiene(config, train, eval_rows, removed)
        if config.prefilter.column:
            band = BandFilter.parse(config.prefilter.band)
            for task_name, rows in train.items():
                train[task_name], out = prefilter_by_column(rows, config.prefilter.column, band,
                                                            config.prefilter.keep_missing)
                removed.extend(removed_record(row, "prefilter") for row in out)

        # Pass rates of the model to be trained, shard by shard; the engine opens only if needed.
        model_dir = resolve_model(config.model)
        student = checkpoint_id(config.model, model_dir)
        tokenizer = load_tokenizer(model_dir)
        engine = LazyEngine(config.engine, model_dir, config.model, config.sampling)
        sampling = _sampling_key(config, config.pass_rate.n, config.pass_rate.top_k, config.pass_rate.temperature)
        verifiers = config.verifiers()
        bands = DifficultyBands(edges=tuple(config.difficulty_edges), labels=tuple(config.difficulty_labels))
        samples_by_task: dict[str, list[dict]] = {}
        tally = SamplingTally()
        for task_name, rows in train.items():
            logger.info("%s: estimating pass rates of %d problems", task_name, len(rows))
            result = estimate_pass_rates(rows, engine, tokenizer, student, sampling, verifiers,
                                         config.pass_rate.shard_size, config.sft.system_prompt)
            train[task_name] = label_rows(attach_pass_rates(rows, result.summaries, student), bands)
            samples_by_task[task_name] = result.samples
            tally.add(result)
            metrics[f"{task_name}/pass_rate_mean"] = (
                sum(r["pass_rate"] for r in train[task_name]) / max(len(rows), 1))
        _log_pass_rate_plots(config, train, bands, metrics, run_id)

        rl_sets, empty_bands = _rl_sets(config, train, removed)
        for task_name, rows in rl_sets.items():
            outputs[f"rl_{task_name}"] = _commit(rows, f"rl_{task_name}", "training", run_id, resolved)
            metrics[f"kept/rl_{task_name}"] = len(rows)
        rl_empty = _report_rl_funnel(rl_sets, empty_bands, rl_funnel(pool_sizes, removed, rl_sets))

        if config.sft.enabled:
            from passband.flows.curate_sft import build_sft_sets

            stage1, stage2 = build_sft_sets(
                config, train, samples_by_task, engine, model_dir, student, tokenizer, sampling,
                verifiers, bands, eval_rows, removed, metrics, tally)
            outputs["sft_stage1"] = _commit_sft(stage1, "sft_stage1", run_id, resolved)
            outputs["sft_stage2"] = _commit_sft(stage2, "sft_stage2", run_id, resolved)
            metrics["kept/sft_stage1"], metrics["kept/sft_stage2"] = len(stage1), len(stage2)
        engine.close()

        outputs["removed"] = _commit_removed(removed, run_id, resolved)
        for name, count in count_by(removed, "stage", "reason_kind").items():
            metrics[f"removed/{name}"] = count
        metrics["removed/total"] = len(removed)
        metrics.update(engine_calls=tally.engine_calls, shards_reused=tally.shards_reused,
                       shards_computed=tally.shards_computed, wall_seconds=time.perf_counter() - start)
        tracking.log_metrics(metrics, step=0, run_id=run_id)
        logger.info("curate done in %.0f s: %s", metrics["wall_seconds"], sorted(outputs))
        if rl_empty:
            return run.finish(outputs, metrics, status="partial", message=rl_empty)
        return run.finish(outputs, metrics)


def _sampling_key(config: CurateConfig, n: int, top_k: int, temperature: float) -> dict:
    """Everything that changes the samples, for the shard key and the sampler."""
    return {"n": n, "top_k": top_k, "temperature": temperature, "top_p": config.pass_rate.top_p,
            "max_tokens": config.pass_rate.max_tokens, "stop": list(config.pass_rate.stop),
            "seed": config.engine.seed, "engine_kind": config.engine.kind, "engine_dtype": config.engine.dtype}


def _load_and_hold_out(config: CurateConfig) -> tuple[dict, dict]:
    """Per task: the generated/loaded pool split into (train, eval) before any filtering."""
    from passband.curation.holdout import hold_out
    from passband.tasks.steps.data import load_problems_task

    train, evals = {}, {}
    for task_name, pool in config.pools().items():
        rows = load_problems_task(pool.source)
        wrong = [row["id"] for row in rows if row["task"] != task_name]
        if wrong:
            raise ValueError(f"{task_name} pool holds rows of another task, e.g. {wrong[:3]}")
        train[task_name], evals[task_name] = hold_out(rows, pool.eval_size, config.holdout_seed)
        for row in train[task_name]:
            row.setdefault("generator", _generator_name(pool.source))
    return train, evals


def _generator_name(source) -> str:
    if source.path:
        return f"file:{source.path}"
    return f"suite:{source.suite} seed={source.seed} difficulty={source.difficulty}"


def _hygiene(config: CurateConfig, train: dict, eval_rows: list[dict], removed: list[dict]) -> dict:
    """Exact and near duplicates within each pool; n-gram overlap with every eval row (all tasks)."""
    from passband.curation.curate_rows import removed_record
    from passband.curation.hygiene import decontaminate, remove_exact_duplicates, remove_near_duplicates

    cleaned = {}
    for task_name, rows in train.items():
        rows, out = remove_exact_duplicates(rows)
        removed.extend(removed_record(row, "hygiene") for row in out)
        rows, out = remove_near_duplicates(rows, ngram=config.hygiene.near_dup_ngram,
                                           threshold=config.hygiene.near_dup_threshold)
        removed.extend(removed_record(row, "hygiene") for row in out)
        rows, out = decontaminate(rows, eval_rows, ngram=config.hygiene.decontam_ngram,
                                  threshold=config.hygiene.decontam_threshold)
        removed.extend(removed_record(row, "hygiene") for row in out)
        cleaned[task_name] = rows
    return cleaned


def _log_pass_rate_plots(config: CurateConfig, train: dict, bands, metrics: dict, run_id: str) -> None:
    """Histogram counts and band counts as metrics, one histogram PNG per task."""
    from passband.curation.bands import band_counts, pass_rate_histogram
    from passband.tasks.reporting import tracking
    from passband.tasks.reporting.plots import pass_rate_histogram_figure

    rows = [row for task_rows in train.values() for row in task_rows]
    histogram = pass_rate_histogram(rows, bins=config.histogram_bins)
    for task_name, entry in histogram.items():
        for index, count in enumerate(entry["counts"]):
            metrics[f"{task_name}/hist_bin{index:02d}"] = count
        tracking.log_figure(pass_rate_histogram_figure({task_name: entry}),
                            f"plots/pass_rate_{task_name}.png", run_id)
    counts = band_counts(rows)
    for task_name in train:
        for label in bands.labels:
            metrics[f"{task_name}/band/{label}"] = counts.get(task_name, {}).get(label, 0)


def _rl_sets(config: CurateConfig, train: dict, removed: list[dict]) -> tuple[dict[str, list[dict]], list]:
    """The recipe's band per task, then stratified sampling and size alignment across tasks;
    (RL rows per task, the tasks whose band held no problem)."""
    from passband.curation.bands import BandFilter
    from passband.curation.catalog import task
    from passband.curation.curate_rows import removed_record
    from passband.curation.rl_selection import select_rl_sets

    bands = {name: BandFilter.parse(config.tasks[name].band) if config.tasks[name].band else task(name).default_band
             for name in train}
    selection = select_rl_sets(train, bands, config.balance,
                               weights={name: config.tasks[name].weight for name in train},
                               proportions={name: config.tasks[name].proportions for name in train})
    removed.extend(removed_record(row, "band") for row in selection.removed_by_band)
    removed.extend(removed_record(row, "balance") for row in selection.removed_by_balance)
    return selection.sets, selection.empty


def _report_rl_funnel(rl_sets: dict[str, list[dict]], empty_bands: list, funnel: list[dict]) -> str | None:
    """Log and publish which stage removed what per task; warn for each task with an empty band.
    Returns why the run is partial (every RL set is empty), else None."""
    from passband.curation.rl_selection import funnel_markdown
    from passband.tasks.stages.stage import publish_markdown

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


def _commit(rows: list[dict], name: str, context: str, run_id: str, resolved: dict) -> str:
    """Problem rows (JSON-text reference) as a versioned Parquet artifact, logged to MLflow."""
    from passband.curation.suites.rows import rows_to_table
    from passband.tasks.artifacts.datasets import commit_table
    from passband.tasks.reporting import tracking

    table = rows_to_table(rows)
    if not rows and context == "training":  # an empty RL set still has the RL columns
        import pyarrow as pa

        from passband.curation.curate_rows import RL_EXTRA_COLUMNS

        for column, kind in RL_EXTRA_COLUMNS.items():
            table = table.append_column(column, pa.array([], type=getattr(pa, kind)()))
    # the producing run in the manifest: RL names it when this set is empty
    uri = commit_table(table, f"datasets/curate/{run_id}/{name}", "curate", resolved, extra={"mlflow_run_id": run_id})
    tracking.log_dataset(uri, name, context, table, run_id)
    return uri


def _commit_sft(rows: list[dict], name: str, run_id: str, resolved: dict) -> str:
    """SFT rows in the fixed SFT_COLUMNS schema (typed, so an empty set still has its columns)."""
    import json

    import pyarrow as pa

    from passband.curation.curate_rows import SFT_COLUMNS
    from passband.tasks.artifacts.datasets import commit_table
    from passband.tasks.reporting import tracking

    floats = {"pass_rate", "perplexity"}
    ints = {"npass", "num_samples", "sample_index", "num_tokens"}
    columns = {}
    for column in SFT_COLUMNS:
        values = [json.dumps(row[column]) if column == "reference" else row.get(column) for row in rows]
        kind = pa.float64() if column in floats else pa.int64() if column in ints else pa.string()
        columns[column] = pa.array(values, type=kind)
    table = pa.table(columns)
    uri = commit_table(table, f"datasets/curate/{run_id}/{name}", "curate", resolved)
    tracking.log_dataset(uri, name, "training", table, run_id)
    return uri


def _commit_removed(removed: list[dict], run_id: str, resolved: dict) -> str:
    import pyarrow as pa

    from passband.tasks.artifacts.datasets import commit_table
    from passband.tasks.reporting import tracking

    names = ("id", "task", "subdomain", "stage", "removed_reason", "reason_kind", "prompt", "completion", "row_json")
    table = pa.table({name: pa.array([row.get(name) for row in removed], type=pa.string()) for name in names})
    uri = commit_table(table, f"datasets/curate/{run_id}/removed", "curate", resolved)
    tracking.log_dataset(uri, "removed", "removed", table, run_id)
    return uri
