"""The SFT half of the curate flow: verified traces from rollouts, corrections and synthetic queries.

- rollout traces: the recipe's rule (0 < npass < n, only passed and fully verified
  trajectories) on the pass-rate samples, or on a draw of its own with `sft.selection_n` samples; problems in `sft.stage2_bands` go to stage 2, the rest to stage 1;
- correction traces: problems the student never solved get `correction.n` more attempts from the
  teacher; verified solutions go to stage 2 (their band stays the student's "unsolved");
- synthetic traces: fresh queries from the pool's generator (new seed, reframed), answered by the
  teacher, kept if verified; stage 2.
Corrections and synthetic answers go through the same sharded estimator as pass rates, so a
rerun reuses them too. Every trace carries the four verdicts and the student's perplexity.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger

from passband.flows.curate_config import CurateConfig


def build_sft_sets(
    config: CurateConfig, train: dict[str, list[dict]], samples_by_task: dict[str, list[dict]],
    engine: Any, model_dir: str, student: str, tokenizer: Any, sampling: dict,
    verifiers: Any, bands: Any, eval_rows: list[dict], removed: list[dict], metrics: dict[str, float],
    tally: Any,
) -> tuple[list[dict], list[dict]]:
    """(stage-1 rows, stage-2 rows); counts go to `metrics`, sampling totals to `tally`."""
    from passband.curation.curate_rows import removed_record, sft_row
    from passband.curation.sft_select import select_sft
    from passband.curation.synthetic import attach_samples

    logger = get_run_logger()
    system = config.sft.system_prompt
    stage1, stage2 = [], []
    for task_name, rows in train.items():
        samples, num_samples = samples_by_task[task_name], config.pass_rate.n * config.pass_rate.top_k
        if config.sft.selection_n is not None:
            # The recipe's SFT rule counts passes out of its own n (16), independent of the band
            # estimate's n (5): a separate draw, sharded and reused like the pass rates.
            from passband.tasks.sampling.passrate import estimate_pass_rates

            result = estimate_pass_rates(rows, engine, tokenizer, student,
                                         {**sampling, "n": config.sft.selection_n, "top_k": 1}, verifiers,
                                         config.pass_rate.shard_size, system)
            tally.add(result)
            samples, num_samples = result.samples, config.sft.selection_n
        samples = _with_verdicts(config, rows, samples, verifiers)
        kept, out = select_sft(attach_samples(rows, samples), num_samples=num_samples)
        removed.extend(removed_record(row, "sft_select") for row in out)
        for trajectory in kept:
            target = stage2 if trajectory["band"] in config.sft.stage2_bands else stage1
            target.append(sft_row(trajectory, "rollout", student, system))
        metrics[f"sft/{task_name}/rollout_traces"] = len(kept)

    teacher_engine, teacher_id, teacher_tokenizer = engine, student, tokenizer
    if config.teacher is not None and config.teacher != config.model:
        from passband.tasks.artifacts.model import resolve_model
        from passband.tasks.sampling.engine import LazyEngine
        from passband.tasks.sampling.keys import checkpoint_id
        from passband.training.model_source import load_tokenizer

        engine.close()  # one engine in memory at a time
        teacher_dir = resolve_model(config.teacher)
        teacher_id = checkpoint_id(config.teacher, teacher_dir)
        teacher_tokenizer = load_tokenizer(teacher_dir)
        teacher_engine = LazyEngine(config.engine, teacher_dir, config.teacher, config.sampling)

    if config.correction.enabled:
        for task_name, rows in train.items():
            failed = [row for row in rows if row["pass_count"] == 0][: config.correction.max_problems]
            traces = _teacher_traces(config, failed, "correction", teacher_engine, teacher_id, teacher_tokenizer,
                                     {**sampling, "n": config.correction.n, "top_k": 1,
                                      "temperature": config.correction.temperature},
                                     verifiers, bands, removed, metrics, tally, keep_student_rates=True)
            stage2.extend(traces)
            logger.info("%s: %d correction traces from %d failed problems", task_name, len(traces), len(failed))

    if config.synthetic.enabled:
        for task_name in config.pools():
            queries = _synthetic_queries(config, task_name, train, eval_rows, removed, metrics)
            traces = _teacher_traces(config, queries, "synthetic", teacher_engine, teacher_id, teacher_tokenizer,
                                     {**sampling, "n": config.synthetic.n, "top_k": 1,
                                      "temperature": config.synthetic.temperature},
                                     verifiers, bands, removed, metrics, tally, keep_student_rates=False)
            stage2.extend(traces)
            logger.info("%s: %d verified synthetic traces from %d queries", task_name, len(traces), len(queries))
    for kind in ("synthetic", "correction"):
        metrics[f"{kind}/generated"] = sum(v for k, v in metrics.items() if k.startswith(f"{kind}/") and k.endswith("/generated"))
        metrics[f"{kind}/passed_verification"] = sum(
            v for k, v in metrics.items() if k.startswith(f"{kind}/") and k.endswith("/passed"))
    teacher_engine.close()
    engine.close()

    stage1 = _dedupe_traces(stage1, removed)
    stage2 = _dedupe_traces(stage2, removed)
    if config.sft.perplexity:
        stage1, stage2 = _perplexity(config, model_dir, stage1, stage2, removed, metrics)
    return stage1, stage2


def _with_verdicts(config: CurateConfig, problems: list[dict], samples: list[dict], verifiers: Any) -> list[dict]:
    """Samples with the four verdict columns (curation.trace_checks)."""
    from passband.curation.trace_checks import four_verdicts, structure_spec_for

    math_rule = verifiers.math.rule
    sections = tuple(tuple(pair) for pair in config.sft.structure_sections)
    by_id = {row["id"]: row for row in problems}
    verdicts = []
    for sample in samples:
        problem = by_id[sample["problem_id"]]
        spec = structure_spec_for(problem["task"], math_rule, sections)
        verdicts.append({**sample, **four_verdicts(
            problem["task"], problem["prompt"], sample["completion"], problem["reference"], sample["status"],
            sample["finish_reason"], spec, math_rule, config.sft.min_topic_words)})
    return verdicts


def _teacher_traces(
    config: CurateConfig, problems: list[dict], origin: str, engine: Any, teacher_id: str, tokenizer: Any,
    sampling: dict, verifiers: Any, bands: Any, removed: list[dict], metrics: dict, tally: Any,
    keep_student_rates: bool,
) -> list[dict]:
    """Teacher attempts on `problems`, verified; the passed and fully verified ones as SFT rows.

    keep_student_rates: rows keep their pass_rate/band (the student's, for corrections);
    otherwise pass_rate and band are the teacher's on these attempts (synthetic queries).
    """
    from passband.curation.bands import label_rows
    from passband.curation.curate_rows import attach_pass_rates, removed_record, sft_row
    from passband.curation.sft_select import combine_verdicts
    from passband.tasks.sampling.passrate import estimate_pass_rates

    if not problems:
        return []
    task_name = problems[0]["task"]
    result = estimate_pass_rates(problems, engine, tokenizer, teacher_id, sampling, verifiers,
                                 config.pass_rate.shard_size, config.sft.system_prompt)
    if not keep_student_rates:
        problems = label_rows(attach_pass_rates(problems, result.summaries, teacher_id), bands)
    npass = {summary["problem_id"]: summary["pass_count"] for summary in result.summaries}
    by_id = {row["id"]: row for row in problems}
    traces = []
    for sample in _with_verdicts(config, problems, result.samples, verifiers):
        problem = by_id[sample["problem_id"]]
        trajectory = {**problem, **sample, "npass": npass[problem["id"]], "num_samples": sampling["n"]}
        ok, failed = combine_verdicts(trajectory)
        if sample["status"] != "pass":
            removed.append(removed_record({**trajectory, "removed_reason": f"status={sample['status']}"}, origin))
        elif not ok:
            removed.append(removed_record({**trajectory, "removed_reason": "failed_checks:" + ",".join(failed)}, origin))
        else:
            traces.append(sft_row(trajectory, origin, teacher_id, config.sft.system_prompt))
    tally.add(result)
    metrics[f"{origin}/{task_name}/problems"] = len(problems)
    metrics[f"{origin}/{task_name}/generated"] = len(result.samples)
    metrics[f"{origin}/{task_name}/passed"] = len(traces)
    return traces


def _synthetic_queries(config: CurateConfig, task_name: str, train: dict, eval_rows: list[dict],
                       removed: list[dict], metrics: dict) -> list[dict]:
    """Fresh queries from the pool's generator, reframed; none repeats a pool prompt or overlaps eval."""
    from passband.curation.curate_rows import removed_record
    from passband.curation.hygiene import decontaminate, normalize_text, remove_exact_duplicates
    from passband.curation.synthetic import frame_queries
    from passband.tasks.steps.data import load_problems_task

    source = config.tasks[task_name].source
    if source.path is not None or config.synthetic.num_queries == 0:
        return []  # a file has no generator to draw fresh queries from
    seed = source.seed + config.synthetic.seed_offset
    fresh = load_problems_task(source.model_copy(update={"seed": seed, "num_problems": config.synthetic.num_queries}))
    queries = frame_queries(fresh, config.synthetic.framings,
                            generator=f"template:{source.suite} seed={seed} difficulty={source.difficulty}")
    queries, out = remove_exact_duplicates(queries)
    removed.extend(removed_record(row, "synthetic_queries") for row in out)
    pool_prompts = {normalize_text(row["prompt"]) for row in train[task_name]}
    repeated = [row for row in queries if normalize_text(row["prompt"]) in pool_prompts]
    removed.extend(removed_record({**row, "removed_reason": "repeats_pool_prompt"}, "synthetic_queries") for row in repeated)
    queries = [row for row in queries if normalize_text(row["prompt"]) not in pool_prompts]
    queries, out = decontaminate(queries, eval_rows, ngram=config.hygiene.decontam_ngram,
                                 threshold=config.hygiene.decontam_threshold)
    removed.extend(removed_record(row, "synthetic_queries") for row in out)
    metrics[f"synthetic/{task_name}/queries"] = len(queries)
    return queries


def _dedupe_traces(rows: list[dict], removed: list[dict]) -> list[dict]:
    """One row per distinct (prompt, completion): repeated identical answers teach nothing more."""
    from passband.curation.curate_rows import removed_record
    from passband.curation.hygiene import remove_exact_duplicates

    keyed = [{**row, "trace_text": f"{row['prompt']}\n<completion>\n{row['completion']}"} for row in rows]
    kept, out = remove_exact_duplicates(keyed, field="trace_text")
    removed.extend(removed_record(row, "sft_dedup") for row in out)
    return [{k: v for k, v in row.items() if k != "trace_text"} for row in kept]


def _perplexity(config: CurateConfig, model_dir: str, stage1: list[dict], stage2: list[dict],
                removed: list[dict], metrics: dict) -> tuple[list[dict], list[dict]]:
    """The student's perplexity on every kept trace; traces above the cap are removed."""
    from passband.curation.curate_rows import removed_record
    from passband.curation.sft_select import perplexity_cap
    from passband.tasks.steps.trace_perplexity import trace_perplexities

    rows = stage1 + stage2
    values = trace_perplexities(model_dir, [row["prompt"] for row in rows], [row["completion"] for row in rows],
                                config.sft.system_prompt)
    for row, value in zip(rows, values):
        row["perplexity"] = value
    if values:
        metrics["sft/perplexity_mean"] = sum(values) / len(values)
    if config.sft.max_perplexity is None:
        return stage1, stage2
    capped = []
    for stage in (stage1, stage2):
        kept, out = perplexity_cap(stage, config.sft.max_perplexity)
        removed.extend(removed_record(row, "perplexity") for row in out)
        capped.append(kept)
    return capped[0], capped[1]
