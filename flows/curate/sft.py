"""The SFT half of the curate flow: verified traces from rollouts, corrections and synthetic queries.

- rollout traces: the recipe's rule (0 < npass < n, only passed and fully verified
  trajectories) on the pass-rate samples, or on a draw of its own with `sft.selection_n` samples; problems in `sft.stage2_bands` go to stage 2, the rest to stage 1;
- correction traces: problems the student never solved get `correction.sampling.n` more attempts from the
  teacher; verified solutions go to stage 2 (their band stays the student's "unsolved");
- synthetic traces: fresh queries from the pool's generator (new seed, reframed), answered by the
  teacher, kept if verified; stage 2.
Corrections and synthetic answers go through the same sharded estimator as pass rates, so a
rerun reuses them too. Every trace carries the four verdicts and the student's perplexity.
The rules themselves are curation's (sft_select, trace_checks, synthetic, hygiene); this module
draws the samples and returns what it kept, removed and counted as one SFTSets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prefect import get_run_logger

from passband.flows.curate.config import CurateConfig

if TYPE_CHECKING:
    from passband.tasks.sampling.passrate_job import ShardSampling


@dataclass(frozen=True)
class Sampler:
    """One model that samples for the curate flow: its engine (opened on first use), local
    checkpoint dir, checkpoint id (the shard keys name it) and tokenizer."""

    engine: Any
    model_dir: str
    checkpoint: str
    tokenizer: Any


def open_sampler(config: CurateConfig, model_ref: str) -> Sampler:
    """The Sampler of `model_ref` (the student or the teacher) on the flow's engine settings."""
    from passband.tasks.artifacts.model import resolve_model
    from passband.tasks.sampling.engine import LazyEngine
    from passband.tasks.sampling.keys import checkpoint_id
    from passband.training.model_source import load_tokenizer

    model_dir = resolve_model(model_ref)
    checkpoint, tokenizer = checkpoint_id(model_ref, model_dir), load_tokenizer(model_dir, config.engine.trust_remote_code)
    return Sampler(LazyEngine(config.engine, model_dir, model_ref, config.sampling), model_dir, checkpoint, tokenizer)


@dataclass
class SFTSets:
    """What the SFT half produced: the two stage sets, the rows it removed (removed_record, in
    order), its counts, and every pass-rate estimate it ran (for the run's sampling totals)."""

    stage1: list[dict] = field(default_factory=list)
    stage2: list[dict] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    results: list[Any] = field(default_factory=list)

    def __or__(self, other: SFTSets) -> SFTSets:
        """Both parts, this one's rows first."""
        return SFTSets(self.stage1 + other.stage1, self.stage2 + other.stage2, self.removed + other.removed,
                       self.metrics | other.metrics, self.results + other.results)

    def stages(self) -> dict[str, list[dict]]:
        """The stage sets by output name."""
        return {"sft_stage1": self.stage1, "sft_stage2": self.stage2}


def build_sft_sets(config: CurateConfig, train: dict[str, list[dict]], samples_by_task: dict[str, list[dict]],
                   student: Sampler, sampling: ShardSampling, eval_rows: list[dict]) -> SFTSets:
    """The student's rollout traces (stages 1 and 2 by band), then the teacher's corrections and
    synthetic traces (stage 2); no trace twice in a stage; the student's perplexity on every trace.
    `train`: labeled pool rows per task; `samples_by_task`: their pass-rate samples; `sampling`:
    the pass-rate sampling (SFT selection's own draw changes its n)."""

    logger = get_run_logger()
    sets = SFTSets()
    for task_name, rows in train.items():
        sets |= _rollout_traces(config, task_name, rows, samples_by_task[task_name], student, sampling)

    teacher = student
    if config.teacher is not None and config.teacher != config.model:
        student.engine.close()  # one engine in memory at a time
        teacher = open_sampler(config, config.teacher)
    if config.correction.enabled:
        for task_name, rows in train.items():
            failed = [row for row in rows if row["pass_count"] == 0][: config.correction.max_problems]
            part = _teacher_traces(config, failed, "correction", teacher,
                                   config.shard_sampling(config.correction.sampling, 1), keep_student_rates=True)
            sets |= part
            logger.info("%s: %d correction traces from %d failed problems", task_name, len(part.stage2), len(failed))
    if config.synthetic.enabled:
        for task_name in config.pools():
            queries = _synthetic_queries(config, task_name, train, eval_rows)
            part = _teacher_traces(config, queries.stage2, "synthetic", teacher,
                                   config.shard_sampling(config.synthetic.sampling, 1), keep_student_rates=False)
            sets |= SFTSets(removed=queries.removed, metrics=queries.metrics) | part
            logger.info("%s: %d verified synthetic traces from %d queries", task_name, len(part.stage2),
                        len(queries.stage2))
    sets.metrics |= _teacher_totals(sets.metrics, list(train))
    teacher.engine.close()
    student.engine.close()

    sets = _dedupe(sets)
    return _perplexity(config, student.model_dir, sets) if config.sft.perplexity else sets


