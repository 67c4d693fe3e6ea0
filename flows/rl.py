"""The `rl` flow: multi-task RL with verifier rewards (docs/recipe.md sections 4-7).

One outer iteration: draw a task-mixed prompt batch from the seeded cursor, render it with the
chat template, sample G rollouts per prompt with the engine (its log-probs recorded), score them
with each task's verifier (unparsable or truncated rollouts are masked out of the gradient and
counted), take algo.num_inner_steps optimizer steps on that fixed batch (training.rl.update),
then push the new weights into the engine in place. Checkpoints (weights, optimizer, RNG, the
prompt cursor) are committed every `checkpoint_every` iterations, and a rerun of the same config
continues from the newest one without replaying or skipping prompts. The held-out sets are
scored by the same engine before the first iteration, every `eval.every` iterations and after
the last; the checkpoint with the best `eval.best_metric` is the `best_checkpoint` output.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from prefect import flow

from passband.flows.rl_config import RUN_CONTROL_FIELDS, RewardConfig, RLConfig, RLEvalConfig
from passband.tasks.stages.summary import RunSummary
from passband.training.engines import EngineConfig, RolloutEngine

if TYPE_CHECKING:  # torch-backed: imported where the flow runs, so `passband config rl` loads no torch
    from passband.training.rl.batching import RolloutBatch
    from passband.training.rl.trainer import RLState, RLTrainer

__all__ = ["RLConfig", "RLEvalConfig", "RewardConfig", "rl"]


def _per_task_zero_variance(batch: RolloutBatch) -> dict[str, float]:
    """`{task}/zero_variance_group_frac`: groups whose valid rewards are all equal (no signal)."""
    import torch

    from passband.training.rl.advantages import zero_variance_groups

    rewards = torch.tensor(batch.rewards, dtype=torch.float32)
    zero = zero_variance_groups(rewards, batch.group_size, torch.tensor(batch.valid))
    group_tasks = batch.tasks[:: batch.group_size]
    out = {}
    for task in sorted(set(group_tasks)):
        flags = [bool(z) for z, t in zip(zero, group_tasks) if t == task]
        out[f"{task}/zero_variance_group_frac"] = sum(flags) / len(flags)
    return out


def _iteration(config: RLConfig, trainer: RLTrainer, engine: RolloutEngine, problems: dict[str, list[dict]],
               iteration: int, scratch: Path) -> dict[str, float]:
    """Run outer iteration `iteration` (1-based) and return its metrics; advances trainer.state."""
    import torch

    from passband.tasks.host.memory import PhasePeaks, resident_gb
    from passband.tasks.steps.rl import push_weights, score_rollouts
    from passband.tasks.steps.rollout import generate, rollout_stats
    from passband.training.chat import render_prompt
    from passband.training.rl.batching import build_rollout_batch
    from passband.training.rl.prompt_cursor import draw_prompts
    from passband.training.rl.update import rl_update

    start = time.perf_counter()
    weights = {task: weight for task, weight in config.weights().items() if task in problems}  # empty sets left out
    picks, consumed = draw_prompts({task: len(rows) for task, rows in problems.items()}, weights,
                                   trainer.state.consumed, config.prompts_per_step, config.seed)
    rows = [problems[task][index] for task, index in picks]
    prompts = [render_prompt(trainer.tokenizer, row["prompt"], config.system_prompt) for row in rows]
    # Seeded by the iteration, not by the engine's history: a resumed run draws what the
    # uninterrupted one drew at this iteration.
    peaks = PhasePeaks()  # this process's peak RSS per phase (with an in-process engine, both)
    with peaks.phase("rollout"):
        samples, rollout_s = generate(engine, prompts,
                                      config.sampling.model_copy(update={"seed": _seed(config, iteration)}))
        # until push_weights rebuilds them, the engine's packed weights would only sit beside the trainer
        engine.release_weights()

    with peaks.phase("training"):
        scoring_start = time.perf_counter()
        rewards, valid, status_counts = score_rollouts(rows, samples, config.reward.verifiers)
        batch = build_rollout_batch(samples, rewards, valid, [row["task"] for row in rows],
                                    config.reward.mask_truncated)
        scoring_s = time.perf_counter() - scoring_start

        train_start = time.perf_counter()
        # Clip-Cov's random choice, seeded per iteration so a resumed run makes the same one.
        generator = torch.Generator().manual_seed(_seed(config, iteration))
        metrics = rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, config.algo, generator)
        train_s = time.perf_counter() - train_start

    with peaks.phase("weight_sync"):
        sync_start = time.perf_counter()
        push_weights(trainer.model, engine, scratch)
        sync_s = time.perf_counter() - sync_start

    metrics |= _per_task_zero_variance(batch)
    metrics |= {f"{name.split('/')[0]}/num_{name.split('/')[1]}": float(n) for name, n in status_counts.items()}
    metrics["rollout_tokens_per_s"] = rollout_stats(samples, rollout_s)["tokens_per_s"]
    metrics |= {f"memory/{phase}_peak_gb": gb for phase, gb in peaks.peaks_gb.items()}
    metrics |= {f"memory/resident_{kind}_gb": gb for kind, gb in resident_gb().items()}  # what stays held
    metrics |= {"seconds/rollout": rollout_s, "seconds/scoring": scoring_s, "seconds/training": train_s,
                "seconds/weight_sync": sync_s, "seconds/iteration": time.perf_counter() - start}
    trainer.state.iteration, trainer.state.consumed = iteration, consumed
    trainer.state.prompt_ids = [row["id"] for row in rows]
    return metrics


def _entropy_ceiling(config: RLConfig, state: RLState, metrics: dict[str, float]) -> dict[str, float]:
    """Add this iteration's (entropy, reward) to the history, fit R = -a exp(H) + b on it and
    decide the early stop (docs/recipe.md section 7); the fit's metrics once it has 3 points."""
    from passband.training.rl.entropy_ceiling import fit_entropy_ceiling, should_stop_early

    state.entropy_reward.append((metrics["entropy"], metrics[config.early_stop.reward_metric]))
    entropies = [h for h, _ in state.entropy_reward]
    if len(state.entropy_reward) < 3 or len(set(entropies)) < 2:
        return {}
    fit = fit_entropy_ceiling(entropies, [r for _, r in state.entropy_reward])
    stop = should_stop_early(state.entropy_reward, config.early_stop.margin, config.early_stop.patience)
    state.stopped_early = config.early_stop.enabled and stop
    return {"entropy_ceiling/a": fit.a, "entropy_ceiling/b": fit.b, "entropy_ceiling/ceiling": fit.ceiling,
            "entropy_ceiling/r2": fit.r2, "entropy_ceiling/stop_signal": float(stop)}


