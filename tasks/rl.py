"""Prefect tasks and I/O of the RL flow: problems in, verifier scores, weight sync, checkpoints.

Checkpoints are artifacts at `checkpoints/rl/<run key>/iter-NNNNNN` (save_checkpoint into a
scratch dir, committed manifest-last, the scratch copy deleted). The run key hashes the resolved
config (minus run-control fields) and the code version, so a rerun of the same config finds its
own checkpoints and nobody else's; the newest is found by probing iterations newest first.
trainer_state.json of each checkpoint holds the iteration, the prompt cursor (prompts drawn per
task), the prompt ids of that iteration, the best checkpoint so far and the summary metrics.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.tasks.provenance import code_version
from passband.tasks.settings import StackSettings
from passband.tasks.store import fetch_artifact, open_store
from passband.training.engines.protocol import RolloutEngine, Sample

CHECKPOINT_ROOT = "checkpoints/rl"
SCORED_STATUSES = ("pass", "fail", "timeout")
"""Verifier statuses that are a verdict on the output (reward = score). `unparsable` (no answer to
judge) and `error` (the verifier itself failed) are masked out of the gradient instead."""


def prompt_key(prompt: str | list[dict[str, str]]) -> str:
    """A comparable form of a prompt (plain text or chat messages)."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def load_rl_problems(
    datasets: dict[str, str | dict[str, Any]], exclude_prompts: set[str], run_id: str | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """(task -> rows, task -> rows dropped because their prompt is an eval prompt).

    Values of `datasets` are dataset artifact URIs (curate's `rl_<task>`) or ProblemSource dicts.
    Every row must belong to the task it is listed under: its verifier is that task's.
    """
    from passband.tasks.evaluation import eval_sets_from

    uris = {name: ref for name, ref in datasets.items() if isinstance(ref, str)}
    sources = {name: ref for name, ref in datasets.items() if not isinstance(ref, str)}
    loaded = eval_sets_from(uris, sources, run_id=run_id)
    problems, dropped = {}, {}
    for name, rows in loaded.items():
        wrong = [row["id"] for row in rows if row["task"] != name]
        if wrong:
            raise ValueError(f"datasets.{name}: rows {wrong[:3]} ({len(wrong)} in all) are not {name!r} rows; "
                             "list each dataset under its own task")
        problems[name] = [row for row in rows if prompt_key(row["prompt"]) not in exclude_prompts]
        dropped[name] = len(rows) - len(problems[name])
        if not problems[name]:
            raise ValueError(f"datasets.{name}: every one of its {len(rows)} prompts is an eval prompt")
    return problems, dropped


@task(name="score-rollouts", cache_policy=NONE)
def score_rollouts(
    rows: list[dict[str, Any]], samples: list[list[Sample]], verifier_settings: dict[str, dict[str, Any]],
) -> tuple[list[list[float | None]], list[list[bool]], dict[str, int]]:
    """(rewards, valid, status counts "<task>/<status>") per prompt and sample.

    reward = verifier score where the status is a verdict (SCORED_STATUSES); otherwise None and
    invalid. One batched `verify` call per task.
    """
    from passband.curation.verifiers import verify

    verdicts: dict[tuple[int, int], Any] = {}
    for task_name in sorted({row["task"] for row in rows}):
        pairs = [(p, s) for p, row in enumerate(rows) if row["task"] == task_name for s in range(len(samples[p]))]
        results = verify(task_name, [samples[p][s].text for p, s in pairs], [rows[p]["reference"] for p, _ in pairs],
                         **verifier_settings[task_name])
        verdicts.update(zip(pairs, results, strict=True))
    rewards, valid, counts = [], [], {}
    for p, group in enumerate(samples):
        results = [verdicts[p, s] for s in range(len(group))]
        valid.append([r.status in SCORED_STATUSES for r in results])
        rewards.append([r.score if r.status in SCORED_STATUSES else None for r in results])
        for r in results:
            name = f"{rows[p]['task']}/{r.status}"
            counts[name] = counts.get(name, 0) + 1
    return rewards, valid, counts


def push_weights(model: Any, engine: RolloutEngine, scratch: Path) -> None:
    """Hand the trainer's current weights to the engine (safetensors in `scratch`, in-place reload)."""
    target = scratch / "weights"
    if target.exists():
        shutil.rmtree(target)
    model.save_pretrained(target)
    engine.load_weights(target)


def checkpoint_key(run_key: str, iteration: int) -> str:
    return f"{CHECKPOINT_ROOT}/{run_key}/iter-{iteration:06d}"


def last_checkpoint_iteration(run_key: str, num_iterations: int) -> int | None:
    """The iteration of the newest committed checkpoint of this run key, or None."""
    store = open_store()
    return next((i for i in range(num_iterations, 0, -1) if store.exists(checkpoint_key(run_key, i))), None)