def _rollout_traces(config: CurateConfig, task_name: str, rows: list[dict], samples: list[dict], student: Sampler,
                    sampling: ShardSampling) -> SFTSets:
    """The recipe's rule (0 < npass < n, passed and fully verified) on the student's samples of one
    task: the pass-rate samples, or a draw of `sft.selection_n` of its own; by band into the stages.
    A task sampled as episodes (math_tool, code_feedback) gives whole passing episodes, token-exact
    (their `input_ids` and `loss_mask`), verified on the last turn as the pass rates were."""
    from passband.curation.curate_rows import removed_record, sft_row
    from passband.curation.sft_select import select_sft
    from passband.curation.synthetic import attach_samples

    results, num_samples = [], config.pass_rate.sampling.n * config.pass_rate.top_k
    if config.sft.selection_n is not None:
        # The recipe's SFT rule counts passes out of its own n (16), independent of the band
        # estimate's n (5): a separate draw, sharded and reused like the pass rates.
        from passband.tasks.sampling.passrate import estimate_pass_rates

        result = estimate_pass_rates(rows, student.engine, student.tokenizer, student.checkpoint,
                                     sampling.for_task(task_name).with_draw(config.sft.selection_n), config.verifiers(),
                                     config.pass_rate.shard_size, config.sft.system_prompt)
        results, samples, num_samples = [result], result.samples, config.sft.selection_n
    kept, out = select_sft(attach_samples(rows, _with_verdicts(config, rows, samples)), num_samples=num_samples)
    stage1, stage2 = [], []
    for trajectory in kept:
        target = stage2 if trajectory["band"] in config.sft.stage2_bands else stage1
        target.append(sft_row(trajectory, "rollout", student.checkpoint, config.sft.system_prompt))
    return SFTSets(stage1, stage2, [removed_record(row, "sft_select") for row in out],
                   {f"sft/{task_name}/rollout_traces": len(kept)}, results)


def _with_verdicts(config: CurateConfig, problems: list[dict], samples: list[dict]) -> list[dict]:
    """Samples with the four verdict columns (curation.trace_checks) under the flow's settings."""
    from passband.curation.trace_checks import with_verdicts

    return with_verdicts(problems, samples, config.verifiers().math.rule,
                         tuple(tuple(pair) for pair in config.sft.structure_sections), config.sft.min_topic_words)


def _teacher_traces(config: CurateConfig, problems: list[dict], origin: str, teacher: Sampler, sampling: ShardSampling,
                    keep_student_rates: bool) -> SFTSets:
    """Teacher attempts on `problems`, verified; the passed and fully verified ones as stage-2 rows.

    keep_student_rates: rows keep their pass_rate/band (the student's, for corrections);
    otherwise pass_rate and band are the teacher's on these attempts (synthetic queries).
    """
    from passband.curation.bands import label_rows
    from passband.curation.curate_rows import attach_pass_rates, removed_record, sft_row
    from passband.curation.sft_select import verified_attempts
    from passband.tasks.sampling.passrate import estimate_pass_rates

    if not problems:
        return SFTSets()
    task_name = problems[0]["task"]
    result = estimate_pass_rates(problems, teacher.engine, teacher.tokenizer, teacher.checkpoint, sampling,
                                 config.verifiers(), config.pass_rate.shard_size, config.sft.system_prompt)
    if not keep_student_rates:
        problems = label_rows(attach_pass_rates(problems, result.summaries, teacher.checkpoint),
                              config.difficulty_bands())
    npass = {summary["problem_id"]: summary["pass_count"] for summary in result.summaries}
    kept, out = verified_attempts(problems, _with_verdicts(config, problems, result.samples), npass,
                                 sampling.sampling.n)
    traces = [sft_row(trajectory, origin, teacher.checkpoint, config.sft.system_prompt) for trajectory in kept]
    metrics = {f"{origin}/{task_name}/problems": len(problems), f"{origin}/{task_name}/generated": len(result.samples),
               f"{origin}/{task_name}/passed": len(traces)}
    return SFTSets(stage2=traces, removed=[removed_record(row, origin) for row in out], metrics=metrics,
                   results=[result])


