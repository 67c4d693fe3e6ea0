"""The parts of the `rl` flow's loop, each owning its schedule (torchtitan's `should_save(step)`,
`should_evaluate(step)`): one outer iteration, the held-out evaluator, the checkpointer and the
early stop. The flow (flows/rl/flow.py) composes them; the rules of when are `training/rl/schedule.py`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from passband.flows.rl.config import DriftConfig, EarlyStopConfig, RLConfig
from passband.tasks.rollouts.settings import iteration_seed
from passband.training.rl.schedule import RLSchedule

if TYPE_CHECKING:  # torch-backed: imported where the flow runs, so `passband config rl` loads no torch
    from passband.tasks.rollouts.ahead import RolloutsAhead
    from passband.tasks.rollouts.collect import Rollouts
    from passband.training.engines import RolloutEngine
    from passband.training.rl.monitoring.timeline import Span
    from passband.training.rl.trainer import PolicyTrainer, RLState


def schedule_of(config: RLConfig) -> RLSchedule:
    return RLSchedule(num_iterations=config.num_iterations, eval_every=None if config.eval is None else config.eval_every,
                      checkpoint_every=config.checkpoint_every, max_iterations_this_run=config.max_iterations_this_run)


def run_iteration(config: RLConfig, trainer: PolicyTrainer, engine: RolloutEngine,
                  problems: dict[str, list[dict]],
                  iteration: int, judges: dict[str, Any] | None = None,
                  run_id: str | None = None, ahead: RolloutsAhead | None = None,
                  rollout_log: RolloutLog | None = None) -> dict[str, float]:
    """Outer iteration `iteration` (1-based): draw, roll out, score, update, push the weights; its
    metrics. Advances trainer.state's iteration and prompt cursor. With `judges`, their texts of
    this iteration's rollouts are logged to `run_id` as judge/iter-NNNNNN.jsonl. With `ahead`
    (rollout.max_off_policy_steps >= 1) the rollouts come from its thread, which keeps sampling
    the next ones during the update, and the update is published for it rather than loaded. With
    `rollout_log`, the iteration's rollouts are kept (RolloutLog)."""
    from passband.tasks.host.memory import PhasePeaks, cuda_peaks, resident_gb
    from passband.training.rl.monitoring.rollout_metrics import zero_variance_fractions
    from passband.training.rl.monitoring.timeline import Span

    start = time.perf_counter()
    # this process's peak RSS per phase (with an in-process engine, both), and its GPU's where it has one
    peaks = PhasePeaks(cuda_peaks())
    with peaks.phase("rollout"):
        rollouts = _take_rollouts(config, trainer, engine, problems, iteration, judges, ahead)
    wait_s = time.perf_counter() - start  # ahead: only what the rollout thread had not finished during the update
    batch = rollouts.batch
    with peaks.phase("training"):
        train_start = time.time()
        metrics = trainer.update(batch, iteration_seed(config.seed, iteration), iteration)
        train_end = time.time()
    with peaks.phase("weight_sync"):
        sync, published = _sync_weights(config, trainer, engine, iteration, ahead)
    trainer.state.timeline += [*rollouts.spans, *(ahead.engine.take_loads() if ahead else []),
                               Span("trainer", "training", train_start, train_end), sync]
    train_s, sync_s = train_end - train_start, sync.seconds

    if rollouts.judged:
        from passband.tasks.steps.judge import log_judge_samples

        log_judge_samples(rollouts.judged, f"iter-{iteration:06d}", run_id)
    if rollout_log is not None:
        metrics |= rollout_log.keep(iteration, rollouts)
    metrics |= zero_variance_fractions(batch) | rollouts.metrics
    metrics |= _version_metrics(iteration, rollouts, metrics["vllm_kl"], wait_s, ahead is not None)
    if published is not None:  # what one weight version weighs: full weights, merged LoRA, or the adapter alone
        metrics["weights/version_mb"] = sum(f.stat().st_size for f in published.iterdir()) / 2**20
    metrics |= peaks.metrics()
    metrics |= {f"memory/resident_{kind}_gb": gb for kind, gb in resident_gb().items()}  # what stays held
    metrics |= {"seconds/rollout": rollouts.rollout_s, "seconds/scoring": rollouts.scoring_s, "seconds/training": train_s,
                "seconds/weight_sync": sync_s, "seconds/rollout_wait": wait_s, "seconds/iteration": time.perf_counter() - start}
    trainer.state.iteration, trainer.state.consumed = iteration, rollouts.consumed
    trainer.state.carried = rollouts.carried  # partial rollouts: what the next iteration continues
    trainer.state.prompt_ids = [group.row["id"] for group in rollouts.groups]
    return metrics


