"""The `rl` flow: multi-task RL with verifier rewards (docs/recipe.md sections 4-7).

One outer iteration: draw a task-mixed prompt batch from the seeded cursor, render it with the
chat template, sample G rollouts per prompt with the engine (its log-probs recorded), score them
with each task's verifier (unparsable or truncated rollouts are masked out of the gradient and
counted), take algo.num_inner_steps optimizer steps on that fixed batch (training.rl.update),
then push the new weights into the engine in place. Checkpoints (weights, optimizer, RNG, the
prompt cursor) are committed every `checkpoint_every` iterations, and a rerun of the same config
continues from the newest one without replaying or skipping prompts. The held-out sets are
scored by the same engine before the first iteration, every `eval_every` iterations and after
the last; the checkpoint with the best `best_metric` is the `best_checkpoint` output.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import flow

from passband.flows.rl.config import RUN_CONTROL_FIELDS, RewardConfig, RLConfig
from passband.flows.rl.loop import (Checkpointer, DriftWatch, EarlyStop, Evaluator, RolloutLog, iteration_line,
                                    run_iteration, schedule_of)
from passband.tasks.stages.summary import RunSummary
from passband.training.engines import EngineConfig

if TYPE_CHECKING:  # torch-backed: imported where the flow runs, so `passband config rl` loads no torch
    from passband.tasks.stages.stage import StageRun
    from passband.training.rl.trainer import PolicyTrainer, RLState

__all__ = ["RLConfig", "RewardConfig", "rl"]


@flow(name="rl", flow_run_name="rl")
def rl(config: RLConfig = RLConfig(), parent_run_id: str | None = None) -> RunSummary:
    """Multi-task RL; outputs the final `checkpoint` and the `best_checkpoint` by best_metric."""
    from prefect.logging import get_run_logger

    from passband.tasks.artifacts.checkpoints import scratch_dir
    from passband.tasks.reporting.progress import Progress
    from passband.tasks.steps.judge import opened_judges
    from passband.tasks.steps.rl import checkpoint_uri
    from passband.tasks.stages.stage import run_in_stage

    logger = get_run_logger()
    started = time.perf_counter()

    def work(run: StageRun) -> RunSummary:
        # 1. Problems, held-out sets, the trainer (resumed from this config's newest checkpoint; in this
        # process, or torchrun ranks when distributed.launches_ranks), the engine.
        model_dir, eval_sets, problems = _load_data(config, run.run_id, logger)
        # A task's judge model (if any; the rollouts' and the held-out sets') runs on its own
        # engine for the loop's whole life.
        with (scratch_dir("rl-sync-") as scratch,
              _trainer(config, run.config_id, model_dir, problems, scratch, logger) as trainer,
              opened_judges(config.reward.judges) as judges,
              opened_judges(config.eval.judges if config.eval else {}) as eval_judges,
              ExitStack() as stack):
            engine = _open_engine(config, model_dir, problems, trainer)
            schedule, state = schedule_of(config), trainer.state
            ahead = stack.enter_context(_rollouts_ahead(config, trainer, engine, problems, judges))
            evaluator = Evaluator(config, schedule, ahead.engine if ahead else engine, eval_sets, model_dir, run.run_id,
                                  lambda iteration: checkpoint_uri(run.config_id, iteration), logger, eval_judges)
            checkpointer = Checkpointer(schedule, trainer, run.config_id, run.resolved, state.iteration, ahead)
            early_stop = EarlyStop(config.early_stop, logger)
            drift = DriftWatch(config.drift, logger, run.run_id)
            rollout_log = RolloutLog(config, run.config_id, run.run_id, run.resolved)

            # 2. The loop: the recipe; each part knows when it is due.
            evaluator.baseline(state)
            progress = Progress(f"rl iterations (of {config.num_iterations})", config.num_iterations, "iterations")
            for iteration in schedule.iterations(state.iteration):
                metrics = run_iteration(config, trainer, engine, problems, iteration, judges, run.run_id, ahead,
                                        rollout_log)
                logger.info(iteration_line(iteration, metrics, sorted(problems)))
                if evaluator.should_evaluate(iteration):
                    metrics |= evaluator.evaluate(iteration, state)
                metrics |= early_stop.observe(state, metrics)
                metrics |= drift.observe(state, metrics)
                state.metrics |= metrics  # before the checkpoint: the saved state holds this iteration
                if checkpointer.should_save(iteration, state.stopped_early):
                    metrics |= checkpointer.save()
                _record(state, metrics, iteration, run.run_id)
                progress.update(iteration)
                if state.stopped_early:
                    break
            stack.close()  # the rollout thread stops before its engine does
            engine.close()

        # 3. Outputs: the final and the best checkpoint.
        return _finish(config, run, state, sorted(problems), time.perf_counter() - started, logger)

    return run_in_stage("rl", config, work, parent_run_id, run_control=RUN_CONTROL_FIELDS, system_metrics=True)


def _load_data(config: RLConfig, run_id: str, logger: Any) -> tuple[str, dict[str, list[dict]], dict[str, list[dict]]]:
    """(model dir, eval sets, training problems per task): training rows that ask a held-out
    question are dropped; an empty dataset is left out with a warning."""
    from passband.curation.hygiene import held_out_keys
    from passband.tasks.reporting import tracking
    from passband.tasks.artifacts.datasets import read_table
    from passband.tasks.steps.evaluation import eval_sets_from
    from passband.tasks.artifacts.model import resolve_model
    from passband.tasks.steps.rl import load_rl_problems

    model_dir = resolve_model(config.model)
    eval_sets: dict[str, list[dict]] = {}
    if config.eval is not None:
        eval_sets = eval_sets_from(config.eval.datasets, config.eval.suites, run_id=run_id)
    held_out = held_out_keys([row["prompt"] for rows in eval_sets.values() for row in rows])
    problems, dropped, empty = load_rl_problems(config.datasets, held_out, run_id)
    for line in empty:
        logger.warning("rl: %s has no rows; training on the other tasks", line)
    logger.info("rl problems per task: %s (dropped as eval prompts: %s)",
                {t: len(rows) for t, rows in problems.items()}, dropped)
    for task, ref in config.datasets.items():
        if isinstance(ref, str):
            tracking.log_dataset(ref, f"rl_{task}", "training", read_table(ref), run_id)
    return model_dir, eval_sets, problems


@contextmanager
def _trainer(config: RLConfig, run_key: str, model_dir: str, problems: dict[str, list[dict]], scratch: Path,
             logger: Any) -> Iterator[Any]:
    """The trainer, resumed from this config's newest checkpoint when `resume`: in this process, or
    the torchrun ranks serving it (their files under `scratch`), stopped when the block ends."""
    from passband.tasks.steps.rl import checkpoint_uri, last_checkpoint_iteration, rl_trainer
    from passband.training.rl.batches.staleness import versions_to_keep

    last = last_checkpoint_iteration(run_key, config.num_iterations) if config.resume else None
    resume_uri = checkpoint_uri(run_key, last) if last else None
    if last:
        logger.info("rl: resuming after iteration %d from %s", last, resume_uri)
    if config.distributed.launches_ranks:
        logger.info("rl: the update runs on %d torchrun ranks (FSDP2)", config.distributed.nproc_per_node)
    keep = versions_to_keep(config.rollout.max_off_policy_steps)  # the rollouts ahead read k + 1 versions
    with rl_trainer(model_dir, sorted(problems), config.algo, resume_uri, config.distributed, scratch,
                    config.engine, keep, config.publishes_adapter) as trainer:
        yield trainer


@contextmanager
def _rollouts_ahead(config: RLConfig, trainer: PolicyTrainer, engine: Any, problems: dict[str, list[dict]],
                    judges: dict) -> Iterator[Any]:
    """With rollout.max_off_policy_steps >= 1, the thread that samples ahead of the trainer
    (tasks/rollouts/ahead.py), the start weights published as their version for it (by the torchrun
    ranks, under their root, when they train) and the resumed checkpoint's in-flight rollouts
    queued; else None."""
    if not config.rollout.max_off_policy_steps:
        yield None
        return
    from passband.tasks.rollouts.ahead import RolloutsAhead, VersionedEngine

    # the engine holds the start weights; an evaluation may load them again after a newer version
    state = trainer.state
    trainer.publish(state.iteration)
    ahead = RolloutsAhead(config.rollout_settings(), config.rollout.max_off_policy_steps, trainer.tokenizer,
                          VersionedEngine(engine, trainer.weights_root, state.iteration), problems, judges,
                          state.iteration, config.num_iterations, dict(state.consumed))
    ahead.resume(state.in_flight)  # what the checkpoint sampled ahead is trained on, not sampled anew
    state.in_flight = []
    try:
        yield ahead
    finally:
        ahead.close()


def _open_engine(config: RLConfig, model_dir: str, problems: dict[str, list[dict]], trainer: Any) -> Any:
    """The rollout engine on the trainer's first weights: the flow's own, or the task workers'."""
    from passband.tasks.steps.rollout import open_engine

    engine_config = _engine_config(config, problems, model_dir, trainer.tokenizer)
    # serving adapters, the engine's weights stay the base's; a resumed (or continued) run's adapters are loaded on it
    first_weights = Path(trainer.base_dir) if config.publishes_adapter else Path(trainer.weights_dir)
    if config.rollout.workers == "task_workers":
        from passband.tasks.sampling.rollout_workers import WorkerEngine

        engine = WorkerEngine(config.model, engine_config, first_weights, config.rollout)
    else:
        engine = open_engine(engine_config, first_weights)
    if config.publishes_adapter and Path(trainer.weights_dir) != Path(trainer.base_dir):
        from passband.training.checkpoint import ADAPTER_FOLDER

        engine.load_weights(Path(trainer.weights_dir) / ADAPTER_FOLDER)
    return engine


