"""Prefect tasks of the SFT flow: train one stage, its checkpoints committed through the store.

Checkpoints are artifacts at `checkpoints/sft/<stage key>/<stage name>/step-NNNNNN`, committed
manifest-last from train_stage's on_checkpoint callback (the local copy is then deleted). The
stage key hashes the stage's settings, its dataset refs, the encoded data's fingerprint, the
checkpoint it starts from and the code version, so a rerun of the same stage finds its own
checkpoints and nobody else's: a stage whose final checkpoint exists is skipped, one with an
earlier checkpoint continues from it (train_stage's resume_from). train_stage saves at fixed
steps (every `checkpoint_every` and the last), so "the newest checkpoint" is found by probing
those keys, newest first; the store needs no listing.
"""

from __future__ import annotations

import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.tasks.artifacts.checkpoints import commit_checkpoint, newest_committed, scratch_dir
from passband.tasks.artifacts.provenance import code_version, config_hash
from passband.tasks.artifacts.store import fetch_artifact, open_store
from passband.tasks.reporting.progress import Progress
from passband.training.runtime.config import DistributedConfig
from passband.training.sft.config import StageConfig
from passband.training.sft.packing import SFTExample

CHECKPOINT_ROOT = "checkpoints/sft"
# Per-step metrics sent to MLflow (train_stage reports these and a few more).
LOGGED_METRICS = ("loss", "lr", "grad_norm", "tokens_per_s", "padding_fraction", "num_loss_tokens",
                  "num_tokens", "peak_memory_mb")


@dataclass
class StageOutcome:
    """What one stage left behind, for the flow's outputs and metrics."""

    checkpoint_uri: str  # the stage's final checkpoint
    status: str  # "trained", "resumed" (continued from a checkpoint) or "skipped" (already complete)
    total_steps: int  # the stage's optimizer steps, all runs together
    steps_run: int  # steps run by this call
    final_loss: float
    tokens_per_s: float  # median over this call's steps (nan when skipped)
    peak_memory_mb: float  # process peak after this call's steps (nan when skipped)


def sft_stage_key(stage: StageConfig, dataset_refs: dict[str, str], start_from: str, data_fingerprint: str) -> str:
    """24 hex digits identifying a stage's training: same key, same checkpoints."""
    from passband.tasks.artifacts.model import model_code_versions

    keyed = {"stage": stage.model_dump(mode="json"), "datasets": dataset_refs, "start_from": start_from,
             "data_fingerprint": data_fingerprint, "code_version": code_version()}
    models = model_code_versions({"model": start_from})
    if models:  # a start model with its own code: an edit to it retrains rather than reusing the checkpoints
        keyed["model_code"] = models
    return config_hash(keyed)[:24]


def checkpoint_key(stage_key: str, stage_name: str, step: int) -> str:
    return f"{CHECKPOINT_ROOT}/{stage_key}/{stage_name}/step-{step:06d}"


def saved_steps(total_steps: int, checkpoint_every: int) -> list[int]:
    """Steps at which train_stage saves a checkpoint, newest first."""
    steps = {total_steps}
    if checkpoint_every:
        steps |= set(range(checkpoint_every, total_steps + 1, checkpoint_every))
    return sorted(steps, reverse=True)


def last_committed_step(stage_key: str, stage: StageConfig, total_steps: int) -> int | None:
    """The step of the newest committed checkpoint of this stage key, or None."""
    steps = {checkpoint_key(stage_key, stage.name, step): step for step in saved_steps(total_steps, stage.checkpoint_every)}
    key = newest_committed(steps)
    return None if key is None else steps[key]