def _sync_weights(config: RLConfig, trainer: PolicyTrainer, engine: RolloutEngine, iteration: int,
                  ahead: RolloutsAhead | None) -> tuple[Span, Path | None]:
    """The update's weights to the rollouts (`PolicyTrainer.hand_over`): published as a version for the
    thread ahead, or into the engine, woken first (asleep since the rollouts); the trainer's span of it and
    the version folder this process published (None: it published none)."""
    from passband.training.rl.monitoring.timeline import Span

    start = time.time()
    if ahead is None:
        trainer.release()  # the update's cached blocks back to the driver, which the waking engine allocates from
        engine.wake()  # asleep since the rollouts (sleep mode): the weights come back to take the update
    published = trainer.hand_over(engine, iteration, ahead is not None)
    return Span("trainer", "weight_publish" if ahead is not None else "weight_sync", start, time.time()), published


def _take_rollouts(config: RLConfig, trainer: PolicyTrainer, engine: RolloutEngine, problems: dict[str, list[dict]],
                   iteration: int, judges: dict[str, Any] | None, ahead: RolloutsAhead | None) -> Rollouts:
    """The iteration's rollouts: from the thread ahead, or sampled now by the engine, which then
    drops its packed weights until the sync rebuilds them (they would only sit beside the trainer)
    and, with sleep mode on (CUDA), sleeps until the sync: the update has the GPU to itself."""
    from passband.tasks.rollouts.collect import collect_rollouts

    if ahead is not None:
        return ahead.take(iteration)
    # the engine holds the weights the trainer starts from: v<iteration - 1>
    settings = config.rollout_settings()
    if settings.partial is not None:
        from passband.tasks.rollouts.partial import collect_partial

        rollouts = collect_partial(settings, trainer.tokenizer, engine, problems, trainer.state.consumed,
                                   trainer.state.carried, iteration, iteration_seed(config.seed, iteration),
                                   iteration - 1, judges)
    else:
        rollouts = collect_rollouts(settings, trainer.tokenizer, engine, problems, trainer.state.consumed,
                                    iteration, iteration_seed(config.seed, iteration), iteration - 1, judges)
    engine.release_weights()
    engine.sleep()
    return rollouts


def _version_metrics(iteration: int, rollouts: Rollouts, vllm_kl: float, wait_s: float,
                     ahead: bool) -> dict[str, float]:
    """The batch's weight version, its lag, vllm_kl under the series of that lag, and the share of
    its sampling and scoring that ran hidden behind earlier updates (0 in the synchronous loop).
    Every row of a batch has the same version (a fixed lag), so its lag is the mean and the max."""
    from passband.training.rl.batches.staleness import off_policy_steps

    collect_s = rollouts.rollout_s + rollouts.scoring_s
    overlap = max(0.0, 1.0 - wait_s / max(collect_s, 1e-9)) if ahead else 0.0
    lag = off_policy_steps(iteration, rollouts.weight_version)
    return {"rollout/weight_version": float(rollouts.weight_version), "rollout/off_policy_steps": float(lag),
            f"vllm_kl_by_lag/{lag}": vllm_kl, "rollout/overlap_share": overlap}


def iteration_line(iteration: int, metrics: dict[str, float], tasks: list[str]) -> str:
    """The log line of one iteration: per-task reward and pass rate, mismatch, entropy, seconds."""
    per_task = " ".join(f"{t}: r={metrics.get(f'{t}/reward', float('nan')):.2f} "
                        f"pass={metrics.get(f'{t}/pass_rate', float('nan')):.2f}" for t in tasks)
    return (f"rl iteration {iteration}: {per_task} | vllm_kl {metrics['vllm_kl']:.2e} entropy "
            f"{metrics['entropy']:.3f} grad_norm {metrics.get('grad_norm', float('nan')):.3f} | s: rollout "
            f"{metrics['seconds/rollout']:.1f} scoring {metrics['seconds/scoring']:.1f} training "
            f"{metrics['seconds/training']:.1f} sync {metrics['seconds/weight_sync']:.1f}")


