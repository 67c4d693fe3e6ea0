"""Prefect tasks and I/O of the RL flow: problems in, verifier scores, weight sync, checkpoints.

Checkpoints are artifacts at `checkpoints/rl/<run key>/iter-NNNNNN` (save_checkpoint into a
scratch dir, committed manifest-last, the scratch copy deleted). The run key hashes the resolved
config (minus run-control fields) and the code version, so a rerun of the same config finds its
own checkpoints and nobody else's; the newest is found by probing iterations newest first.
trainer_state.json of each checkpoint holds the trainer's RLState (training/rl/trainer.py).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.curation.catalog import VerifierSettings
from passband.curation.hygiene import asks_held_out
from passband.curation.suites.source import ProblemSource
from passband.tasks.artifacts.checkpoints import commit_checkpoint, newest_committed, scratch_dir
from passband.tasks.artifacts.model import lora_adapter_base
from passband.tasks.artifacts.store import fetch_artifact, open_store
from passband.tasks.steps.rl_torchrun import trainer_ranks
from passband.training.engines.config import EngineConfig
from passband.training.engines.protocol import RolloutEngine, Sample
from passband.training.judge.judge import Judge
from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.trainer import (PolicyTrainer, RLState, RLTrainer, close_trainer, open_trainer,
                                          release_for_engine, save_trainer)
from passband.training.runtime.config import DistributedConfig
from passband.training.weights.versions import load_version, publish_version

CHECKPOINT_ROOT = "checkpoints/rl"
SCORED_STATUSES = ("pass", "fail", "timeout")
"""Verifier statuses that are a verdict on the output (reward = score). `unparsable` (no answer to
judge) and `error` (the verifier itself failed) are masked out of the gradient instead."""


class EmptyTrainingSet(ValueError):
    """Every RL dataset is empty: there is nothing to train on."""


def load_rl_problems(
    datasets: dict[str, str | ProblemSource], held_out: frozenset[str], run_id: str | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int], list[str]]:
    """(task -> rows, task -> rows dropped because they ask a held-out question (`held_out`:
    curation.hygiene.held_out_keys of the eval prompts), why each empty dataset was left out).

    Values of `datasets` are dataset artifact URIs (curate's `rl_<task>`) or problem sources.
    Every row must belong to the task it is listed under: its verifier is that task's. A task
    whose dataset has no rows is left out (its line says which curate run wrote it); when every
    dataset is empty, EmptyTrainingSet says so in one line, before any engine or trainer opens.
    """
    from passband.tasks.steps.evaluation import problem_rows

    loaded = {name: problem_rows(ref, run_id) for name, ref in datasets.items()}
    empty = [_empty_dataset_line(name, datasets[name]) for name, rows in loaded.items() if not rows]
    if empty and len(empty) == len(loaded):
        raise EmptyTrainingSet("rl: nothing to train on, every dataset is empty: " + "; ".join(empty)
                               + " (a curate run's `removed` artifact and its RL-sets table say where the problems went)")
    problems, dropped = {}, {}
    for name, rows in loaded.items():
        if not rows:
            continue
        wrong = [row["id"] for row in rows if row["task"] != name]
        if wrong:
            raise ValueError(f"datasets.{name}: rows {wrong[:3]} ({len(wrong)} in all) are not {name!r} rows; "
                             "list each dataset under its own task")
        problems[name] = [row for row in rows if not asks_held_out(row["prompt"], held_out)]
        dropped[name] = len(rows) - len(problems[name])
        if not problems[name]:
            raise ValueError(f"datasets.{name}: every one of its {len(rows)} prompts is an eval prompt")
    return problems, dropped, empty


def _empty_dataset_line(name: str, ref: str | ProblemSource) -> str:
    """"datasets.<name> (<where>)", with the run that wrote it when it is a committed artifact."""
    from passband.tasks.artifacts.store import artifact_manifest

    if not isinstance(ref, str):
        return f"datasets.{name} ({ref.path or ref.suite})"
    manifest = artifact_manifest(ref)
    producer = manifest["extra"].get("mlflow_run_id")
    made_by = f"the {manifest['flow']} run {producer}" if producer else f"a {manifest['flow']} run"
    return f"datasets.{name} ({ref}, written by {made_by})"


@task(name="score-rollouts", cache_policy=NONE)
def score_rollouts(
    rows: list[dict[str, Any]], samples: list[list[Sample]], verifiers: VerifierSettings,
    judges: dict[str, Judge] | None = None,
) -> tuple[list[list[float | None]], list[list[bool]], dict[str, float], list[dict[str, Any]], list[list[Any]]]:
    """(rewards, valid) per prompt and sample, the metrics `<task>/num_<status>` (rollouts per
    verifier status), one record per judged rollout (empty without judges), and every sample's
    verdict (status, score, detail).

    reward = verifier score where the status is a verdict (SCORED_STATUSES); otherwise None and
    invalid. One grouped verification: each task's verifier is called once; a task in `judges`
    is scored by its judge model instead (training/judge/), with the same statuses, and its
    records hold the rollout, the verdict and the judge's texts and scores;
    `<task>/num_judge_samples` counts the judge's generations.
    """
    from passband.training.judge.score import judgement_columns, score_groups

    verdicts, judgements = score_groups([row["task"] for row in rows], [row["prompt"] for row in rows],
                                        [row["reference"] for row in rows],
                                        [[sample.text for sample in group] for group in samples], verifiers, judges or {})
    rewards, valid, counts = [], [], {}
    for row, results in zip(rows, verdicts, strict=True):
        valid.append([r.status in SCORED_STATUSES for r in results])
        rewards.append([r.score if r.status in SCORED_STATUSES else None for r in results])
        for r in results:
            name = f"{row['task']}/num_{r.status}"
            counts[name] = counts.get(name, 0.0) + 1.0
    records = []
    for (i, j), judgement in judgements.items():
        name = f"{rows[i]['task']}/num_judge_samples"
        counts[name] = counts.get(name, 0.0) + judgement.num_samples
        result = judgement.result
        records.append({"prompt_id": rows[i]["id"], "task": rows[i]["task"], "sample_index": j,
                        "text": samples[i][j].text, "status": result.status, "score": result.score,
                        "detail": result.detail} | judgement_columns(judgement))
    return rewards, valid, counts, records, verdicts


def push_weights(model: Any, engine: RolloutEngine, engine_config: EngineConfig, scratch: Path, version: int,
                 adapter_only: bool = False) -> Path | None:
    """Hand the trainer's current weights to the engine: published as `version` under
    `scratch/weights` in the engine's dtype (training/weights/versions.py, the path rollout workers
    in other processes load from; one version kept here), then reloaded in place. `adapter_only`:
    LoRA's adapters alone, which the engine applies to its base. The version's folder; None with
    `weight_transfer: memory`, where the same tensors go to the engine without a file."""
    if engine_config.weight_transfer == "memory":
        import torch

        from passband.training.lora.adapters import merged_state
        from passband.training.weights.engine_dtype import engine_tensors, head_name

        dtype = getattr(torch, engine_config.resolved_dtype())
        engine.load_state(engine_tensors(merged_state(model), head_name(model), dtype, engine_config.lm_head_fp32,
                                         to_host=False))
        return None
    root = scratch / "weights"
    published = publish_version(model, root, version, engine_config.resolved_dtype(), engine_config.lm_head_fp32,
                                keep=1, adapter_only=adapter_only)
    load_version(engine, root, version)
    return published


def checkpoint_key(run_key: str, iteration: int) -> str:
    return f"{CHECKPOINT_ROOT}/{run_key}/iter-{iteration:06d}"


def last_checkpoint_iteration(run_key: str, num_iterations: int) -> int | None:
    """The iteration of the newest committed checkpoint of this run key, or None."""
    keys = {checkpoint_key(run_key, i): i for i in range(num_iterations, 0, -1)}
    key = newest_committed(keys)
    return None if key is None else keys[key]


def checkpoint_uri(run_key: str, iteration: int) -> str:
    return open_store().uri(checkpoint_key(run_key, iteration))


def open_rl_trainer(model_dir: str, tasks: list[str], algo: Any, resume_uri: str | None,
                    trust_remote_code: bool = False) -> RLTrainer:
    """The trainer at `model_dir`, or continued from the committed checkpoint at `resume_uri`; with
    `algo.lora.start: continue`, on the base of `model_dir`'s adapter; `trust_remote_code`: the model's
    own code allowed (EngineConfig.trust_remote_code)."""
    base_dir = None
    if algo.lora is not None and algo.lora.start == "continue":
        base_dir = Path(lora_adapter_base(Path(model_dir), algo.lora.rank, algo.lora.alpha))
    return open_trainer(Path(model_dir), tasks, algo, fetch_artifact(resume_uri) if resume_uri else None, base_dir,
                        trust_remote_code)


@dataclass
class InProcessTrainer:
    """The RL trainer in the flow's own process behind the loop's interface (training/rl/trainer.py:
    PolicyTrainer): the update is `rl_update` on its model; its weights are published under
    `scratch/weights` in the engine's dtype, or handed to the engine in place (`push_weights`)."""

    trainer: RLTrainer
    algo: RLAlgoConfig
    engine: EngineConfig
    scratch: Path
    keep_versions: int
    """Weight versions kept under `weights_root` (the rollouts ahead read k + 1)."""
    adapter_only: bool
    """Each version is LoRA's adapters alone, which the engine applies to its base."""

    @property
    def tokenizer(self) -> Any:
        return self.trainer.tokenizer

    @property
    def weights_dir(self) -> Path:
        return self.trainer.weights_dir

    @property
    def base_dir(self) -> Path | None:
        return self.trainer.base_dir

    @property
    def state(self) -> RLState:
        return self.trainer.state

    @property
    def weights_root(self) -> Path:
        return self.scratch / "weights"

    def update(self, batch: RolloutBatch, seed: int, version: int) -> dict[str, float]:
        """One `rl_update` (Clip-Cov's random choice seeded with `seed`); the weights are published later, by
        the loop's weight-sync phase (`hand_over`)."""
        import torch

        from passband.training.rl.update import rl_update

        trainer = self.trainer
        generator = torch.Generator().manual_seed(seed)
        return rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, self.algo, generator)

    def publish(self, version: int) -> Path:
        return publish_version(self.trainer.model, self.weights_root, version, self.engine.resolved_dtype(),
                               self.engine.lm_head_fp32, keep=self.keep_versions, adapter_only=self.adapter_only)

    def hand_over(self, engine: RolloutEngine, version: int, ahead: bool) -> Path | None:
        """Ahead: published for the rollout thread, the engine untouched (the thread loads what it needs when
        it needs it); else pushed into `engine` (`push_weights`)."""
        if ahead:
            return self.publish(version)
        return push_weights(self.trainer.model, engine, self.engine, self.scratch, version, self.adapter_only)

    def save(self, out_dir: Path) -> Path:
        return save_trainer(self.trainer, out_dir)

    def release(self) -> None:
        release_for_engine(self.trainer)

    def close(self) -> None:
        """Nothing runs beside this process: AdamW's state and the device's cache go now (close_trainer),
        the model with the object."""
        close_trainer(self.trainer)