@task(name="train-sft-stage", cache_policy=NONE)
def train_sft_stage(
    stage: StageConfig, examples: list[SFTExample], start_dir: str, start_from: str, stage_key: str,
    resume: bool, step_offset: int, run_id: str, distributed: DistributedConfig = DistributedConfig(),
    trust_remote_code: bool = False,
) -> StageOutcome:
    """Train (or skip, or continue) one stage from the checkpoint in `start_dir`.

    Metrics go to MLflow at global step `step_offset + stage step`; tags mark the stage's steps.
    With distributed.launches_ranks the loop runs under torchrun (tasks/steps/sft_torchrun.py) and this process
    logs and commits what rank 0 reports, through the same callbacks. `trust_remote_code`: the model's own
    code allowed (EngineConfig.trust_remote_code).
    """
    from prefect.logging import get_run_logger

    from passband.tasks.reporting import tracking
    from passband.tasks.steps.sft_torchrun import torchrun_stage
    from passband.training.model_source import load_causal_lm, load_tokenizer
    from passband.training.sft import loop
    from passband.training.heap import release_device_memory
    from passband.training.sft.sampler import count_steps

    logger = get_run_logger()
    store = open_store()
    lengths = [len(e.input_ids) for e in examples]
    total_steps = stage.num_steps or count_steps(lengths, stage.batch_tokens, stage.seed, stage.num_epochs)
    tracking.set_tags({f"stage.{stage.name}.start_step": str(step_offset + 1),
               f"stage.{stage.name}.end_step": str(step_offset + total_steps),
               f"stage.{stage.name}.key": stage_key}, run_id)
    last_step = last_committed_step(stage_key, stage, total_steps) if resume else None
    if last_step == total_steps:
        final = store.manifest(checkpoint_key(stage_key, stage.name, total_steps))
        logger.info("stage %s: complete at %s, skipped", stage.name, store.uri(final["key"]))
        tracking.set_tags({f"stage.{stage.name}.status": "skipped"}, run_id)
        return StageOutcome(store.uri(final["key"]), "skipped", total_steps, 0, final["extra"]["loss"],
                            float("nan"), float("nan"))
    resume_from = fetch_artifact(store.uri(checkpoint_key(stage_key, stage.name, last_step))) if last_step else None
    status = "resumed" if resume_from else "trained"
    tracking.set_tags({f"stage.{stage.name}.status": f"resumed from step {last_step}" if last_step else status}, run_id)
    if resume_from:
        logger.info("stage %s: resuming from step %d (%s)", stage.name, last_step, resume_from)

    record = {"steps_run": 0, "tokens_per_s": [], "loss": float("nan"), "peak_memory_mb": float("nan")}
    config = {"stage": stage.model_dump(mode="json"), "start_from": start_from,
              "data_fingerprint": loop.data_fingerprint(examples)}

    progress = Progress(f"sft stage {stage.name} steps", total_steps, "steps")

    def on_metrics(metrics: dict[str, float], step: int) -> None:
        tracking.log_metrics({name: metrics[name] for name in LOGGED_METRICS}, step=step_offset + step, run_id=run_id)
        progress.update(step)
        logger.info("sft %s step %d/%d (global %d): loss %.4f lr %.2e grad_norm %.3f tokens/s %.0f padding %.3f",
                    stage.name, step, total_steps, step_offset + step, metrics["loss"], metrics["lr"],
                    metrics["grad_norm"], metrics["tokens_per_s"], metrics["padding_fraction"])
        record["steps_run"] += 1
        record["tokens_per_s"].append(metrics["tokens_per_s"])
        record["loss"], record["peak_memory_mb"] = metrics["loss"], metrics["peak_memory_mb"]

    def on_checkpoint(path: Path, step: int) -> None:
        key = checkpoint_key(stage_key, stage.name, step)
        extra = {"stage": stage.name, "step": step, "total_steps": total_steps, "loss": record["loss"]}
        commit_checkpoint(str(path), key, "sft", config, extra)
        logger.info("stage %s: checkpoint step %d committed at %s", stage.name, step, store.uri(key))
        shutil.rmtree(path)  # committed; the local copy was only scratch

    with scratch_dir("sft-checkpoints-") as scratch:
        if distributed.launches_ranks:
            torchrun_stage(stage, examples, start_dir, resume_from, distributed, scratch, on_metrics, on_checkpoint,
                           trust_remote_code)
        else:
            model = load_causal_lm(Path(start_dir), trust_remote_code=trust_remote_code)
            loop.train_stage(model, load_tokenizer(Path(start_dir), trust_remote_code), examples, stage, scratch,
                             resume_from=resume_from, on_metrics=on_metrics, on_checkpoint=on_checkpoint)
            del model  # with the loop's AdamW and graph gone too, the cache goes back to the driver for the
            release_device_memory()  # engine that follows (an evaluation; vLLM refuses below its memory_fraction)
    return StageOutcome(store.uri(checkpoint_key(stage_key, stage.name, total_steps)), status, total_steps,
                        record["steps_run"], record["loss"], statistics.median(record["tokens_per_s"]),
                        record["peak_memory_mb"])