@dataclass
class Evaluator:
    """The held-out sets scored by the rollout engine's current weights (the same seed at every
    point): before training, on the schedule, after the last iteration; tracks the best checkpoint."""

    config: RLConfig
    schedule: RLSchedule
    engine: Any
    """The rollout engine, or the VersionedEngine it shares with the rollout thread."""
    eval_sets: dict[str, list[dict]]
    model_dir: str
    run_id: str
    checkpoint_uri: Callable[[int], str]
    logger: Any
    judges: dict[str, Any] | None = None
    """Task -> training.judge Judge of `eval.judges`, scoring those tasks' held-out samples (None:
    every task's verifier)."""

    def should_evaluate(self, iteration: int) -> bool:
        return self.schedule.should_evaluate(iteration)

    def baseline(self, state: RLState) -> None:
        """`before/*` into the run's metrics, once, before the first iteration."""
        if self.schedule.should_evaluate_before(state.iteration):
            state.metrics |= {f"before/{k}": v for k, v in self._headline("before", 0, state).items()}

    def evaluate(self, iteration: int, state: RLState) -> dict[str, float]:
        """`eval/*` (and `after/*` at the last iteration), seconds/eval; updates state.best."""
        from passband.training.rl.trainer import BestCheckpoint

        start = time.perf_counter()
        headline = self._headline(f"iter-{iteration:06d}", iteration, state)
        metrics = {f"eval/{k}": v for k, v in headline.items()}
        if self.schedule.is_last(iteration):
            metrics |= {f"after/{k}": v for k, v in headline.items()}
        best_metric = self.config.best_metric
        if state.best is None or headline[best_metric] > state.best.value:
            state.best = BestCheckpoint(best_metric, headline[best_metric], iteration, self.checkpoint_uri(iteration))
        metrics["seconds/eval"] = time.perf_counter() - start
        return metrics

    def _headline(self, label: str, step: int, state: RLState) -> dict[str, float]:
        from passband.tasks.rollouts.ahead import VersionedEngine
        from passband.tasks.steps.evaluation import log_evaluation, run_evaluation
        from passband.training.episodes.setups import episode_setups
        from passband.training.rl.monitoring.timeline import Span

        # shared with the rollout thread (max_off_policy_steps >= 1): borrowed, at the weights of `step`
        versioned = isinstance(self.engine, VersionedEngine)
        with self.engine.at(step, "evaluator") if versioned else nullcontext(self.engine) as engine:
            start = time.time()
            evaluation = run_evaluation(engine, self.eval_sets, self.config.eval.sampling, self.config.eval.verifiers,
                                        self.model_dir, self.config.system_prompt, self.judges,
                                        episode_setups(self.config.math_tool, self.config.code_feedback,
                                                       self.config.eval.verifiers, self.config.environments),
                                        self.config.engine.trust_remote_code)
        state.timeline += [*(self.engine.take_loads("evaluator") if versioned else []),
                           Span("evaluator", "eval", start, time.time())]
        headline = log_evaluation(evaluation, label, step, self.run_id)
        self.logger.info("rl eval %s: %s", label, {k: round(v, 3) for k, v in headline.items()})
        return headline


@dataclass
class Checkpointer:
    """Commits the trainer (weights, optimizer, RNG, RLState) under this config's checkpoint root."""

    schedule: RLSchedule
    trainer: Any
    run_key: str
    resolved: dict[str, Any]
    done_before_run: int
    """Iterations completed when this process started (its last iteration depends on it)."""
    ahead: RolloutsAhead | None = None
    """The rollout thread (max_off_policy_steps >= 1): the checkpoint keeps what it has queued."""

    def should_save(self, iteration: int, stopped_early: bool) -> bool:
        return self.schedule.should_save(iteration, self.done_before_run, stopped_early)

    def save(self) -> dict[str, float]:
        """The checkpoint; with rollouts ahead, after the queued collections finish, which it keeps
        (the wait is time the next iteration would have waited for them anyway at k = 1)."""
        from passband.tasks.steps.rl import save_rl_checkpoint

        start = time.perf_counter()
        state = self.trainer.state
        state.in_flight = self.ahead.in_flight() if self.ahead else []
        waited = time.perf_counter() - start
        save_rl_checkpoint(self.trainer, self.run_key, self.resolved)
        state.in_flight = []  # kept by the checkpoint alone: the thread still holds them as its futures
        return {"seconds/checkpoint": time.perf_counter() - start, "seconds/checkpoint_rollout_wait": waited}