def _engine_config(config: RLConfig, problems: dict[str, list[dict]], model_dir: str, tokenizer) -> EngineConfig:
    """config.engine, its KV cache "batch" resolved to one rollout batch: P x G sequences of the
    longest training prompt + max_tokens (the RAM it does not reserve is the trainer's)."""
    if config.engine.kv_cache_gib != "batch":
        return config.engine
    from passband.training.engines.kv_cache import rollout_kv_cache_gib

    gib = rollout_kv_cache_gib(Path(model_dir), config.engine.dtype, tokenizer,
                               [row["prompt"] for rows in problems.values() for row in rows], config.system_prompt,
                               config.prompts_per_step * config.group_size, config.sampling.max_tokens,
                               config.engine.max_model_len)
    return config.engine.model_copy(update={"kv_cache_gib": gib})


def _seed(config: RLConfig, iteration: int) -> int:
    """The seed of iteration `iteration`'s rollouts and Clip-Cov choice."""
    return config.seed * 1_000_003 + iteration


def _log_line(iteration: int, metrics: dict[str, float], tasks: list[str]) -> str:
    per_task = " ".join(f"{t}: r={metrics.get(f'{t}/reward', float('nan')):.2f} "
                        f"pass={metrics.get(f'{t}/pass_rate', float('nan')):.2f}" for t in tasks)
    return (f"rl iteration {iteration}: {per_task} | vllm_kl {metrics['vllm_kl']:.2e} entropy "
            f"{metrics['entropy']:.3f} grad_norm {metrics.get('grad_norm', float('nan')):.3f} | s: rollout "
            f"{metrics['seconds/rollout']:.1f} scoring {metrics['seconds/scoring']:.1f} training "
            f"{metrics['seconds/training']:.1f} sync {metrics['seconds/weight_sync']:.1f}")