@contextmanager
def rl_trainer(model_dir: str, tasks: list[str], algo: Any, resume_uri: str | None, distributed: DistributedConfig,
               scratch: Path, engine_config: EngineConfig, keep_versions: int = 1,
               adapter_only: bool = False) -> Iterator[PolicyTrainer]:
    """The in-process trainer (`open_rl_trainer`), or with distributed.launches_ranks the
    torchrun ranks serving it (tasks/steps/rl_torchrun.py, their files under `scratch/ranks`); both
    publish each update in `engine_config`'s dtype under their `weights_root`, the `keep_versions`
    newest kept; stopped at the end."""
    if not distributed.launches_ranks:
        trainer = InProcessTrainer(open_rl_trainer(model_dir, tasks, algo, resume_uri, engine_config.trust_remote_code),
                                   algo, engine_config, scratch,
                                   keep_versions, adapter_only)
        try:
            yield trainer
        finally:  # its memory back for the engines that follow, whether the loop ended or raised
            trainer.close()
        return
    resume_dir = fetch_artifact(resume_uri) if resume_uri else None
    with trainer_ranks(Path(model_dir), tasks, algo, resume_dir, distributed, scratch / "ranks", engine_config,
                       keep_versions) as trainer:
        yield trainer


def save_rl_checkpoint(trainer: PolicyTrainer, run_key: str, config: dict[str, Any]) -> str:
    """Checkpoint the trainer (weights, optimizer, RNG, RLState) as an artifact; its URI. The copy it
    wrote (in a scratch dir, or in the ranks' work dir, where rank 0 writes it) is deleted once committed."""
    iteration = trainer.state.iteration
    key, extra = checkpoint_key(run_key, iteration), {"iteration": iteration}
    with scratch_dir("rl-checkpoint-") as scratch:
        path = trainer.save(scratch)
        uri = commit_checkpoint(str(path), key, "rl", config, extra)
        shutil.rmtree(path)
        return uri