@dataclass
class RolloutLog:
    """Keeps each iteration's rollouts in the run's rollouts artifact (tasks/steps/rollouts_log.py),
    names it in the MLflow tag `rollouts_uri`, and shows a sample (best, worst and a few at random per
    task) as a Prefect markdown artifact."""

    config: RLConfig
    run_key: str
    run_id: str
    resolved: dict[str, Any]

    def keep(self, iteration: int, rollouts: Rollouts) -> dict[str, float]:
        """`seconds/keep_rollouts` and `keep_rollouts/bytes` (the iteration's Parquet part); {} when off."""
        if not self.config.keep_rollouts.enabled:
            return {}
        from passband.tasks.reporting import tracking
        from passband.tasks.reporting.prefect_artifacts import publish_markdown
        from passband.tasks.steps.rollouts_log import ROLLOUTS_TAG, keep_rollouts
        from passband.training.rl.monitoring.rollout_records import iteration_sample, rollout_records, sample_markdown

        start = time.perf_counter()
        groups = rollouts.groups
        records = rollout_records(iteration, rollouts.weight_version, [g.row for g in groups], [g.samples for g in groups],
                                  [g.scores for g in groups], [g.statuses for g in groups], [g.details for g in groups],
                                  rollouts.batch.rewards, rollouts.batch.valid, self.config.algo.scale_by_std,
                                  self.config.algo.eps)
        uri, size = keep_rollouts(records, self.run_key, iteration, self.resolved)
        tracking.set_tags({ROLLOUTS_TAG: uri}, self.run_id)
        sample = iteration_sample(records, self.config.keep_rollouts.num_random,
                                  iteration_seed(self.config.seed, iteration))
        publish_markdown(sample_markdown(iteration, sample), f"rl: rollouts of iteration {iteration} (a sample)")
        return {"seconds/keep_rollouts": time.perf_counter() - start, "keep_rollouts/bytes": float(size)}


@dataclass
class EarlyStop:
    """The entropy ceiling (docs/recipe.md section 7): fit the run's (entropy, reward) history each
    iteration, log the fit, and set state.stopped_early when the signal fires and it is enabled."""

    config: EarlyStopConfig
    logger: Any

    def observe(self, state: RLState, metrics: dict[str, float]) -> dict[str, float]:
        from passband.training.rl.monitoring.entropy_ceiling import observe_entropy_reward

        stop, fit = observe_entropy_reward(state.entropy_reward, metrics["entropy"], metrics[self.config.reward_metric],
                                           self.config.margin, self.config.patience)
        state.stopped_early = self.config.enabled and stop
        if state.stopped_early:
            self.logger.info("rl: early stop after iteration %d: reward %.3f within %.3f of the predicted ceiling "
                             "%.3f while entropy fell", state.iteration, metrics[self.config.reward_metric],
                             self.config.margin, fit["entropy_ceiling/ceiling"])
        return fit


@dataclass
class DriftWatch:
    """Drift alerts (training/rl/monitoring/drift.py): keep each iteration's watched series in the state, and on each new
    alert warn, tag the MLflow run `drift_alert` and publish a markdown artifact; stop when the config says so."""

    config: DriftConfig
    logger: Any
    run_id: str

    def observe(self, state: RLState, metrics: dict[str, float]) -> dict[str, float]:
        from passband.tasks.reporting import tracking
        from passband.tasks.reporting.prefect_artifacts import publish_markdown
        from passband.training.rl.monitoring.drift import drift_alerts, drift_series

        state.drift_history.append(drift_series(metrics))
        alerts = drift_alerts(state.drift_history, self.config.baseline_iterations, self.config.frac_margin,
                              self.config.length_margin, self.config.window)
        if alerts:
            lines = [f"{a.series} {a.latest:.3g} > {a.threshold:.3g} (baseline {a.baseline:.3g})" for a in alerts]
            self.logger.warning("rl: drift at iteration %d: %s", state.iteration, "; ".join(lines))
            tracking.set_tags({"drift_alert": f"iteration {state.iteration}: {'; '.join(lines)}"}, self.run_id)
            publish_markdown("\n".join([f"# Drift at iteration {state.iteration}", "",
                                         "| series | latest | threshold | baseline |", "|---|---|---|---|",
                                         *(f"| {a.series} | {a.latest:.4g} | {a.threshold:.4g} | {a.baseline:.4g} |"
                                           for a in alerts)]), f"rl: drift at iteration {state.iteration}")
            state.stopped_early = state.stopped_early or self.config.stop_run
        return {"drift/num_alerts": float(len(alerts))}
