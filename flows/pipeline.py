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
from pydantic import Field, field_validator, model_validator

from passband.flows.config import Config
from passband.flows.curate import CurateConfig
from passband.flows.evaluate import EvaluateConfig
from passband.flows.rl_config import RLConfig
from passband.flows.sft import SFTConfig
from passband.tasks.stages.summary import RunSummary
from passband.training.evaluation.claims import ClaimsConfig

CHECKPOINTS = ("base", "sft", "rl")
# What `placement` can place; `evaluate` covers the three evaluations (base, SFT, RL).
StageName = Literal["curate", "sft", "recurate", "rl", "evaluate"]
_POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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

    @field_validator("placement")
    @classmethod
    def _pool_names(cls, placement: dict[str, str]) -> dict[str, str]:
        bad = {stage: pool for stage, pool in placement.items() if not _POOL_NAME.fullmatch(pool)}
        if bad:
            raise ValueError(f"placement: work pool names use letters, digits and ._- (got {bad})")
        return placement

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


def pass_at_1_table(evaluations: dict[str, RunSummary], statistic: str) -> dict[str, float]:
    """Each evaluation's whole-set `{eval set}/{statistic}` metrics (with `_ci_low`/`_ci_high`) and
    its paired deltas against base (`delta/{eval set}/{statistic}...`), keyed `{checkpoint}/{name}`."""
    table = {}
    for label, summary in evaluations.items():
        for name, value in summary.metrics.items():
            parts = name.split("/")
            whole_set = len(parts) == 2 or (len(parts) == 3 and parts[0] == "delta")
            if whole_set and parts[-1] in (statistic, f"{statistic}_ci_low", f"{statistic}_ci_high"):
                table[f"{label}/{name}"] = value
    return table


def headline_scores(table: dict[str, float], statistic: str, label: str) -> dict[str, float]:
    """{eval set: value} of one checkpoint's point estimates in a pass_at_1_table."""
    return {key.split("/")[1]: value for key, value in table.items()
            if key.startswith(f"{label}/") and key.count("/") == 2 and key.endswith(f"/{statistic}")}


def table_rows(table: dict[str, float], statistic: str) -> list[dict[str, float | str | None]]:
    """One row per eval set: each checkpoint's value and interval, each delta against base (None
    where the table has no such entry)."""
    rows = []
    for name in sorted(headline_scores(table, statistic, CHECKPOINTS[0])):
        row: dict[str, float | str | None] = {"eval_set": name}
        for c in CHECKPOINTS:
            for suffix in ("", "_ci_low", "_ci_high"):
                row[f"{c}{suffix}"] = table.get(f"{c}/{name}/{statistic}{suffix}")
            if c != CHECKPOINTS[0]:
                for suffix in ("", "_ci_low", "_ci_high"):
                    row[f"{c}_delta{suffix}"] = table.get(f"{c}/delta/{name}/{statistic}{suffix}")
        rows.append(row)
    return rows