def checkpoint_uri(run_key: str, iteration: int) -> str:
    return open_store().uri(checkpoint_key(run_key, iteration))


@task(name="commit-rl-checkpoint", retries=2, retry_delay_seconds=5, cache_policy=NONE)
def commit_rl_checkpoint(local_dir: str, key: str, config: dict[str, Any], extra: dict[str, Any]) -> str:
    """Commit a checkpoint directory (manifest last) and return its URI."""
    store = open_store()
    store.commit(key, Path(local_dir), flow="rl", config=config, code_version=code_version(), extra=extra)
    return store.uri(key)


def save_rl_checkpoint(trainer: "RLTrainer", run_key: str, config: dict[str, Any]) -> str:
    """Checkpoint the trainer (weights, optimizer, RNG, trainer_state) as an artifact; its URI."""
    from passband.training.checkpoint import save_checkpoint

    iteration = trainer.state["iteration"]
    home = StackSettings.from_env().home
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rl-checkpoint-", dir=home) as scratch:
        path = save_checkpoint(Path(scratch), f"iter-{iteration:06d}", trainer.model, trainer.tokenizer,
                               trainer.optimizer, trainer.state)
        return commit_rl_checkpoint(str(path), checkpoint_key(run_key, iteration), config, {"iteration": iteration})


@dataclass
class RLTrainer:
    """The fp32 policy being trained, its optimizer, the frozen reference, and the loop's state."""

    model: Any
    optimizer: Any
    ref_model: Any | None
    tokenizer: Any
    weights_dir: str
    """Where the engine loads its first weights from (the start model or the resumed checkpoint)."""
    state: dict[str, Any]
    """iteration (completed), consumed (prompts drawn per task), prompt_ids (of the last
    iteration), best ({metric, value, iteration, uri} or None), metrics (the summary so far)."""


def open_trainer(model_dir: str, tasks: list[str], algo: Any, resume_uri: str | None) -> RLTrainer:
    """A fresh trainer at `model_dir`, or one continued from the checkpoint at `resume_uri`.

    The reference model (only loaded when algo.kl_coef > 0) is always `model_dir`, the start.
    """
    from passband.training.checkpoint import load_checkpoint, restore_rng_state
    from passband.training.model_source import load_causal_lm, load_tokenizer
    from passband.training.rl.update import build_optimizer

    weights_dir = str(fetch_artifact(resume_uri)) if resume_uri else model_dir
    # eval(): no dropout, so the trainer's log-probs at theta_k are deterministic (RL needs that).
    model = load_causal_lm(Path(weights_dir)).eval()
    optimizer = build_optimizer(model, algo)
    state: dict[str, Any] = {"iteration": 0, "consumed": {name: 0 for name in tasks}, "prompt_ids": [],
                             "best": None, "metrics": {}}
    if resume_uri:
        loaded = load_checkpoint(Path(weights_dir))
        optimizer.load_state_dict(loaded.optimizer_state)
        restore_rng_state(loaded.rng_state)
        state = loaded.trainer_state
    ref_model = load_causal_lm(Path(model_dir)).eval().requires_grad_(False) if algo.kl_coef > 0 else None
    return RLTrainer(model, optimizer, ref_model, load_tokenizer(Path(model_dir)), weights_dir, state)


def evaluate_policy(
    engine: RolloutEngine, model_dir: str, eval_sets: dict[str, list[dict[str, Any]]], sampling: Any,
    engine_kind: str, engine_cfg: dict[str, Any], verifier_settings: dict[str, dict[str, Any]],
    system_prompt: str | None, label: str, run_id: str,
) -> tuple[dict[str, float], dict[str, float]]:
    """(per-set and mean pass@k, every report metric) of the engine's CURRENT weights.

    The RL engine itself samples (no second engine); `model_dir` only supplies the chat template.
    The per-sample rows are logged as the MLflow artifact `eval/<label>.jsonl`.
    """
    from passband.tasks import tracking
    from passband.tasks.evaluation import evaluate_checkpoint

    report, rows = evaluate_checkpoint(model_dir, eval_sets, sampling, engine_kind, engine_cfg, verifier_settings,
                                       engine=engine, system_prompt=system_prompt)
    every = report.metrics()
    per_set = {name: value for name, value in every.items() if name.count("/") == 1}
    for k in range(1, sampling.n + 1):
        per_set[f"mean/pass@{k}"] = sum(per_set[f"{name}/pass@{k}"] for name in eval_sets) / len(eval_sets)
    with tempfile.TemporaryDirectory(prefix="passband-rl-eval-") as tmp:
        path = Path(tmp) / f"{label}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        tracking.log_artifact_file(path, "eval", run_id)
    return per_set, every