def _record(state: RLState, metrics: dict[str, float], iteration: int, run_id: str) -> None:
    """The iteration's metrics into the run's summary and MLflow (eval/after series are logged by
    the evaluation itself)."""
    from passband.tasks.reporting import tracking

    state.metrics |= metrics
    tracking.log_metrics({k: v for k, v in metrics.items() if not k.startswith(("eval/", "after/"))},
                         step=iteration, run_id=run_id)


def _finish(config: RLConfig, run: StageRun, state: RLState, tasks: list[str], wall_s: float,
            logger: Any) -> RunSummary:
    """The run's summary: `checkpoint` (final) and `best_checkpoint` (registered in MLflow), or a
    `partial` status when max_iterations_this_run stopped it before the end."""
    from passband.tasks.reporting import tracking
    from passband.tasks.reporting.plots import entropy_ceiling_figure, timeline_figure
    from passband.tasks.reporting.prefect_artifacts import publish_markdown
    from passband.tasks.reporting.registry import log_model
    from passband.tasks.steps.rl import checkpoint_uri
    from passband.training.rl.monitoring.timeline import timeline_markdown

    if len(state.entropy_reward) >= 3:
        tracking.log_figure(entropy_ceiling_figure(state.entropy_reward), "plots/entropy_ceiling.png", run.run_id)
    if state.timeline:  # what each role did when (the rollouts beside the update, with k >= 1)
        tracking.log_figure(timeline_figure(state.timeline), "plots/timeline.png", run.run_id)
        publish_markdown("# RL timeline\n\n" + timeline_markdown(state.timeline), "rl: seconds per role and phase")
    final_uri = checkpoint_uri(run.config_id, state.iteration)
    outputs = {"checkpoint": final_uri, "best_checkpoint": state.best.uri if state.best else final_uri}
    metrics = dict(state.metrics)
    if state.best:
        metrics |= {"best/value": state.best.value, "best/iteration": float(state.best.iteration)}
    metrics["wall_s"] = wall_s
    if state.iteration < config.num_iterations and not state.stopped_early:
        message = (f"stopped after iteration {state.iteration} of {config.num_iterations} "
                   "(max_iterations_this_run); rerun to continue")
        logger.info("rl: %s", message)
        return run.finish(outputs, metrics, status="partial", message=message)
    card = (f"# passband RL checkpoint\n\nMulti-task RL (docs/recipe.md section 4) of `{config.model}` on "
            f"{', '.join(tasks)}, {state.iteration} iterations; the checkpoint with the best "
            f"`{config.best_metric if config.eval else 'final'}`: {outputs['best_checkpoint']}.\n")
    log_model(outputs["best_checkpoint"], run.run_id, card, config.engine.trust_remote_code)
    return run.finish(outputs, metrics)


def _engine_config(config: RLConfig, problems: dict[str, list[dict]], model_dir: str, tokenizer) -> EngineConfig:
    """config.engine, its KV cache "batch" resolved to one rollout batch: P x G sequences of the
    longest training prompt + max_tokens (the RAM it does not reserve is the trainer's), serving
    LoRA adapters of algo.lora's rank when each version is the adapter alone."""
    engine = config.engine
    if config.publishes_adapter:
        engine = engine.model_copy(update={"max_lora_rank": config.algo.lora.rank})
    if engine.kv_cache_gib != "batch":
        return engine
    from passband.training.engines.kv_cache import rollout_kv_cache_gib

    gib = rollout_kv_cache_gib(Path(model_dir), engine.resolved_dtype(), tokenizer,
                               [row["prompt"] for rows in problems.values() for row in rows], config.system_prompt,
                               config.prompts_per_step * config.group_size, config.sampling.max_tokens,
                               engine.max_model_len)
    return engine.model_copy(update={"kv_cache_gib": gib})