def format_table(table: dict[str, float], statistic: str) -> str:
    """Markdown: each checkpoint's value [95% interval], then each delta against base [interval],
    with `*` where the delta's interval excludes 0."""
    sets = sorted(headline_scores(table, statistic, CHECKPOINTS[0]))
    deltas = [c for c in CHECKPOINTS if sets and f"{c}/delta/{sets[0]}/{statistic}" in table]
    header = [f"held-out {statistic}", *CHECKPOINTS, *(f"{c} - base" for c in deltas)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    nan = float("nan")
    for name in sets:
        cells = [name]
        for c in CHECKPOINTS:
            key = f"{c}/{name}/{statistic}"
            cells.append(f"{table.get(key, nan):.3f} [{table.get(key + '_ci_low', nan):.3f}, "
                         f"{table.get(key + '_ci_high', nan):.3f}]")
        for c in deltas:
            key = f"{c}/delta/{name}/{statistic}"
            low, high = table[key + "_ci_low"], table[key + "_ci_high"]
            cells.append(f"{table[key]:+.3f} [{low:+.3f}, {high:+.3f}]{' *' if low > 0 or high < 0 else ''}")
        lines.append("| " + " | ".join(cells) + " |")
    if deltas:
        lines.append("\n[lo, hi]: 95% interval over problems; *: the paired delta's interval excludes 0.")
    return "\n".join(lines)


@flow(name="pipeline", flow_run_name="pipeline")
def pipeline(config: PipelineConfig = PipelineConfig(), parent_run_id: str | None = None) -> RunSummary:
    """Run every stage in order under one MLflow parent run; end with the pass@1 table."""
    import time

    from prefect.logging import get_run_logger

    from passband.flows.curate import curate
    from passband.flows.evaluate import evaluate
    from passband.flows.rl import rl
    from passband.flows.sft import sft
    from passband.tasks.artifacts.provenance import code_version, config_hash
    from passband.tasks.reporting import tracking
    from passband.tasks.reporting.registry import register_checkpoint
    from passband.tasks.stages.stage import publish_markdown, publish_table, stage_run
    from passband.training.engines.keeper import ENGINES
    from passband.training.evaluation.claims import check_claims, format_claims
    from passband.training.evaluation.k_curve import k_curve_markdown

    logger = get_run_logger()
    start = time.perf_counter()
    with stage_run("pipeline", config, parent_run_id, cache=False) as run:
        run_id, resolved = run.run_id, run.resolved
        outputs: dict[str, dict[str, str]] = {}
        runs: dict[str, RunSummary] = {}

        placed = config.placement.get
        runs["curate"] = run_stage(curate, placed("curate"),
                                   _stage_config(CurateConfig, config.curate, outputs, model=config.model), run_id)
        outputs["curate"] = runs["curate"].outputs
        runs["sft"] = run_stage(sft, placed("sft"), _stage_config(SFTConfig, config.sft, outputs, model=config.model,
                                                                  held_out=_sft_held_out(config, outputs)), run_id)
        outputs["sft"] = runs["sft"].outputs
        sft_checkpoint = outputs["sft"]["checkpoint"]
        if config.recurate:
            recurate_config = _stage_config(CurateConfig, config.curate, outputs, model=sft_checkpoint)
            for part in (recurate_config.sft, recurate_config.correction, recurate_config.synthetic):
                part.enabled = False
            runs["recurate"] = run_stage(curate, placed("recurate"), recurate_config, run_id, run_name="recurate")
            outputs["recurate"] = runs["recurate"].outputs
        else:
            outputs["recurate"] = outputs["curate"]
        runs["rl"] = run_stage(rl, placed("rl"), _stage_config(RLConfig, config.rl, outputs, model=sft_checkpoint),
                               run_id)
        outputs["rl"] = runs["rl"].outputs

        checkpoints = {"base": config.model, "sft": sft_checkpoint, "rl": outputs["rl"]["checkpoint"]}
        evaluations = {}
        with ENGINES.scope():  # the three evaluations share one live engine, swapping weights
            for label, checkpoint in checkpoints.items():
                # SFT and RL compare against the base evaluation's own samples, not a fresh draw; the
                # base itself has no baseline (one in the evaluate preset would only sample it twice)
                comparison = {"baseline": None, "baseline_samples": None} if label == "base" else {
                    "baseline": config.model, "baseline_samples": evaluations["base"].outputs["samples"]}
                if label == "sft":  # the k-curve asks whether RL narrowed or expanded: base and RL only
                    comparison["k_curve"] = None
                evaluations[label] = run_stage(evaluate, placed("evaluate"), _stage_config(
                    EvaluateConfig, config.evaluate, outputs, model=checkpoint, **comparison), run_id,
                    run_name=f"evaluate-{label}")
        table = pass_at_1_table(evaluations, config.best_metric)
        results = format_table(table, config.best_metric)
        k_curve = {name: value for name, value in evaluations["rl"].metrics.items() if name.startswith("k_curve/")}
        if config.evaluate.k_curve is not None:
            results += "\n\n### Sharpening or expansion: pass@k up to k = n\n\n" + k_curve_markdown(k_curve, "base", "rl")
        claim_metrics = {}
        if config.claims is not None:
            sets = sorted(headline_scores(table, config.best_metric, "base"))
            checked = check_claims(table, config.best_metric, sets, list(CHECKPOINTS), config.claims)
            results += "\n\n### Claims stated before the run\n\n" + format_claims(checked)
            claim_metrics = {"claims/held": float(sum(c.holds for c in checked)), "claims/checked": float(len(checked))}
        logger.info("\n%s", results)
        publish_markdown(results, f"held-out {config.best_metric} of base, SFT and RL with 95% intervals and deltas")
        publish_table(table_rows(table, config.best_metric),
                      f"held-out {config.best_metric} per eval set: base, SFT, RL, deltas against base (95% intervals)")

        def mean_score(label: str) -> float:
            values = list(headline_scores(table, config.best_metric, label).values())
            return sum(values) / max(len(values), 1)

        best = max(("sft", "rl"), key=mean_score)
        lineage = {
            "checkpoint_uri": checkpoints[best], "stage": best, "pipeline_run_id": run_id,
            "config_hash": config_hash(resolved), "code_version": code_version(),
            **{f"dataset.{name}": uri for name, uri in sorted(outputs["recurate"].items()) if name.startswith("rl_")},
            **{f"dataset.{name}": uri for name, uri in sorted(outputs["curate"].items())
               if name.startswith(("sft_", "eval_"))},
            "selection_metric": f"mean {config.best_metric} over eval sets", "selection_value": mean_score(best),
        }
        version = register_checkpoint(config.registered_model, runs[best].mlflow_run_id, lineage)
        metrics = {**table, **{f"rl/{name}": value for name, value in k_curve.items()}, **claim_metrics,
                   "wall_s": time.perf_counter() - start}
        tracking.log_metrics(metrics, step=0, run_id=run_id)
        tracking.set_tags({"best_checkpoint": checkpoints[best], "registered_model":
                           f"{config.registered_model}/{version}"}, run_id)
        flat_outputs = {f"{stage}.{name}": uri for stage, named in outputs.items() for name, uri in named.items()}
        flat_outputs["best_checkpoint"] = checkpoints[best]
        return run.finish(flat_outputs, metrics)