@flow(name="rl", flow_run_name="rl")
def rl(config: RLConfig = RLConfig(), parent_run_id: str | None = None) -> RunSummary:
    """Multi-task RL; outputs the final `checkpoint` and the `best_checkpoint` by eval.best_metric."""
    from prefect.logging import get_run_logger

    from passband.tasks.artifacts.checkpoints import scratch_dir
    from passband.tasks.artifacts.datasets import read_table
    from passband.tasks.artifacts.model import resolve_model
    from passband.tasks.reporting import tracking
    from passband.tasks.reporting.plots import entropy_ceiling_figure
    from passband.tasks.reporting.progress import Progress
    from passband.tasks.reporting.registry import log_model
    from passband.tasks.steps.evaluation import eval_sets_from, log_evaluation, run_evaluation
    from passband.tasks.steps.rl import (checkpoint_uri, last_checkpoint_iteration, load_rl_problems, open_rl_trainer,
                                         prompt_key, save_rl_checkpoint)
    from passband.tasks.stages.stage import stage_run
    from passband.tasks.steps.rollout import open_engine
    from passband.training.rl.trainer import BestCheckpoint

    logger = get_run_logger()
    started = time.perf_counter()
    with stage_run("rl", config, parent_run_id, run_control=RUN_CONTROL_FIELDS, system_metrics=True) as run:
        if run.cached is not None:
            logger.info("reusing the completed rl run %s", run.cached.mlflow_run_id)
            return run.cached
        run_id, run_key = run.run_id, run.cache_key.rsplit("/", 1)[1]  # the key names this config's checkpoints

        # 1. Problems, held-out sets, the trainer (resumed from this config's newest checkpoint).
        model_dir = resolve_model(config.model)
        eval_sets: dict[str, list[dict]] = {}
        if config.eval is not None:
            eval_sets = eval_sets_from(config.eval.datasets, config.eval.suites, run_id=run_id)
        eval_prompts = {prompt_key(row["prompt"]) for rows in eval_sets.values() for row in rows}
        problems, dropped, empty = load_rl_problems(config.datasets, eval_prompts, run_id)
        for line in empty:
            logger.warning("rl: %s has no rows; training on the other tasks", line)
        logger.info("rl problems per task: %s (dropped as eval prompts: %s)",
                    {t: len(rows) for t, rows in problems.items()}, dropped)
        for task, ref in config.datasets.items():
            if isinstance(ref, str):
                tracking.log_dataset(ref, f"rl_{task}", "training", read_table(ref), run_id)
        last = last_checkpoint_iteration(run_key, config.num_iterations) if config.resume else None
        trainer = open_rl_trainer(model_dir, sorted(problems), config.algo, checkpoint_uri(run_key, last) if last else None)
        state = trainer.state
        if last:
            logger.info("rl: resuming after iteration %d from %s", last, checkpoint_uri(run_key, last))
        engine = open_engine(_engine_config(config, problems, model_dir, trainer.tokenizer), trainer.weights_dir)

        def evaluate(label: str, step: int) -> dict[str, float]:
            """The engine's current weights on the held-out sets (the same seed at every checkpoint)."""
            evaluation = run_evaluation(engine, eval_sets, config.eval.sampling, config.reward.verifiers, model_dir,
                                        config.system_prompt)
            headline = evaluation.headline()
            log_evaluation(evaluation, "eval", step, run_id)
            logger.info("rl eval %s: %s", label, {k: round(v, 3) for k, v in headline.items()})
            return headline

        # 2. The loop: evaluate before, iterate, evaluate and checkpoint on schedule.
        if config.eval is not None and state.iteration == 0:
            state.metrics |= {f"before/{k}": v for k, v in evaluate("before", 0).items()}
        stop_at = config.num_iterations
        if config.max_iterations_this_run is not None:
            stop_at = min(stop_at, state.iteration + config.max_iterations_this_run)
        progress = Progress(f"rl iterations (of {config.num_iterations})", config.num_iterations, "iterations")
        with scratch_dir("rl-sync-") as scratch:
            for iteration in range(state.iteration + 1, stop_at + 1):
                step_metrics = _iteration(config, trainer, engine, problems, iteration, scratch)
                logger.info(_log_line(iteration, step_metrics, sorted(problems)))
                eval_due = config.eval is not None and (
                    iteration == config.num_iterations or (config.eval.every and iteration % config.eval.every == 0))
                if eval_due:
                    eval_start = time.perf_counter()
                    headline = evaluate(f"iter-{iteration:06d}", iteration)
                    step_metrics |= {f"eval/{k}": v for k, v in headline.items()}
                    if iteration == config.num_iterations:
                        step_metrics |= {f"after/{k}": v for k, v in headline.items()}
                    value = headline[config.eval.best_metric]
                    if state.best is None or value > state.best.value:
                        state.best = BestCheckpoint(config.eval.best_metric, value, iteration,
                                                    checkpoint_uri(run_key, iteration))
                    step_metrics["seconds/eval"] = time.perf_counter() - eval_start
                step_metrics |= _entropy_ceiling(config, state, step_metrics)
                state.metrics |= step_metrics
                if state.stopped_early:
                    logger.info("rl: early stop after iteration %d: reward %.3f within %.3f of the predicted ceiling "
                                "%.3f while entropy fell", iteration, step_metrics[config.early_stop.reward_metric],
                                config.early_stop.margin, step_metrics["entropy_ceiling/ceiling"])
                if (eval_due or iteration == stop_at or state.stopped_early
                        or (config.checkpoint_every and iteration % config.checkpoint_every == 0)):
                    checkpoint_start = time.perf_counter()
                    save_rl_checkpoint(trainer, run_key, run.resolved)
                    step_metrics["seconds/checkpoint"] = time.perf_counter() - checkpoint_start
                state.metrics |= step_metrics
                tracking.log_metrics({k: v for k, v in step_metrics.items() if not k.startswith(("eval/", "after/"))},
                                     step=iteration, run_id=run_id)
                progress.update(iteration)
                if state.stopped_early:
                    break
        engine.close()
        if len(state.entropy_reward) >= 3:
            tracking.log_figure(entropy_ceiling_figure(state.entropy_reward), "plots/entropy_ceiling.png", run_id)

        # 3. Outputs: the final and the best checkpoint.
        final_uri = checkpoint_uri(run_key, state.iteration)
        outputs = {"checkpoint": final_uri, "best_checkpoint": state.best.uri if state.best else final_uri}
        metrics = dict(state.metrics)
        if state.best:
            metrics |= {"best/value": state.best.value, "best/iteration": float(state.best.iteration)}
        metrics["wall_s"] = time.perf_counter() - started
        if state.iteration < config.num_iterations and not state.stopped_early:
            message = (f"stopped after iteration {state.iteration} of {config.num_iterations} "
                       "(max_iterations_this_run); rerun to continue")
            logger.info("rl: %s", message)
            return run.finish(outputs, metrics, status="partial", message=message)
        card = (f"# passband RL checkpoint\n\nMulti-task RL (docs/recipe.md section 4) of `{config.model}` on "
                f"{', '.join(sorted(problems))}, {state.iteration} iterations; the checkpoint with the best "
                f"`{config.eval.best_metric if config.eval else 'final'}`: {outputs['best_checkpoint']}.\n")
        log_model(outputs["best_checkpoint"], run_id, card)
        return run.finish(outputs, metrics)
