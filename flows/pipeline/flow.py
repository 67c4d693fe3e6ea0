"""The `pipeline` flow, the main job: curate -> SFT (staged) -> re-curate the RL pool with the
SFT checkpoint -> multi-task RL -> evaluate base, SFT and RL side by side -> register the best.

Stages hand each other artifact URIs. A stage's config may name another stage's output as
`@<stage>.<output>` (e.g. `@curate.sft_stage1`, `@recurate.rl_math`, `@curate.eval_math`), in
values and in mapping keys; the pipeline substitutes the URI before the stage runs. Every stage
caches itself by its resolved config (URIs included) and the code version (tasks/stages/cache.py), so a
rerun after a crash, or with one RL setting changed, recomputes only what changed downstream.

Stages run in this process (as subflows) unless `placement` names a work pool for them: then each
such stage is a flow run of its deployment on that pool, which the pipeline waits for and whose
summary it reads (tasks/stages/placement.py); the URIs it hands on are the same either way.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from prefect import flow
from pydantic import BaseModel, Field, field_validator, model_validator

from passband.flows.config import Config, dump_with_removed_entries
from passband.flows.curate.flow import CurateConfig
from passband.flows.evaluate.flow import EvaluateConfig
from passband.flows.rl.config import RLConfig
from passband.flows.sft import SFTConfig
from passband.tasks.stages.summary import RunSummary
from passband.training.evaluation.claims import ClaimsConfig

# What `placement` can place; `evaluate` covers the three evaluations (base, SFT, RL).
StageName = Literal["curate", "sft", "recurate", "rl", "evaluate"]
_POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
STAGE_MODELS = (("curate", "model"), ("sft", "model"), ("rl", "model"), ("evaluate", "model"), ("evaluate", "baseline"))
"""The stage settings the pipeline sets from its own `model`: curate and SFT start from it, RL from SFT's
checkpoint, and evaluate scores base, SFT and RL against it. In a pipeline config each shows the top-level
`model`; another value is refused rather than replaced at run time."""
_BEST_METRIC = re.compile(r"pass@([1-9][0-9]*)")


class PipelineConfig(Config):
    """Every stage's config; `model` is the base checkpoint all of them start from."""

    model: str = "smollm2-135m-instruct"
    """The base model: SFT starts here, and it is the baseline of every evaluation."""
    curate: CurateConfig = CurateConfig()
    """Curation of the base model's data (its `model` is set to `model`)."""
    sft: SFTConfig = SFTConfig()
    """Curriculum SFT (its `model` is set to `model`); may name `@curate.*` datasets."""
    recurate: bool = True
    """Re-estimate pass rates with the SFT checkpoint and rebuild the RL sets from them (docs/recipe.md section 1:
    filter to the ability of the model that is trained next). Synthetic SFT generation is off
    in this pass. False: RL trains on the first curation's RL sets."""
    rl: RLConfig = RLConfig()
    """Multi-task RL from the SFT checkpoint; may name `@recurate.rl_<task>`/`@curate.*` datasets."""
    evaluate: EvaluateConfig = EvaluateConfig()
    """Held-out evaluation run once per checkpoint (its `model`/`baseline` are set here)."""
    training_seed: int = Field(0, ge=0)
    """Added to every training-side seed: curation's sampling (`curate.engine.seed`, so pass rates,
    corrections and synthetic answers, and the re-curation), each SFT stage's data order
    (`sft.stages[*].seed`) and RL's prompt order and rollouts (`rl.seed`). The eval splits (curate's
    `holdout_seed`, every suite's seed) and every evaluation's sampling are left as written, so two
    runs that differ here differ only in training. 0: the stage configs' seeds as written."""
    registered_model: str = Field("passband-reasoner", min_length=1)
    """MLflow registered-model name for the best checkpoint."""
    best_metric: str = "pass@1"
    """Statistic averaged over eval sets to pick the best checkpoint among SFT and RL."""
    claims: ClaimsConfig | None = None
    """What the run expects its `best_metric` table to show (interval widths, gains, no regressions);
    the results say which claims the intervals support (None: no claims section)."""
    placement: dict[StageName, str] = {}
    """Stage -> Prefect work pool, e.g. {sft: passband-gpu, rl: passband-gpu}: that stage runs as a flow
    run of its flow's one deployment on the pool (`passband deploy` registers them) and the pipeline
    waits for it; a stage not named runs in this process. The pool needs a free slot: a pipeline that
    itself runs on a pool of concurrency 1 cannot place stages on that same pool."""

    @model_validator(mode="before")
    @classmethod
    def _stage_models_are_the_pipelines(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        model = data.get("model", cls.model_fields["model"].default)
        data = dict(data)
        for stage, name in STAGE_MODELS:
            section = data.get(stage)
            given = section.get(name) if isinstance(section, dict) else getattr(section, name, None)
            if given is not None and given != model:
                raise ValueError(
                    f"{stage}.{name} is {given!r}, but a pipeline sets it from its top-level `model` ({model!r}): "
                    f"curate and SFT start from `model`, RL from SFT's checkpoint, and evaluate scores each against "
                    f"`model`; set `model: {given}` instead, or run the {stage} flow alone")
            if stage == "evaluate" and name == "baseline":
                continue  # the base evaluation has none; SFT's and RL's get `model` (pipeline.evaluate_config)
            if isinstance(section, BaseModel):
                data[stage] = section.model_copy(update={name: model})
            else:
                data[stage] = {**(section or {}), name: model}
        return data

    @field_validator("placement")
    @classmethod
    def _pool_names(cls, placement: dict[str, str]) -> dict[str, str]:
        bad = {stage: pool for stage, pool in placement.items() if not _POOL_NAME.fullmatch(pool)}
        if bad:
            raise ValueError(f"placement: work pool names use letters, digits and ._- (got {bad})")
        return placement

    @model_validator(mode="after")
    def _best_metric_is_in_the_table(self) -> PipelineConfig:
        n = self.evaluate.sampling.n
        match = _BEST_METRIC.fullmatch(self.best_metric)
        if match is None or int(match.group(1)) > n:
            raise ValueError(f"best_metric {self.best_metric!r} is not in the final table, which holds pass@1 to "
                             f"pass@{n} of every eval set (evaluate.sampling.n = {n}): pick one of those")
        return self

    @model_validator(mode="after")
    def _rl_continues_an_sft_adapter(self) -> PipelineConfig:
        lora = self.rl.algo.lora
        if lora is None or lora.start != "continue":
            return self
        sft_lora = self.sft.stages[-1].lora
        wanted = (lora.rank, lora.alpha, lora.target_modules)
        given = sft_lora and (sft_lora.rank, sft_lora.alpha, sft_lora.target_modules)
        if given != wanted:
            raise ValueError(f"rl.algo.lora.start: continue trains SFT's adapter further, so SFT's last stage "
                             f"({self.sft.stages[-1].name}) needs lora with RL's rank, alpha and target_modules "
                             f"{wanted}; it has {given}. Or set "
                             "rl.algo.lora.start: fresh (new adapters on SFT's merged checkpoint)")
        return self

    @model_validator(mode="after")
    def _references_bind(self) -> PipelineConfig:
        from passband.flows.pipeline.refs import reference_problems

        problems = reference_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _claims_name_eval_sets(self) -> PipelineConfig:
        if self.claims is not None:
            sets = {*self.evaluate.datasets, *self.evaluate.suites}
            unknown = sorted({*self.claims.sft_gains, *self.claims.rl_gains} - sets)
            if unknown:
                raise ValueError(f"claims name {unknown}, which are not eval sets of `evaluate` ({sorted(sets)})")
        return self


def bind_refs(value: Any, outputs: dict[str, dict[str, str]]) -> Any:
    """Replace every `@stage.output` string (values and mapping keys) by that output's URI."""
    if isinstance(value, dict):
        return {bind_refs(k, outputs): bind_refs(v, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [bind_refs(v, outputs) for v in value]
    if isinstance(value, str) and value.startswith("@"):
        stage, _, name = value[1:].partition(".")
        if stage not in outputs or name not in outputs[stage]:
            available = {s: sorted(o) for s, o in outputs.items()}
            raise ValueError(f"pipeline reference {value!r} names no output of a finished stage ({available})")
        return outputs[stage][name]
    return value


def with_training_seed(config: PipelineConfig) -> PipelineConfig:
    """`config` with `training_seed` added to the training seeds its docstring names, built whole."""
    data = dump_with_removed_entries(config)  # a default map entry the user removed stays removed
    offset = config.training_seed
    data["curate"]["engine"]["seed"] += offset
    for stage in data["sft"]["stages"]:
        stage["seed"] += offset
    data["rl"]["seed"] += offset
    return PipelineConfig.model_validate({**data, "training_seed": 0})


def _stage_config(config_cls: type[Config], config: Config, outputs: dict[str, dict[str, str]],
                  **fields: Any) -> Config:
    """`config` with its `@stage.output` references bound and `fields` set, validated again."""
    data = bind_refs(config.model_dump(mode="json"), outputs)
    return config_cls.model_validate({**data, **fields})


def _sft_held_out(config: PipelineConfig, outputs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """SFT's held-out sets: its own, plus every set the evaluate stage scores (bound), so no SFT row
    asks a question of the final table in any answer format (worked math draws from the same
    small procedural spaces as the eval sets)."""
    evaluated = {**config.evaluate.datasets, **config.evaluate.model_dump(mode="json")["suites"]}
    return {**config.sft.model_dump(mode="json")["held_out"],
            **{f"evaluate.{name}": bind_refs(ref, outputs) for name, ref in evaluated.items()}}


def run_stage(flow_fn: Any, pool: str | None, config: Config, parent_run_id: str,
              run_name: str | None = None) -> RunSummary:
    """The stage's flow called here (a subflow), or a run of its deployment on work pool `pool`."""
    named = {} if run_name is None else {"run_name": run_name}
    if pool is None:
        return flow_fn(config, parent_run_id, **named)
    from passband.tasks.stages.placement import run_on_pool

    parameters = {"config": config.model_dump(mode="json"), "parent_run_id": parent_run_id, **named}
    return run_on_pool(flow_fn.name, pool, parameters, run_name or flow_fn.name)


def _recurate_config(config: PipelineConfig, outputs: dict[str, dict[str, str]], checkpoint: str) -> CurateConfig:
    """The curate stage's config on `checkpoint` with its SFT half off: the second pass only rebuilds
    the RL sets from the SFT checkpoint's pass rates (built whole, not edited after validation)."""
    data = bind_refs(config.curate.model_dump(mode="json"), outputs)
    off = {part: {**data[part], "enabled": False} for part in ("sft", "correction", "synthetic")}
    return CurateConfig.model_validate({**data, "model": checkpoint, **off})


def evaluate_config(config: PipelineConfig, outputs: dict[str, dict[str, str]], label: str, checkpoint: str,
                     base_samples: str | None) -> EvaluateConfig:
    """The evaluate stage's config for one checkpoint, as the pipeline runs it (scripts/tool_pipeline.py evaluates
    the same checkpoints with the tool on through it). SFT and RL compare against the base evaluation's
    own samples, not a fresh draw; the base itself has no baseline (one in the evaluate preset would
    only sample it twice); the k-curve asks whether RL narrowed, sharpened or expanded: base and RL only."""
    if label == "base":
        comparison: dict[str, Any] = {"baseline": None, "baseline_samples": None}
    else:
        comparison = {"baseline": config.model, "baseline_samples": base_samples}
    if label == "sft":
        comparison["k_curve"] = None
    return _stage_config(EvaluateConfig, config.evaluate, outputs, model=checkpoint, **comparison)


def _lineage(outputs: dict[str, dict[str, str]]) -> dict[str, str]:
    """The datasets behind the registered checkpoint: RL sets of the (re)curation, SFT and eval sets."""
    return {**{f"dataset.{name}": uri for name, uri in sorted(outputs["recurate"].items()) if name.startswith("rl_")},
            **{f"dataset.{name}": uri for name, uri in sorted(outputs["curate"].items())
               if name.startswith(("sft_", "eval_"))}}


def _evaluate_checkpoints(config: PipelineConfig, outputs: dict[str, dict[str, str]], checkpoints: dict[str, str],
                          run_id: str) -> dict[str, RunSummary]:
    """The evaluate stage once per checkpoint (base first: the others reuse its samples as their baseline)."""
    from passband.flows.evaluate.flow import evaluate
    from passband.training.engines.keeper import ENGINES

    evaluations: dict[str, RunSummary] = {}
    with ENGINES.scope():  # the three evaluations share one live engine, swapping weights
        for label, checkpoint in checkpoints.items():
            base_samples = evaluations["base"].outputs["samples"] if evaluations else None
            evaluations[label] = run_stage(evaluate, config.placement.get("evaluate"), evaluate_config(
                config, outputs, label, checkpoint, base_samples), run_id, run_name=f"evaluate-{label}")
    return evaluations


def _train(config: PipelineConfig, run_id: str) -> tuple[dict[str, RunSummary], dict[str, dict[str, str]]]:
    """Curate, SFT, the re-curation on SFT's checkpoint (or curate's RL sets again), RL: each stage's
    summary and outputs by stage, every stage's references bound to the outputs before it."""
    from passband.flows.curate.flow import curate
    from passband.flows.rl.flow import rl
    from passband.flows.sft import sft

    placed = config.placement.get
    runs: dict[str, RunSummary] = {}
    outputs: dict[str, dict[str, str]] = {}
    runs["curate"] = run_stage(curate, placed("curate"),
                               _stage_config(CurateConfig, config.curate, outputs, model=config.model), run_id)
    outputs["curate"] = runs["curate"].outputs
    runs["sft"] = run_stage(sft, placed("sft"), _stage_config(SFTConfig, config.sft, outputs, model=config.model,
                                                              held_out=_sft_held_out(config, outputs)), run_id)
    outputs["sft"] = runs["sft"].outputs
    sft_checkpoint = outputs["sft"]["checkpoint"]
    if config.recurate:
        runs["recurate"] = run_stage(curate, placed("recurate"), _recurate_config(config, outputs, sft_checkpoint),
                                     run_id, run_name="recurate")
    outputs["recurate"] = runs["recurate"].outputs if config.recurate else outputs["curate"]
    runs["rl"] = run_stage(rl, placed("rl"), _stage_config(RLConfig, config.rl, outputs, model=sft_checkpoint), run_id)
    outputs["rl"] = runs["rl"].outputs
    return runs, outputs


def _results(config: PipelineConfig, evaluations: dict[str, RunSummary]) -> tuple[dict[str, float], dict[str, float]]:
    """(the `best_metric` table of base, SFT and RL; the run's metrics from it: the table, RL's
    k-curve, the claims' and the score errors'), the table logged and published with its intervals."""
    from prefect.logging import get_run_logger

    from passband.tasks.reporting.prefect_artifacts import publish_markdown, publish_table
    from passband.training.evaluation.k_curve import k_curve_entries
    from passband.training.evaluation.results import (pass_at_1_table, results_markdown, score_error_markdown,
                                                      table_rows)

    statistic = config.best_metric
    by_label = {label: summary.metrics for label, summary in evaluations.items()}
    table = pass_at_1_table(by_label, statistic)
    k_curve = k_curve_entries(evaluations["rl"].metrics)
    results, claim_metrics = results_markdown(
        table, statistic, k_curve if config.evaluate.k_curve is not None else None, config.claims)
    errors, error_metrics = score_error_markdown(by_label)
    results += f"\n\n{errors}" if errors else ""
    get_run_logger().info("\n%s", results)
    publish_markdown(results, f"held-out {statistic} of base, SFT and RL with 95% intervals and deltas")
    publish_table(table_rows(table, statistic),
                  f"held-out {statistic} per eval set: base, SFT, RL, deltas against base (95% intervals)")
    return table, {**table, **{f"rl/{name}": value for name, value in k_curve.items()}, **claim_metrics, **error_metrics}


def _register_best(config: PipelineConfig, run: Any, table: dict[str, float], checkpoints: dict[str, str],
                   runs: dict[str, RunSummary], outputs: dict[str, dict[str, str]]) -> tuple[str, str]:
    """(the stage whose checkpoint has the best mean `best_metric`, its version in the MLflow model
    registry), registered with its lineage."""
    from passband.tasks.artifacts.provenance import code_version, config_hash
    from passband.tasks.reporting.registry import register_checkpoint
    from passband.training.evaluation.results import best_checkpoint, mean_score

    best = best_checkpoint(table, config.best_metric)
    lineage = {"checkpoint_uri": checkpoints[best], "stage": best, "pipeline_run_id": run.run_id,
               "config_hash": config_hash(run.resolved), "code_version": code_version(), **_lineage(outputs),
               "selection_metric": f"mean {config.best_metric} over eval sets",
               "selection_value": mean_score(table, config.best_metric, best)}
    return best, register_checkpoint(config.registered_model, runs[best].mlflow_run_id, lineage)


def _finish(config: PipelineConfig, run: Any, metrics: dict[str, float], outputs: dict[str, dict[str, str]],
            best_checkpoint: str, version: str) -> RunSummary:
    """The run's metrics and tags in MLflow, and its summary: every stage's outputs and the best checkpoint."""
    from passband.tasks.reporting import tracking

    tracking.log_metrics(metrics, step=0, run_id=run.run_id)
    tracking.set_tags({"best_checkpoint": best_checkpoint, "registered_model": f"{config.registered_model}/{version}"},
                      run.run_id)
    flat_outputs = {f"{stage}.{name}": uri for stage, named in outputs.items() for name, uri in named.items()}
    return run.finish({**flat_outputs, "best_checkpoint": best_checkpoint}, metrics)


@flow(name="pipeline", flow_run_name="pipeline")
def pipeline(config: PipelineConfig = PipelineConfig(), parent_run_id: str | None = None) -> RunSummary:
    """Run every stage in order under one MLflow parent run; end with the pass@1 table."""
    import time

    from passband.tasks.stages.stage import stage_run

    start = time.perf_counter()
    with stage_run("pipeline", config, parent_run_id, cache=False) as run:
        config = with_training_seed(config)
        runs, outputs = _train(config, run.run_id)
        checkpoints = {"base": config.model, "sft": outputs["sft"]["checkpoint"], "rl": outputs["rl"]["checkpoint"]}
        evaluations = _evaluate_checkpoints(config, outputs, checkpoints, run.run_id)
        table, metrics = _results(config, evaluations)
        best, version = _register_best(config, run, table, checkpoints, runs, outputs)
        metrics["wall_s"] = time.perf_counter() - start
        return _finish(config, run, metrics, outputs, checkpoints[best], version)