def _teacher_totals(metrics: dict[str, float], task_names: list[str]) -> dict[str, float]:
    """Teacher attempts generated and passing verification, summed over the tasks, per kind."""
    return {f"{kind}/{total}": sum(metrics.get(f"{kind}/{name}/{per_task}", 0) for name in task_names)
            for kind in ("synthetic", "correction")
            for total, per_task in (("generated", "generated"), ("passed_verification", "passed"))}


def _synthetic_queries(config: CurateConfig, task_name: str, train: dict, eval_rows: list[dict]) -> SFTSets:
    """Fresh queries from the pool's generator, reframed; none repeats a pool prompt or overlaps eval
    (the queries in `stage2`, not yet traces: the teacher answers them)."""
    from passband.curation.curate_rows import removed_record
    from passband.curation.synthetic import filter_queries, frame_queries
    from passband.tasks.steps.data import load_problems_task

    source = config.tasks[task_name].source
    if source.path is not None or config.synthetic.num_queries == 0:
        return SFTSets()  # a file has no generator to draw fresh queries from
    seed = source.seed + config.synthetic.seed_offset
    fresh = load_problems_task(source.model_copy(update={"seed": seed, "num_problems": config.synthetic.num_queries}))
    queries = frame_queries(fresh, config.synthetic.framings,
                            generator=f"template:{source.suite} seed={seed} difficulty={source.difficulty}")
    queries, out = filter_queries(queries, train[task_name], eval_rows, config.hygiene)
    return SFTSets(stage2=queries, removed=[removed_record(row, "synthetic_queries") for row in out],
                   metrics={f"synthetic/{task_name}/queries": len(queries)})


def _dedupe(sets: SFTSets) -> SFTSets:
    """Each stage with one row per distinct (prompt, completion)."""
    from passband.curation.curate_rows import removed_record
    from passband.curation.sft_select import dedupe_traces

    stage1, out1 = dedupe_traces(sets.stage1)
    stage2, out2 = dedupe_traces(sets.stage2)
    removed = [removed_record(row, "sft_dedup") for row in out1 + out2]
    return SFTSets(stage1, stage2, sets.removed + removed, sets.metrics, sets.results)


def _perplexity(config: CurateConfig, model_dir: str, sets: SFTSets) -> SFTSets:
    """The student's perplexity on every kept trace; traces above the cap are removed."""
    from passband.curation.curate_rows import removed_record
    from passband.curation.sft_select import perplexity_cap
    from passband.tasks.steps.trace_perplexity import trace_perplexities

    rows = sets.stage1 + sets.stage2
    values = trace_perplexities(model_dir, [row["prompt"] for row in rows], [row["completion"] for row in rows],
                                config.sft.system_prompt,
                                episodes=[(row["input_ids"], row["loss_mask"]) if row.get("input_ids") else None
                                          for row in rows], trust_remote_code=config.engine.trust_remote_code)
    stage1 = [{**row, "perplexity": value} for row, value in zip(sets.stage1, values)]
    stage2 = [{**row, "perplexity": value} for row, value in zip(sets.stage2, values[len(sets.stage1):])]
    metrics = sets.metrics | ({"sft/perplexity_mean": sum(values) / len(values)} if values else {})
    if config.sft.max_perplexity is None:
        return SFTSets(stage1, stage2, sets.removed, metrics, sets.results)
    (stage1, out1), (stage2, out2) = (perplexity_cap(stage, config.sft.max_perplexity) for stage in (stage1, stage2))
    removed = [removed_record(row, "perplexity") for row in out1 + out2]
    return SFTSets(stage1, stage2, sets.removed + removed, metrics, sets.results)
